// Precision policies end to end through the Trainer: every policy (bf16, fp16, fp8 delayed and
// blockwise, pure_bf16) tracks fp32's loss on the addition task within a stated tolerance, the
// tracker and the estimator show the formula's bytes per policy, fp16 with an absurd initial
// loss scale skips, backs off and then trains without a NaN reaching the weights, and the fp8
// GEMM sees exactly the E4M3 operands an independent reference computes. All but the config check
// run on the CPU backend and on the guarded CPU backend (TestBackends.h), so every policy's path
// (conversions, fp8 quantization, loss scaling, master weights) reaches tensor memory only
// through the backend, as on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>

#include "../support/TestBackends.h"
#include "../support/TrainerHarness.h"
#include "RefFormat.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::engine;
using ts::core::EventType;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;
using ts::testsupport::hostCopy;
namespace fs = std::filesystem;

namespace {

fs::path tempDir(const std::string& name) {
  return ts::testsupport::tempDir("policy_test", name);
}
using ts::testsupport::Recorded;

ts::core::RunConfig smallConfig() {
  auto c = ts::testsupport::tinyAdditionConfig();
  c.train.eval_every = 0;
  return c;
}

// The learning config of tests/engine/train/TrainerTest.cpp (LearnsAdditionToStatedAccuracy).
ts::core::RunConfig learnConfig(const std::string& policy) {
  auto c = smallConfig();
  c.model.heads = 4;
  c.model.d_model = 64;
  c.train.steps = 600;
  c.train.micro_batch = 32;
  c.train.grad_accum = 1;
  c.train.eval_every = 600;
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0.0;
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = 20;
  c.schedule.min_lr = 3e-4;
  c.precision.policy = policy;
  return c;
}

TrainResult runWith(const ts::core::RunConfig& c, Recorded& rec, const std::string& runDir,
                    int exactMatchSamples, const std::string& backend) {
  ts::testsupport::RunOptions o;
  o.backend = backend;
  o.exactMatchSamples = exactMatchSamples;
  return ts::testsupport::runTrainer(c, rec, runDir, o);
}

// GPT-2 parameter count written out independently of the model code (tied head):
// wte V*C + wpe T*C + per layer (2 LayerNorms 4C, c_attn 3C^2+3C, attn.c_proj C^2+C,
// c_fc 4C^2+4C, mlp.c_proj 4C^2+C) + ln_f 2C.
int64_t gpt2Params(int64_t V, int64_t T, int64_t C, int64_t L) {
  return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

double meanLastLosses(const std::vector<nlohmann::json>& steps, size_t n) {
  double s = 0;
  for (size_t i = steps.size() - n; i < steps.size(); ++i) s += steps[i]["loss"].get<double>();
  return s / static_cast<double>(n);
}

// Policy tests on each test backend (GetParam()).
class PrecisionPolicyOn : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dir(const std::string& name) const {
    return tempDir(name + "_" + ts::testsupport::backendTestName(GetParam()));
  }
  TrainResult run(const ts::core::RunConfig& c, Recorded& rec, const std::string& runDir,
                  int exactMatchSamples = 16) const {
    return runWith(c, rec, runDir, exactMatchSamples, GetParam());
  }
  std::unique_ptr<ts::kernels::Backend> backend() const {
    return ts::testsupport::makeTestBackend(GetParam());
  }
};

}  // namespace

TEST(PrecisionPolicy, EngineAcceptsEveryPolicyOnCpuAndCuda) {
  auto c = smallConfig();
  for (const char* backend : {"cpu", "cuda"})
    for (const char* p : {"fp32", "bf16", "fp16", "fp8", "pure_bf16"}) {
      c.device.backend = backend;
      c.precision.policy = p;
      EXPECT_TRUE(unsupportedFeatures(c).empty()) << p << " on " << backend;
    }
  c.device.backend = "cpu";
  c.precision.policy = "fp4";
  auto issues = unsupportedFeatures(c);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "precision.policy");
  // Config validation accepts fp8 where the engine can emulate it, and says why it would not.
  auto doc = ts::core::toJson(smallConfig());
  doc["precision"]["policy"] = "fp8";
  EXPECT_TRUE(ts::core::parseConfigJson(doc).ok());
  ts::core::ValidationContext noFp8;
  noFp8.fp8_emulation = false;
  const auto r = ts::core::parseConfigJson(doc, noFp8);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.issues.front().path, "precision.policy");
}

// Model states per policy against the formula (AdamW), written out here:
//   fp32            4 + 4 + 8 (m, v)                         = 16 B/param
//   bf16, fp16      2 + 2 + 12 (fp32 master, m, v)           = 16 B/param (ZeRO's 2+2+K, K=12)
//   fp8             2 (+1 per block linear weight: the fp8 copy the GEMMs read) + 2 + 12
//   pure_bf16       2 + 2 + 4 (m, v in bf16, no master)      =  8 B/param
// The fp32 compute copies of weights and gradients (no 16-bit arithmetic on this CPU) are
// workspace. The estimator (engine activation model) must predict the same bytes.
TEST_P(PrecisionPolicyOn, TrackerShowsModelStateBytesPerPolicy) {
  const fs::path dir = this->dir("mem");
  const auto cpu = ts::kernels::makeCpuBackend();
  for (const char* policy : {"fp32", "bf16", "fp16", "fp8", "pure_bf16"}) {
    for (const char* recipe : {"delayed", "blockwise"}) {
      const std::string pol = policy;
      if (pol != "fp8" && std::string(recipe) == "blockwise") continue;
      auto c = smallConfig();
      c.train.steps = 2;
      c.precision.policy = policy;
      c.precision.fp8.recipe = recipe;
      const int64_t V = makeDataset(c)->vocabSize();
      const int64_t C = c.model.d_model, L = c.model.layers;
      const int64_t P = gpt2Params(V, c.model.seq_len, C, L);
      const int64_t blockLinear = L * 12 * C * C;  // c_attn 3C^2, c_proj C^2, c_fc/proj 4C^2 each
      Recorded rec;
      auto r = run(c, rec, (dir / (pol + recipe)).string());
      ASSERT_EQ(r.status, "completed") << policy << ": " << r.reason;
      ASSERT_EQ(r.memory.ranks.size(), 1u);
      const auto& m = r.memory.ranks[0];
      int64_t pb = 4 * P, gb = 4 * P, ob = 8 * P;
      if (pol == "bf16" || pol == "fp16") pb = 2 * P, gb = 2 * P, ob = 12 * P;
      if (pol == "fp8") {
        // + fp32 dequantization scales: one per weight (delayed) or per 128x128 block.
        int64_t scales = 0;
        for (auto [oc, ic] : {std::pair{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}})
          scales +=
              std::string(recipe) == "blockwise" ? ((oc + 127) / 128) * ((ic + 127) / 128) : 1;
        pb = 2 * P + blockLinear + 4 * L * scales, gb = 2 * P, ob = 12 * P;
      }
      if (pol == "pure_bf16") pb = 2 * P, gb = 2 * P, ob = 4 * P;
      auto peak = [&](const ts::core::RankMemory& rm, MemoryCategory cat) {
        return rm.at(MemoryTier::Device, cat).peak;
      };
      EXPECT_EQ(peak(m, MemoryCategory::Parameters), pb) << policy;
      EXPECT_EQ(peak(m, MemoryCategory::Gradients), gb) << policy;
      EXPECT_EQ(peak(m, MemoryCategory::OptimizerState), ob) << policy;
      if (pol != "fp8" && pol != "pure_bf16") {
        EXPECT_EQ(pb + gb + ob, 16 * P) << policy;
      }
      // The step events of non-fp16 policies carry the neutral scale.
      if (pol != "fp16")
        for (const auto& s : rec.of(EventType::Step)) {
          EXPECT_EQ(s["loss_scale"].get<double>(), 1.0);
          EXPECT_FALSE(s["skipped"].get<bool>());
        }
      // The estimator's prediction for the same config.
      auto ec = c;
      ec.model.vocab = static_cast<int>(V);
      ec.precision.gemm = ts::engine::useBf16Gemm(c, cpu.get()) ? "bf16" : "fp32";
      const auto est = ts::core::estimateMemory(ec);
      const auto& e = est.report.ranks.at(0);
      for (auto cat :
           {MemoryCategory::Parameters, MemoryCategory::Gradients, MemoryCategory::OptimizerState})
        EXPECT_EQ(peak(e, cat), peak(m, cat)) << policy << " " << ts::core::toString(cat);
      const double wsE = double(peak(e, MemoryCategory::Workspace)),
                   wsM = double(peak(m, MemoryCategory::Workspace));
      EXPECT_NEAR(wsE, wsM, 0.05 * wsM) << policy << " workspace";
    }
  }
  fs::remove_all(dir);
}

// Learning quality per policy on the addition task (learnConfig, 200 steps, default seed), "final
// loss" = mean of the last 50 step losses. Requirements (issue 5): bf16 and fp16 within 2% of
// fp32; fp8 (both recipes) within 5% of bf16; pure_bf16 (no master: updates below half a bf16
// ulp of a weight are lost) within 15% of fp32. All runs must learn (loss < 45% of step 1's).
//
// Why 200 steps and not the 600-step accuracy run: at 600 steps this config is in its
// "grokking" phase, where the outcome depends on the trajectory, not the precision. Measured
// with this config, 600 steps, seeds 1337 (default) / 2 / 3 / 4 / 5: fp32 accuracy 1.00 / 0.08 /
// 0.11 / 0.69 / 1.00 (final loss 0.028 / 0.79 / 0.69 / 0.32 / 0.056), bf16 0.80 / 0.48 / 0.88
// / 1.00 / 0.53 (0.14 / 0.46 / 0.28 / 0.11 / 0.33). bf16 is not worse than fp32 there (mean
// accuracy 0.74 vs 0.58); the earlier "bf16 misses the target" compared the default seed only,
// fp32's lucky side. Before that phase the trajectories are smooth and comparable, so that is where
// the 2% is checked.
TEST_P(PrecisionPolicyOn, EveryPolicyTracksFp32Loss) {
  const fs::path dir = this->dir("learn");
  std::map<std::string, double> loss;
  double first = 0;
  for (const char* policy :
       {"fp32", "bf16", "bf16-gemm", "fp16", "fp8", "fp8-block", "pure_bf16"}) {
    const std::string pol = policy;
    auto c = learnConfig(pol == "fp8-block" ? "fp8" : pol == "bf16-gemm" ? "bf16" : pol);
    if (pol == "fp8-block") c.precision.fp8.recipe = "blockwise";
    // bf16 GEMMs (bf16-rounded activations and output gradients), emulated without AMX.
    if (pol == "bf16-gemm") c.precision.gemm = "bf16";
    c.train.steps = 200;
    c.train.eval_every = 0;
    Recorded rec;
    auto r = run(c, rec, (dir / pol).string(), 0);
    ASSERT_EQ(r.status, "completed") << pol << ": " << r.reason;
    const auto steps = rec.of(EventType::Step);
    ASSERT_EQ(steps.size(), 200u) << pol;
    for (const auto& st : steps) ASSERT_TRUE(std::isfinite(st["loss"].get<double>())) << pol;
    loss[pol] = meanLastLosses(steps, 50);
    if (pol == "fp32") first = steps.front()["loss"].get<double>();
    EXPECT_LT(loss[pol], 0.45 * first) << pol << " did not learn";
  }
  auto rel = [&](const char* a, const char* b) { return (loss[a] - loss[b]) / loss[b]; };
  std::printf(
      "final loss (mean of last 50 steps): fp32 %.5f | bf16 %.5f (%+.2f%%) | bf16 GEMMs %.5f "
      "(%+.2f%%) | fp16 %.5f (%+.2f%%) | fp8 %.5f (%+.2f%% vs bf16) | fp8-block %.5f (%+.2f%% "
      "vs bf16) | pure_bf16 %.5f (%+.2f%%)\n",
      loss["fp32"], loss["bf16"], 100 * rel("bf16", "fp32"), loss["bf16-gemm"],
      100 * rel("bf16-gemm", "fp32"), loss["fp16"], 100 * rel("fp16", "fp32"), loss["fp8"],
      100 * rel("fp8", "bf16"), loss["fp8-block"], 100 * rel("fp8-block", "bf16"),
      loss["pure_bf16"], 100 * rel("pure_bf16", "fp32"));
  EXPECT_LE(std::fabs(rel("bf16", "fp32")), 0.02);
  EXPECT_LE(std::fabs(rel("bf16-gemm", "fp32")), 0.02);
  EXPECT_LE(std::fabs(rel("fp16", "fp32")), 0.02);
  EXPECT_LE(std::fabs(rel("fp8", "bf16")), 0.05);
  EXPECT_LE(std::fabs(rel("fp8-block", "bf16")), 0.05);
  EXPECT_LE(std::fabs(rel("pure_bf16", "fp32")), 0.15);
  fs::remove_all(dir);
}

// fp16 with an initial scale of 2^40: the scaled gradients overflow fp16, so the first steps are
// skipped with the scale halved each time (GradScaler backoff) until it fits; then the run
// trains. A NaN/inf reaching the weights would make every later loss non-finite.
TEST_P(PrecisionPolicyOn, Fp16HugeLossScaleSkipsBacksOffThenTrains) {
  auto c = smallConfig();
  c.train.steps = 60;
  c.train.micro_batch = 16;
  c.train.grad_accum = 1;
  c.optimizer.lr = 3e-3;
  c.precision.policy = "fp16";
  c.precision.loss_scale.init = std::ldexp(1.0, 40);
  const fs::path dir = this->dir("fp16");
  Recorded rec;
  auto r = run(c, rec, dir.string());
  ASSERT_EQ(r.status, "completed") << r.reason;
  const auto steps = rec.of(EventType::Step);
  ASSERT_EQ(steps.size(), 60u);
  ASSERT_TRUE(steps[0]["skipped"].get<bool>());
  EXPECT_EQ(steps[0]["loss_scale"].get<double>(), std::ldexp(1.0, 40));
  int skipped = 0;
  size_t firstApplied = steps.size();
  for (size_t i = 0; i < steps.size(); ++i) {
    const double loss = steps[i]["loss"].get<double>();
    ASSERT_TRUE(std::isfinite(loss)) << "step " << i + 1;
    const bool sk = steps[i]["skipped"].get<bool>();
    if (sk) ++skipped;
    if (!sk && firstApplied == steps.size()) firstApplied = i;
    if (i > 0) {
      // Backoff 0.5 after a skipped step, unchanged after a clean one (growth every 2000).
      const double prev = steps[i - 1]["loss_scale"].get<double>();
      const double expect = steps[i - 1]["skipped"].get<bool>() ? prev * 0.5 : prev;
      EXPECT_EQ(steps[i]["loss_scale"].get<double>(), expect) << "step " << i + 1;
    }
  }
  // 2^40 needs several halvings before |scaled grad| < 65504.
  EXPECT_GE(skipped, 5);
  ASSERT_LT(firstApplied, 40u);
  for (size_t i = 0; i < firstApplied; ++i) EXPECT_TRUE(steps[i]["skipped"].get<bool>());
  // Trained after the backoff: the loss went down, weights stayed finite.
  const double before = steps[firstApplied]["loss"].get<double>();
  EXPECT_LT(steps.back()["loss"].get<double>(), before * 0.8);
  EXPECT_TRUE(std::isfinite(r.finalLoss));
  fs::remove_all(dir);
}

namespace {
// One block, d_model 160 (4C = 640: several 128x128 fp8 blocks with partial edges), bf16
// working weights: the model the GEMM-operand tests inspect.
GptConfig oneBlockBf16(GptConfig::Fp8Recipe fp8 = GptConfig::Fp8Recipe::None,
                       bool bf16Gemm = false) {
  GptConfig g;
  g.layers = 1;
  g.heads = 2;
  g.d_model = 160;
  g.seq_len = 8;
  g.vocab = 16;
  g.working = ts::engine::DType::BF16;
  g.fp8 = fp8;
  g.bf16Gemm = bf16Gemm;
  return g;
}
}  // namespace

// The fp8 weight copies the GEMMs read are the E4M3 encodings of the bf16 weights with the
// recipe's scales, recomputed here independently (RefEncoder: exact midpoint rounding).
TEST_P(PrecisionPolicyOn, Fp8WeightCopiesAreE4M3OfTheBf16Weights) {
  using ts::test::kE4M3;
  using ts::test::RefEncoder;
  const RefEncoder enc(kE4M3);
  for (auto recipe : {GptConfig::Fp8Recipe::Delayed, GptConfig::Fp8Recipe::Blockwise}) {
    const GptConfig g = oneBlockBf16(recipe);
    auto backend = this->backend();
    MemoryTracker tracker;
    Gpt model(g, backend.get(), &tracker);
    model.initWeights(3);  // quantized once: delayed uses scale 1 (empty history)
    model.setWeightsFrom(model.paramBuffer().f32());  // delayed: scale from that amax now
    const auto w8 = hostCopy<uint8_t>(model.fp8Weights());
    const auto weights = hostCopy(model.paramBuffer());
    for (int j = 0; j < 4; ++j) {
      const auto& site = model.fp8Site(0, j);
      const float* w = weights.data() + site.w->offset;
      const int64_t OC = site.w->shape[0], IC = site.w->shape[1];
      const int64_t tr = recipe == GptConfig::Fp8Recipe::Blockwise ? 128 : OC;
      const int64_t tc = recipe == GptConfig::Fp8Recipe::Blockwise ? 128 : IC;
      for (int64_t r0 = 0; r0 < OC; r0 += tr)
        for (int64_t c0 = 0; c0 < IC; c0 += tc) {
          double a = 0;
          for (int64_t r = r0; r < std::min(OC, r0 + tr); ++r)
            for (int64_t c = c0; c < std::min(IC, c0 + tc); ++c)
              a = std::max(a, std::fabs(double(w[r * IC + c])));
          const float scale = 448.f / float(a);
          for (int64_t r = r0; r < std::min(OC, r0 + tr); ++r)
            for (int64_t c = c0; c < std::min(IC, c0 + tc); ++c) {
              const float x = w[r * IC + c];
              ASSERT_EQ(ts::test::bitsOf(x) & 0xFFFFu, 0u) << "weight not bf16";
              ASSERT_EQ(w8[site.w8Offset + r * IC + c], enc.encode(x * scale, true))
                  << "site " << j << " (" << r << ", " << c << ")";
            }
        }
    }
  }
}

// The emulated fp8 GEMM multiplies exactly the quantized operands: c_attn's output after one
// forward equals a double-precision product of the E4M3 input (ln_1's output) and E4M3 weights,
// each quantized here with the recipe's scales (first delayed forward: scale 1, the history is
// empty; blockwise: 448 / amax per 1x128 input tile and per 128x128 weight block), plus the bias.
TEST_P(PrecisionPolicyOn, Fp8GemmSeesTheQuantizedOperands) {
  using ts::test::kE4M3;
  using ts::test::refDecode;
  const ts::test::RefEncoder enc(kE4M3);
  for (auto recipe : {GptConfig::Fp8Recipe::Delayed, GptConfig::Fp8Recipe::Blockwise}) {
    const bool block = recipe == GptConfig::Fp8Recipe::Blockwise;
    const GptConfig g = oneBlockBf16(recipe);
    auto backend = this->backend();
    MemoryTracker tracker;
    Gpt model(g, backend.get(), &tracker);
    model.initWeights(5);
    const int B = 2, T = 8, N = B * T, C = g.d_model;
    model.allocate(B);
    std::vector<int32_t> tok(N);
    for (int i = 0; i < N; ++i) tok[size_t(i)] = (i * 7 + 3) % g.vocab;
    model.forward(tok.data(), nullptr, B, T, 0.f);
    const auto& a = model.activations().blocks[0];
    const auto ln1 = hostCopy(a.attn.in.data), qkv = hostCopy(a.attn.qkv.data),
               weights = hostCopy(model.paramBuffer());
    const float* x = ln1.data();
    const auto& site = model.fp8Site(0, 0);
    const float* w = weights.data() + site.w->offset;
    const float* bias = weights.data() + model.find("h.0.attn.c_attn.bias")->offset;
    const int OC = 3 * C;
    // Quantize-dequantize a rows x cols matrix with tiles tr x tc (scale 1 when !block).
    auto fake = [&](const float* v, int rows, int cols, int tr, int tc) {
      std::vector<double> out(size_t(rows) * cols);
      for (int r0 = 0; r0 < rows; r0 += tr)
        for (int c0 = 0; c0 < cols; c0 += tc) {
          double am = 0;
          for (int r = r0; r < std::min(rows, r0 + tr); ++r)
            for (int c = c0; c < std::min(cols, c0 + tc); ++c)
              am = std::max(am, std::fabs(double(v[r * cols + c])));
          const float s = block ? 448.f / float(am) : 1.f;
          for (int r = r0; r < std::min(rows, r0 + tr); ++r)
            for (int c = c0; c < std::min(cols, c0 + tc); ++c)
              out[size_t(r) * cols + c] = double(
                  float(refDecode(kE4M3, enc.encode(v[r * cols + c] * s, true))) * (1.f / s));
        }
      return out;
    };
    const auto xq = fake(x, N, C, 1, 128);
    const auto wq = fake(w, OC, C, 128, 128);
    double maxErr = 0, maxRef = 0, maxPlain = 0;
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        double ref = bias[o], plain = bias[o];
        for (int c = 0; c < C; ++c) {
          ref += xq[size_t(n) * C + c] * wq[size_t(o) * C + c];
          plain += double(x[n * C + c]) * double(w[o * C + c]);
        }
        const double got = qkv[size_t(n) * OC + o];
        maxErr = std::max(maxErr, std::fabs(got - ref));
        maxPlain = std::max(maxPlain, std::fabs(got - plain));
        maxRef = std::max(maxRef, std::fabs(ref));
      }
    // fp32 accumulation of 160 products: ~1e-6 relative; the unquantized product is ~1e-2 off.
    EXPECT_LT(maxErr, 2e-5 * maxRef) << (block ? "blockwise" : "delayed");
    EXPECT_GT(maxPlain, 100 * maxErr) << "quantization left no trace";
  }
}

namespace {
// A GEMM's output `got` (N x OC) against double-precision products of x (N x C) and w (OC x C,
// the stored bf16 values) plus `bias` (may be null): with bf16 GEMMs the product of x rounded
// to bf16, else of x itself, and the other product visibly off (fp32 accumulation of C
// products is ~1e-6 relative, bf16 rounding of x ~1e-3).
void expectProductOf(const float* got, const float* x, const float* w, const float* bias, int N,
                     int OC, int C, bool bf16Gemm) {
  double errRounded = 0, errPlain = 0, maxRef = 0;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double rounded = bias ? bias[o] : 0.0, plain = rounded;
      for (int c = 0; c < C; ++c) {
        const float xv = x[n * C + c];
        rounded += double(ts::kernels::bf16ToFloat(ts::kernels::floatToBf16(xv))) * w[o * C + c];
        plain += double(xv) * double(w[o * C + c]);
      }
      const double v = got[size_t(n) * OC + o];
      errRounded = std::max(errRounded, std::fabs(v - rounded));
      errPlain = std::max(errPlain, std::fabs(v - plain));
      maxRef = std::max(maxRef, std::fabs(plain));
    }
  if (bf16Gemm) {
    EXPECT_LT(errRounded, 2e-5 * maxRef);
    EXPECT_GT(errPlain, 20 * errRounded) << "bf16 rounding left no trace";
  } else {
    EXPECT_LT(errPlain, 2e-5 * maxRef);
    EXPECT_GT(errRounded, 20 * errPlain);
  }
}
}  // namespace

// With bf16 GEMMs (precision.gemm bf16) c_attn multiplies the bf16-rounded input (ln_1's
// output) with the bf16 weights: its output equals a double-precision product of exactly those
// values plus the bias; with fp32 GEMMs it is the product of the unrounded input.
TEST_P(PrecisionPolicyOn, Bf16GemmSeesBf16RoundedInputs) {
  for (bool bf16Gemm : {true, false}) {
    const GptConfig g = oneBlockBf16(GptConfig::Fp8Recipe::None, bf16Gemm);
    auto backend = this->backend();
    MemoryTracker tracker;
    Gpt model(g, backend.get(), &tracker);
    model.initWeights(5);
    const int B = 2, T = 8, N = B * T, C = g.d_model, OC = 3 * C;
    model.allocate(B);
    std::vector<int32_t> tok(N);
    for (int i = 0; i < N; ++i) tok[size_t(i)] = (i * 7 + 3) % g.vocab;
    model.forward(tok.data(), nullptr, B, T, 0.f);
    const auto ln1 = hostCopy(model.activations().blocks[0].attn.in.data);
    const auto qkv = hostCopy(model.activations().blocks[0].attn.qkv.data);
    const auto weights = hostCopy(model.paramBuffer());
    const float* w = weights.data() + model.find("h.0.attn.c_attn.weight")->offset;
    const float* bias = weights.data() + model.find("h.0.attn.c_attn.bias")->offset;
    expectProductOf(qkv.data(), ln1.data(), w, bias, N, OC, C, bf16Gemm);
  }
}

// The LM head too (issue 21: "the LM head and embeddings run in bf16"): under bf16 GEMMs the
// logits equal a double-precision product of the bf16-rounded final norm output and the bf16
// token table (tied), and in backward the token table's gradient is the bf16 product of the
// rounded logit gradient and input: within bf16 rounding of the fp32 GEMMs' gradient, and not
// equal to it. With fp32 GEMMs the logits are the product of the unrounded output.
TEST_P(PrecisionPolicyOn, Bf16GemmHeadSeesBf16RoundedInputs) {
  std::vector<float> grads[2];
  for (bool bf16Gemm : {true, false}) {
    const GptConfig g = oneBlockBf16(GptConfig::Fp8Recipe::None, bf16Gemm);
    auto backend = this->backend();
    MemoryTracker tracker;
    Gpt model(g, backend.get(), &tracker);
    model.initWeights(5);
    const int B = 2, T = 8, N = B * T, C = g.d_model, V = g.vocab;
    model.allocate(B);
    std::vector<int32_t> tok(N), tgt(N);
    for (int i = 0; i < N; ++i) tok[size_t(i)] = (i * 7 + 3) % V, tgt[size_t(i)] = (i * 5) % V;
    model.forward(tok.data(), nullptr, B, T, 0.f);
    const auto lnf = hostCopy(model.activations().lnf.data);
    const auto logits = hostCopy(model.activations().logits);
    const auto weights = hostCopy(model.paramBuffer());
    expectProductOf(logits.data(), lnf.data(), weights.data() + model.find("wte")->offset, nullptr,
                    N, V, C, bf16Gemm);
    model.zeroGrad();
    model.forward(tok.data(), tgt.data(), B, T, 1.f / N);
    model.backward();
    const auto all = hostCopy(model.gradBuffer());
    const auto* wte = model.find("wte");
    grads[bf16Gemm ? 0 : 1].assign(all.begin() + wte->gradOffset,
                                   all.begin() + wte->gradOffset + wte->numel);
  }
  double diff = 0, ref = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) {
    diff += double(grads[0][i] - grads[1][i]) * double(grads[0][i] - grads[1][i]);
    ref += double(grads[1][i]) * double(grads[1][i]);
  }
  ASSERT_GT(ref, 0.0);
  EXPECT_LT(std::sqrt(diff / ref), 2e-2);
  EXPECT_GT(diff, 0.0);
}

// The fp8 scaling state survives fp8State() -> loadFp8State() into a fresh model with the same
// weights: same state and the same fp8 weight bytes (re-quantized with the saved scales). A
// malformed or mismatched state is refused with the site named, and changes nothing.
TEST_P(PrecisionPolicyOn, Fp8StateRoundTripsAndBadStateIsRefused) {
  GptConfig g = oneBlockBf16(GptConfig::Fp8Recipe::Delayed);
  g.fp8History = 3;
  auto backend = this->backend();
  MemoryTracker tracker;
  Gpt a(g, backend.get(), &tracker);
  a.initWeights(5);
  const int B = 2, T = 8, N = B * T;
  a.allocate(B);
  std::vector<int32_t> tok(N), tgt(N);
  for (int i = 0; i < N; ++i) tok[size_t(i)] = (i * 7 + 3) % g.vocab, tgt[size_t(i)] = i % g.vocab;
  for (int step = 0; step < 4; ++step) {  // histories of 3 wrap; weights change every step
    a.zeroGrad();
    a.forward(tok.data(), tgt.data(), B, T, 1.f / N);
    a.backward();
    auto w = hostCopy(a.paramBuffer());
    w[size_t(a.find("h.0.mlp.c_fc.weight")->offset + step)] += 0.25f;
    a.paramBuffer().copyFromHost(w.data());
    a.setWeightsFrom(a.paramBuffer().f32());
  }
  const nlohmann::json state = a.fp8State();
  ASSERT_EQ(state["sites"].size(), 4u);
  EXPECT_EQ(state["sites"][0]["w"]["history"].size(), 3u);

  Gpt b(g, backend.get(), &tracker);
  b.initWeights(5);
  b.setWeightsFrom(a.paramBuffer().f32());  // fresh histories: quantized at scale 1
  b.loadFp8State(state);
  EXPECT_EQ(b.fp8State(), state);
  ASSERT_EQ(a.fp8Weights().bytes(), b.fp8Weights().bytes());
  EXPECT_EQ(hostCopy<uint8_t>(a.fp8Weights()), hostCopy<uint8_t>(b.fp8Weights()));

  auto refused = [&](nlohmann::json bad, const std::string& needle) {
    try {
      b.loadFp8State(bad);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(b.fp8State(), state) << "changed by a refused state: " << needle;
  };
  auto bad = state;
  bad["sites"][3]["x_used"] = "not a number";
  refused(bad, "h.0.mlp.c_proj.weight");
  bad = state;
  bad["sites"][1]["weight"] = "h.7.attn.c_proj.weight";
  refused(bad, "saved for 'h.7.attn.c_proj.weight'");
  bad = state;
  bad["recipe"] = "blockwise";
  refused(bad, "recipe 'blockwise'");
  bad = state;
  bad["sites"].erase(0);
  refused(bad, "has 3 GEMM sites, the model has 4");
  bad = state;
  bad["sites"][2]["g"]["position"] = 7;
  refused(bad, "position 7 is out of range");
}

// bf16 GEMMs need bf16 working weights and no fp8: other combinations are refused by the model.
TEST_P(PrecisionPolicyOn, Bf16GemmNeedsBf16WorkingWeights) {
  auto backend = this->backend();
  MemoryTracker tracker;
  GptConfig fp32 = oneBlockBf16(GptConfig::Fp8Recipe::None, true);
  fp32.working = ts::engine::DType::F32;
  GptConfig fp8 = oneBlockBf16(GptConfig::Fp8Recipe::Delayed, true);
  for (const GptConfig& g : {fp32, fp8}) {
    try {
      Gpt model(g, backend.get(), &tracker);
      ADD_FAILURE() << "accepted bf16 GEMMs without plain bf16 weights";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("policy bf16 or pure_bf16"), std::string::npos)
          << e.what();
    }
  }
}

// A run that asks for bf16 GEMMs on a CPU without a bf16 kernel is told they are emulated
// (and slower than fp32 GEMMs); with a native kernel it logs which one.
TEST_P(PrecisionPolicyOn, ForcedBf16GemmSaysWhetherItIsEmulated) {
  auto c = smallConfig();
  c.train.steps = 2;
  c.precision.policy = "bf16";
  c.precision.gemm = "bf16";
  Recorded rec;
  const fs::path dir = this->dir("gemm_warning");
  ASSERT_EQ(run(c, rec, dir.string()).status, "completed");
  std::string impl;
  const bool native = ts::kernels::cpu::matmulBf16Native(&impl);
  bool warned = false;
  for (const auto& w : rec.of(EventType::Warning)) {
    const std::string m = w["message"];
    if (m.find("emulated") != std::string::npos) {
      warned = true;
      EXPECT_NE(m.find("precision.gemm fp32"), std::string::npos) << m;
      EXPECT_NE(m.find(impl), std::string::npos) << m;  // says why there is no kernel
    }
  }
  EXPECT_EQ(warned, !native);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, PrecisionPolicyOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         ts::testsupport::backendParamName);
