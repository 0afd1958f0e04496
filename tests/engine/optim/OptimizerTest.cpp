// AdamW / SGD against fp64 reference updates written from the PyTorch docs, and clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/kernels/DynamicMap.h"

using namespace ts::engine;

namespace {
GptConfig tiny() {
  GptConfig c;
  c.layers = 1;
  c.heads = 2;
  c.d_model = 8;
  c.seq_len = 4;
  c.vocab = 9;
  return c;
}
void fillGrads(Gpt& m, int k) {
  float* g = m.gradBuffer().f32();
  for (int64_t i = 0; i < m.numParams(); ++i) g[i] = std::sin(0.37f * i + k) * 0.1f;
}
}  // namespace

TEST(Optimizer, AdamWMatchesReferenceAndSkipsDecayOnBiasesAndNorms) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(tiny(), backend.get(), &tracker);
  m.initWeights(5);
  ts::core::OptimizerConfig oc;
  oc.type = "adamw";
  oc.betas = {0.8, 0.95};
  oc.eps = 1e-6;
  oc.weight_decay = 0.5;
  auto opt = makeOptimizer(oc, m.arena(), backend.get(), &tracker);
  const int64_t P = m.numParams();
  std::vector<double> p(m.paramBuffer().f32(), m.paramBuffer().f32() + P), mm(P, 0), vv(P, 0);
  std::vector<bool> decay(P);
  for (const auto& info : m.params())
    for (int64_t i = 0; i < info.numel; ++i) decay[info.offset + i] = info.decay;
  const double lr = 0.01;
  for (int t = 1; t <= 3; ++t) {
    fillGrads(m, t);
    const float* g = m.gradBuffer().f32();
    for (int64_t i = 0; i < P; ++i) {
      if (decay[i]) p[i] -= lr * 0.5 * p[i];
      mm[i] = 0.8 * mm[i] + 0.2 * g[i];
      vv[i] = 0.95 * vv[i] + 0.05 * double(g[i]) * g[i];
      const double mh = mm[i] / (1 - std::pow(0.8, t)), vh = vv[i] / (1 - std::pow(0.95, t));
      p[i] -= lr * mh / (std::sqrt(vh) + 1e-6);
    }
    opt->step(float(lr));
  }
  EXPECT_EQ(opt->stepCount(), 3);
  const float* q = m.paramBuffer().f32();
  for (int64_t i = 0; i < P; ++i) ASSERT_NEAR(q[i], p[i], 2e-6 + 1e-5 * std::abs(p[i])) << i;
  // A LayerNorm weight starts at 1: with decay it would have shrunk by lr*wd per step.
  EXPECT_FALSE(m.find("h.0.ln_1.weight")->decay);
  EXPECT_TRUE(m.find("h.0.mlp.c_fc.weight")->decay);
}

TEST(Optimizer, SgdMomentumMatchesReference) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(tiny(), backend.get(), &tracker);
  m.initWeights(6);
  ts::core::OptimizerConfig oc;
  oc.type = "sgd";
  oc.momentum = 0.9;
  oc.weight_decay = 0.0;
  auto opt = makeOptimizer(oc, m.arena(), backend.get(), &tracker);
  const int64_t P = m.numParams();
  std::vector<double> p(m.paramBuffer().f32(), m.paramBuffer().f32() + P), buf(P, 0);
  for (int t = 1; t <= 3; ++t) {
    fillGrads(m, t);
    const float* g = m.gradBuffer().f32();
    for (int64_t i = 0; i < P; ++i) {
      buf[i] = t == 1 ? g[i] : 0.9 * buf[i] + g[i];
      p[i] -= 0.1 * buf[i];
    }
    opt->step(0.1f);
  }
  const float* q = m.paramBuffer().f32();
  for (int64_t i = 0; i < P; ++i) ASSERT_NEAR(q[i], p[i], 1e-6 + 1e-5 * std::abs(p[i])) << i;
}

TEST(Optimizer, GlobalNormClipping) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(tiny(), backend.get(), &tracker);
  fillGrads(m, 1);
  double ss = 0;
  for (int64_t i = 0; i < m.numParams(); ++i)
    ss += double(m.gradBuffer().f32()[i]) * m.gradBuffer().f32()[i];
  const double norm = std::sqrt(ss);
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), 0.0), norm, 1e-6 * norm);  // 0 = off
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), norm * 2), norm,
              1e-6 * norm);  // below: unchanged
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), norm / 4), norm,
              1e-6 * norm);  // returns pre-clip
  EXPECT_NEAR(clipGradNorm(m.arena(), backend.get(), 0.0), norm / 4, 1e-5 * norm);
}

// 8-bit AdamW against bitsandbytes (tools/make_nf4_golden.py, tests/data/nf4/: its CPU
// AdamW8bit, 5 steps on 4160 elements = 16 full blocks of 256 and a short one). The dynamic maps
// equal bitsandbytes' create_dynamic_map; exact nearest codes equal the script's exact-nearest
// codes (bitsandbytes' CPU quantizer rounds through a lookup table, so its own codes may be one
// entry away, and its CPU Adam decays before the step, CUDA after, as the engine does:
// README.md). The parameters track bitsandbytes' to within 1% (L2) of how far they moved (measured
// 0.001-0.15%).
TEST(Adam8bitGolden, MapsCodesAndUpdatesMatchBitsandbytes) {
  const std::string dir = std::string(TRAINSCOPE_TEST_DATA) + "/nf4/";
  auto q8 = SafetensorsFile::load(dir + "blockwise8.safetensors");
  const auto ms = ts::kernels::dynamicMap(true), mu = ts::kernels::dynamicMap(false);
  const auto bs = q8.f32("map.signed"), bu = q8.f32("map.unsigned");
  for (size_t k = 0; k < 256; ++k) {
    EXPECT_NEAR(ms[k], bs[k], 1e-7 * std::abs(bs[k])) << "signed " << k;
    EXPECT_NEAR(mu[k], bu[k], 1e-7 * std::abs(bu[k])) << "unsigned " << k;
  }
  for (const char* kind : {"signed", "unsigned"}) {
    const std::string k = kind;
    const auto x = q8.f32(k + ".input"), absmax = q8.f32(k + ".absmax");
    const auto nearest = q8.bytes(k + ".codes_nearest"), bnb = q8.bytes(k + ".codes");
    const auto& map = k == "signed" ? ms : mu;
    int farFromBnb = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float a = absmax[i / 256];
      const uint8_t c = ts::kernels::nearestCode(map.data(), a > 0 ? x[i] * (1.f / a) : 0.f);
      EXPECT_EQ(c, uint8_t(nearest[i])) << kind << " " << i;
      // bitsandbytes' CPU lookup table rounds values below its grid (|v| < ~1.5e-5, zeros, an
      // all-zero block) away from the map's own near-zero entries (README.md): compare above it.
      const float v = a > 0 ? std::abs(x[i] / a) : 0.f;
      if (v > 1e-4f) farFromBnb += std::abs(int(c) - int(uint8_t(bnb[i]))) > 1;
    }
    EXPECT_EQ(farFromBnb, 0) << kind << ": more than one entry from bitsandbytes' codes";
  }
  auto adam = SafetensorsFile::load(dir + "adam8bit.safetensors");
  const auto p0 = adam.f32("param0"), steps = adam.f32("params");
  const auto gq = adam.bytes("grad_q");
  const int64_t n = int64_t(p0.size()), blocks = (n + 255) / 256;
  auto be = ts::kernels::makeCpuBackend();
  std::vector<float> p = p0, absM(size_t(blocks), 0.f), absV(size_t(blocks), 0.f);
  std::vector<uint8_t> qm(size_t(n), ts::kernels::nearestCode(ms.data(), 0.f)),
      qv(size_t(n), ts::kernels::nearestCode(mu.data(), 0.f));
  for (int t = 1; t <= 5; ++t) {
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      g[size_t(i)] = float(int8_t(gq[size_t((t - 1) * n + i)])) * std::ldexp(1.f, -12);
    be->adamw8bitUpdate(p.data(), g.data(), qm.data(), qv.data(), absM.data(), absV.data(),
                        ms.data(), mu.data(), n, 256, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
    double err = 0, moved = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double want = steps[size_t((t - 1) * n + i)];
      err += (p[size_t(i)] - want) * (p[size_t(i)] - want);
      moved += (want - p0[size_t(i)]) * (want - p0[size_t(i)]);
    }
    std::printf("step %d: |p - bitsandbytes| / |bitsandbytes - p0| = %.2e\n", t,
                std::sqrt(err / moved));
    EXPECT_LT(std::sqrt(err / moved), 0.01) << "step " << t;
  }
}

// 8-bit AdamW over ZeRO shards, in one process: with core::ZeroLayout's tensorAlign every
// tensor's blocks of state fall wholly inside one shard, so two shard optimizers update the
// weights bit for bit as one unsharded optimizer does, and the engine's arena offsets are the
// estimator's (zeroTensorOffsets). Without the alignment a shard would cut a block: refused.
TEST(Optimizer, EightBitShardsUpdateAsOneOptimizerBitForBit) {
  auto backend = ts::kernels::makeCpuBackend();
  GptConfig c = tiny();
  c.layers = 2;
  c.d_model = 64;  // 64 x 256 MLP weights: 8-bit state (>= 4096 elements)
  c.heads = 4;
  c.seq_len = 8;
  const int ranks = 2;
  const auto layout = ts::core::zeroLayoutOf(ranks, 1, 8);
  ASSERT_EQ(layout.tensorAlign, ts::core::kAdam8Block);
  c.arenaAlign = layout.align;
  c.arenaPadTo = layout.padTo;
  c.arenaTensorAlign = layout.tensorAlign;
  ts::core::OptimizerConfig oc;
  oc.type = "adamw";
  oc.state_bits = 8;
  oc.weight_decay = 0.1;
  MemoryTracker tracker;
  std::vector<std::unique_ptr<Gpt>> models;
  for (int i = 0; i < 3; ++i) {
    models.push_back(std::make_unique<Gpt>(c, backend.get(), &tracker));
    models.back()->initWeights(5);
  }
  // The arena's offsets are the layout the estimator computes.
  std::vector<ts::core::TensorSpec> specs;
  for (const auto& p : models[0]->params()) specs.push_back(p.spec);
  const auto offsets = ts::core::zeroTensorOffsets(specs, layout);
  int eightBit = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(models[0]->params()[i].gradOffset, offsets[i]) << specs[i].name;
    eightBit += models[0]->params()[i].numel >= ts::core::kAdam8Min;
  }
  ASSERT_GT(eightBit, 0);
  const int64_t G = models[0]->arena().gradSize();
  std::vector<std::unique_ptr<Optimizer>> opts;
  opts.push_back(makeOptimizer(oc, models[0]->arena(), backend.get(), &tracker));
  for (int r = 0; r < ranks; ++r) {
    const auto [lo, hi] = ts::core::zeroShard(G, ranks, r);
    opts.push_back(makeOptimizer(oc, models[size_t(1 + r)]->arena(), backend.get(), &tracker,
                                 OptimizerShard{lo, hi}));
  }
  for (int t = 1; t <= 3; ++t) {
    for (size_t i = 0; i < models.size(); ++i) fillGrads(*models[i], t);
    for (auto& o : opts) o->step(0.01f);
  }
  const float* whole = models[0]->paramBuffer().f32();
  for (int r = 0; r < ranks; ++r) {
    const auto [lo, hi] = ts::core::zeroShard(G, ranks, r);
    const float* mine = models[size_t(1 + r)]->paramBuffer().f32();
    for (int64_t i = lo; i < hi; ++i) ASSERT_EQ(mine[i], whole[i]) << "rank " << r << " at " << i;
  }
  // Without tensorAlign, some shard boundary lands inside a block of a tensor: refused, saying
  // so (rather than quantizing other blocks than one rank would).
  c.arenaTensorAlign = 1;
  Gpt plain(c, backend.get(), &tracker);
  bool refused = false;
  for (int64_t lo = ts::core::kZeroAlign; lo < plain.arena().gradSize() && !refused;
       lo += ts::core::kZeroAlign) {
    try {
      makeOptimizer(oc, plain.arena(), backend.get(), &tracker,
                    OptimizerShard{lo, plain.arena().gradSize()});
    } catch (const std::logic_error& e) {
      refused = true;
      EXPECT_NE(std::string(e.what()).find("cuts a block"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(refused);
}
