// Whole-model gradient check: the engine's fp32 hand-written backward against central finite
// differences of an independent fp64 forward (RefGpt.h), for every element of every parameter
// tensor. Tolerance: |g - fd| <= 2e-5 + 2e-3 |fd| per element (fp32 accumulation in the engine,
// fd error ~1e-9 in fp64). Every test runs on the CPU backend and on the guarded CPU backend
// (TestBackends.h): the model's forward, backward and init touch tensor memory only through it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <tuple>

#include "../../support/TestBackends.h"
#include "ModelTestUtil.h"
#include "RefGpt.h"
#include "RefLlama.h"
#include "trainscope/engine/loss/CrossEntropyLoss.h"
#include "trainscope/engine/model/Gpt.h"

using namespace ts::engine;
using ts::engine::testutil::randomize;
using ts::engine::testutil::toRef;
using ts::testsupport::hostCopy;

namespace {

struct Case {
  bool relu;
  bool flash;
};

class GradCheck : public ::testing::TestWithParam<std::tuple<Case, std::string>> {};

// The gradient checks' and decoder tests' model: 2 blocks, 2 heads, 8 wide, 6 positions, 7 tokens.
GptConfig tinyConfig() {
  GptConfig cfg;
  cfg.layers = 2;
  cfg.heads = 2;
  cfg.d_model = 8;
  cfg.seq_len = 6;
  cfg.vocab = 7;
  return cfg;
}

// Every element of every parameter tensor: the engine's gradient against central finite
// differences of `loss` (an fp64 reference over `ref`, the same values). Tolerance per element
// |g - fd| <= 2e-5 + 2e-3 |fd|, and per tensor |g - fd| <= 1e-4 |fd| + 1e-6; every tensor but
// `mayBeZero` must have some gradient.
template <class Loss>
void expectFiniteDifferenceGradients(Gpt& model, reftest::Params& ref, const Loss& loss,
                                     const std::string& mayBeZero = "") {
  const double eps = 1e-5;
  const auto grads = hostCopy(model.gradBuffer());
  for (const auto& info : model.params()) {
    auto& v = ref[info.name];
    const float* g = grads.data() + info.offset;
    double errNorm = 0, refNorm = 0;
    for (int64_t i = 0; i < info.numel; ++i) {
      const double keep = v[i];
      v[i] = keep + eps;
      const double lp = loss(ref);
      v[i] = keep - eps;
      const double lm = loss(ref);
      v[i] = keep;
      const double fd = (lp - lm) / (2 * eps);
      ASSERT_NEAR(g[i], fd, 2e-5 + 2e-3 * std::abs(fd)) << info.name << "[" << i << "]";
      errNorm += (g[i] - fd) * (g[i] - fd);
      refNorm += fd * fd;
    }
    if (info.name != mayBeZero) EXPECT_GT(refNorm, 0.0) << info.name << " has no gradient at all";
    EXPECT_LE(std::sqrt(errNorm), 1e-4 * std::sqrt(refNorm) + 1e-6) << info.name;
  }
}

// Model tests on each test backend (GetParam()).
class ModelOn : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(GradCheck, EveryParameterTensorMatchesFiniteDifferences) {
  const Case c = std::get<0>(GetParam());
  auto backend = ts::testsupport::makeTestBackend(std::get<1>(GetParam()));
  backend->setThreads(1);
  MemoryTracker tracker;
  GptConfig cfg = tinyConfig();
  cfg.relu = c.relu;
  cfg.flash = c.flash;
  Gpt model(cfg, backend.get(), &tracker);
  randomize(model, 42);
  model.allocate(2);
  const int B = 2, T = 5;  // T below seq_len: wpe rows past T get zero gradient
  std::vector<int32_t> tokens = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6};
  std::vector<int32_t> targets = {4, 6, -1, 2, 3, 5, 1, 6, -1, 0};
  int64_t count = 0;
  model.zeroGrad();
  const double sum = model.forward(tokens.data(), targets.data(), B, T, 1.f / 8.f, &count);
  ASSERT_EQ(count, 8);
  model.backward();

  reftest::RefShape rs{cfg.layers, cfg.heads, cfg.d_model, cfg.seq_len, cfg.vocab, cfg.relu};
  reftest::Params ref = toRef(model);
  const double refLoss = reftest::forward(rs, ref, tokens, targets, B, T);
  EXPECT_NEAR(sum / count, refLoss, 1e-5 * std::abs(refLoss));

  expectFiniteDifferenceGradients(
      model, ref,
      [&](const reftest::Params& p) { return reftest::forward(rs, p, tokens, targets, B, T); },
      "wpe");
}

INSTANTIATE_TEST_SUITE_P(
    Variants, GradCheck,
    ::testing::Combine(::testing::Values(Case{false, false}, Case{true, false}, Case{false, true}),
                       ::testing::ValuesIn(ts::testsupport::engineTestBackends())),
    [](const auto& info) {
      const Case c = std::get<0>(info.param);
      return std::string(c.relu ? "Relu" : "Gelu") + (c.flash ? "Flash" : "Naive") + "_" +
             ts::testsupport::backendTestName(std::get<1>(info.param));
    });

// The llama description, whole model, every element of every tensor against finite
// differences of the independent fp64 forward (RefLlama.h): RMSNorm, RoPE, grouped-query
// attention (4 heads on 2 kv heads), SwiGLU of width 12, untied head; naive and flash.
class LlamaGradCheck : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(LlamaGradCheck, EveryParameterTensorMatchesFiniteDifferences) {
  auto backend = ts::testsupport::makeTestBackend(std::get<1>(GetParam()));
  backend->setThreads(1);
  MemoryTracker tracker;
  GptConfig cfg;
  cfg.architecture = "llama";
  cfg.layers = 2;
  cfg.heads = 4;
  cfg.kvHeads = 2;
  cfg.d_model = 16;
  cfg.dFf = 12;
  cfg.seq_len = 6;
  cfg.vocab = 7;
  cfg.flash = std::get<0>(GetParam());
  Gpt model(cfg, backend.get(), &tracker);
  randomize(model, 7);
  model.allocate(2);
  const int B = 2, T = 5;
  std::vector<int32_t> tokens = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6};
  std::vector<int32_t> targets = {4, 6, -1, 2, 3, 5, 1, 6, -1, 0};
  int64_t count = 0;
  model.zeroGrad();
  const double sum = model.forward(tokens.data(), targets.data(), B, T, 1.f / 8.f, &count);
  ASSERT_EQ(count, 8);
  model.backward();
  reftest::RefLlamaShape rs{cfg.layers, cfg.heads, cfg.kvHeads, cfg.d_model, cfg.dFf, cfg.vocab};
  reftest::Params ref = toRef(model);
  ASSERT_EQ(ref.size(), 2u * 9u + 3u);
  const double refLoss = reftest::llamaForward(rs, ref, tokens, targets, B, T);
  EXPECT_NEAR(sum / count, refLoss, 1e-5 * std::abs(refLoss));
  expectFiniteDifferenceGradients(model, ref, [&](const reftest::Params& p) {
    return reftest::llamaForward(rs, p, tokens, targets, B, T);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Variants, LlamaGradCheck,
    ::testing::Combine(::testing::Values(false, true),
                       ::testing::ValuesIn(ts::testsupport::engineTestBackends())),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ? "Flash" : "Naive") + "_" +
             ts::testsupport::backendTestName(std::get<1>(info.param));
    });

TEST_P(ModelOn, ParameterNamesShapesAndInit) {
  auto backend = ts::testsupport::makeTestBackend(GetParam());
  MemoryTracker tracker;
  GptConfig cfg;
  cfg.layers = 3;
  cfg.heads = 4;
  cfg.d_model = 32;
  cfg.seq_len = 16;
  cfg.vocab = 50;
  Gpt m(cfg, backend.get(), &tracker);
  m.initWeights(7);
  const auto w = hostCopy(m.paramBuffer());
  const int64_t C = 32;
  ASSERT_NE(m.find("h.2.attn.c_attn.weight"), nullptr);
  EXPECT_EQ(m.find("h.2.attn.c_attn.weight")->shape, (std::vector<int64_t>{3 * C, C}));
  EXPECT_EQ(m.find("h.0.mlp.c_proj.weight")->shape, (std::vector<int64_t>{C, 4 * C}));
  EXPECT_EQ(m.find("wpe")->shape, (std::vector<int64_t>{16, C}));
  EXPECT_EQ(m.numParams(), 50 * C + 16 * C + 3 * (12 * C * C + 13 * C) + 2 * C);
  EXPECT_FALSE(m.find("h.0.attn.c_attn.bias")->decay);
  EXPECT_FALSE(m.find("ln_f.weight")->decay);
  EXPECT_TRUE(m.find("wte")->decay);
  // Init statistics: std 0.02 for weights, 0.02/sqrt(2L) for residual projections.
  auto stdOf = [&](const char* name) {
    const auto* p = m.find(name);
    const float* d = w.data() + p->offset;
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < p->numel; ++i) s += d[i], s2 += double(d[i]) * d[i];
    const double mean = s / p->numel;
    return std::sqrt(s2 / p->numel - mean * mean);
  };
  EXPECT_NEAR(stdOf("h.1.mlp.c_fc.weight"), 0.02, 0.002);
  EXPECT_NEAR(stdOf("h.1.mlp.c_proj.weight"), 0.02 / std::sqrt(6.0), 0.001);
  EXPECT_EQ(w[size_t(m.find("ln_f.weight")->offset) + 5], 1.f);
  EXPECT_EQ(w[size_t(m.find("h.0.attn.c_proj.bias")->offset) + 3], 0.f);
  // Same seed, same weights; other seed, other weights.
  Gpt m2(cfg, backend.get(), &tracker);
  m2.initWeights(7);
  EXPECT_EQ(hostCopy<uint32_t>(m.paramBuffer()), hostCopy<uint32_t>(m2.paramBuffer()));
  m2.initWeights(8);
  EXPECT_NE(hostCopy<uint32_t>(m.paramBuffer()), hostCopy<uint32_t>(m2.paramBuffer()));
}

// Gradient accumulation: two micro-batches with different numbers of target tokens, each loss
// divided by the total count, give the gradient of the one big batch (not the mean of means).
TEST_P(ModelOn, GradientAccumulationNormalisesByTotalTokens) {
  auto backend = ts::testsupport::makeTestBackend(GetParam());
  MemoryTracker tracker;
  GptConfig cfg;
  cfg.layers = 1;
  cfg.heads = 2;
  cfg.d_model = 16;
  cfg.seq_len = 4;
  cfg.vocab = 11;
  Gpt big(cfg, backend.get(), &tracker), small(cfg, backend.get(), &tracker);
  big.initWeights(3);
  small.initWeights(3);
  big.allocate(2);
  small.allocate(1);
  std::vector<int32_t> tok = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> tgt = {2, -1, -1, -1, 6, 7, 8, 9};  // 1 target, then 4 targets
  big.zeroGrad();
  int64_t n = 0;
  const double sumBig = big.forward(tok.data(), tgt.data(), 2, 4, 1.f / 5, &n);
  big.backward();
  EXPECT_EQ(n, 5);
  small.zeroGrad();
  double sumSmall = 0;
  for (int a = 0; a < 2; ++a) {
    sumSmall += small.forward(tok.data() + 4 * a, tgt.data() + 4 * a, 1, 4, 1.f / 5);
    small.backward();
  }
  EXPECT_NEAR(sumBig, sumSmall, 1e-5);
  const auto gb = hostCopy(big.gradBuffer());
  const auto gs = hostCopy(small.gradBuffer());
  double maxDiff = 0, maxAbs = 0;
  for (int64_t i = 0; i < big.numParams(); ++i) {
    maxDiff = std::max(maxDiff, double(std::abs(gb[i] - gs[i])));
    maxAbs = std::max(maxAbs, double(std::abs(gb[i])));
  }
  EXPECT_GT(maxAbs, 1e-3);
  EXPECT_LT(maxDiff, 1e-5 * std::max(1.0, maxAbs));
}

INSTANTIATE_TEST_SUITE_P(Backends, ModelOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         ts::testsupport::backendParamName);

// The decoder's hooks: before every block's forward (and recomputation, under checkpointing) in
// order, and "gradients ready" for each block in reverse order, each when that block's
// gradients already hold their final values for the micro-batch.
TEST(Decoder, HooksRunInOrderAndGradientsAreFinalWhenReported) {
  auto backend = ts::kernels::makeCpuBackend();
  backend->setThreads(1);
  MemoryTracker tracker;
  GptConfig cfg = tinyConfig();
  cfg.layers = 4;
  cfg.checkpointEvery = 2;
  Gpt model(cfg, backend.get(), &tracker);
  model.initWeights(3);
  model.allocate(2);
  std::vector<std::string> order;
  std::map<int, std::vector<float>> atReady;
  Gpt::Hooks h;
  h.beforeBlockForward = [&](int l, bool recompute) {
    order.push_back((recompute ? "re" : "fwd") + std::to_string(l));
  };
  h.blockGradientsReady = [&](int l) {
    order.push_back("ready" + std::to_string(l));
    const std::string first = "h." + std::to_string(l) + ".ln_1.weight";
    const std::string last = "h." + std::to_string(l) + ".mlp.c_proj.bias";
    const auto grads = hostCopy(model.gradBuffer());
    const auto* a = model.find(first);
    const auto* b = model.find(last);
    atReady[l] =
        std::vector<float>(grads.begin() + a->offset, grads.begin() + b->offset + b->numel);
  };
  model.setHooks(h);
  std::vector<int32_t> tokens = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6, 2, 2};
  std::vector<int32_t> targets = {4, 6, 1, 2, 3, 5, 1, 6, 0, 0, 3, 1};
  model.zeroGrad();
  model.forward(tokens.data(), targets.data(), 2, 6, 1.f / 12.f);
  model.backward();
  // Segments {0,1} {2,3}: the last is still in memory; the first is recomputed in backward.
  const std::vector<std::string> expected = {"fwd0",   "fwd1", "fwd2", "fwd3",   "ready3",
                                             "ready2", "re0",  "re1",  "ready1", "ready0"};
  EXPECT_EQ(order, expected);
  const auto grads = hostCopy(model.gradBuffer());
  for (const auto& [l, g] : atReady) {
    const auto* a = model.find("h." + std::to_string(l) + ".ln_1.weight");
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], grads[a->offset + i]) << "layer " << l;
    double norm = 0;
    for (float x : g) norm += double(x) * x;
    EXPECT_GT(norm, 0.0) << "layer " << l;
  }
}

// The loss outside the model: a forward without targets, the cross-entropy on its logits and
// backward give the gradients of the fused forward-with-targets path, bit for bit.
TEST(Decoder, ExternalLossGivesTheSameGradients) {
  auto backend = ts::kernels::makeCpuBackend();
  backend->setThreads(1);
  GptConfig cfg = tinyConfig();
  std::vector<int32_t> tokens = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6, 2, 2};
  std::vector<int32_t> targets = {4, 6, -1, 2, 3, 5, 1, 6, 0, -1, 3, 1};
  auto run = [&](bool external) {
    MemoryTracker tracker;
    Gpt model(cfg, backend.get(), &tracker);
    model.initWeights(5);
    model.allocate(2);
    model.zeroGrad();
    if (external) {
      model.forward(tokens.data(), nullptr, 2, 6, 0.f);
      Tensor tg(backend.get(), &tracker, ts::core::MemoryCategory::Workspace, DType::I32, {12});
      Tensor ls(backend.get(), &tracker, ts::core::MemoryCategory::Workspace, DType::F32, {12});
      int64_t n = 0;
      CrossEntropyLoss(backend.get())
          .forwardBackward(model.logits(), tg, ls, targets.data(), 12, cfg.vocab, 0.1f, &n);
      EXPECT_EQ(n, 10);
      model.lossGradientWritten();
    } else {
      model.forward(tokens.data(), targets.data(), 2, 6, 0.1f);
    }
    model.backward();
    return hostCopy(model.gradBuffer());
  };
  EXPECT_EQ(run(true), run(false));
  MemoryTracker tracker;
  Gpt model(cfg, backend.get(), &tracker);
  model.allocate(2);
  EXPECT_THROW(model.backward(), std::logic_error);  // no loss gradient yet
}

// A shape the llama description cannot take is refused, saying what and why.
TEST(Decoder, RefusesShapesTheDescriptionCannotTake) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  auto message = [&](GptConfig c) {
    try {
      Gpt m(c, backend.get(), &tracker);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  GptConfig c = tinyConfig();
  c.architecture = "mamba";
  EXPECT_NE(message(c).find("unknown architecture 'mamba' (gpt2 or llama or mistral"),
            std::string::npos);
  c = tinyConfig();
  c.architecture = "llama";
  c.heads = 4;
  c.kvHeads = 3;
  EXPECT_NE(message(c).find("kv_heads 3 must divide heads 4"), std::string::npos) << message(c);
  c.kvHeads = 2;
  c.d_model = 12;  // head dim 3
  EXPECT_NE(message(c).find("even head dimension (d_model 12 / heads 4 = 3,"), std::string::npos)
      << message(c);
}
