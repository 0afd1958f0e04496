// 16-bit policies without resident fp32 copies (issue 21). Gradients (ParamArena's gradWindow):
// the model accumulates one block's fp32 gradients at a time and rounds them into the 16-bit
// gradients; clipping, the loss scaler and the optimizer read the groups one at a time. Weights
// (valueWindow): a block's fp32 compute copy is upcast from its 16-bit weights while the block
// runs and given back after; its linear weights only around the GEMM that uses them, one at a
// time (their gradients too). Checked against the same model keeping both whole fp32 copies (the
// previous layout): the same gradients and the same steps bit for bit with one micro-batch,
// within a stated bound with accumulation (one more rounding per micro-batch); overflow found the
// same; checkpoints move between the two layouts bit for bit; and the fp32 memory moves as
// claimed (tracker and estimator, to the byte). On the CPU and the guarded backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "../../support/TestBackends.h"
#include "../../support/TrainerHarness.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"

using namespace ts::engine;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;

namespace {

class GradWindowOn : public ::testing::TestWithParam<std::string> {};

ts::core::RunConfig configFor(const std::string& policy) {
  auto c = ts::testsupport::tinyAdditionConfig();
  c.precision.policy = policy;
  c.precision.gemm = "fp32";
  c.model.layers = 3;
  return c;
}

struct Model {
  std::unique_ptr<ts::kernels::Backend> backend;
  MemoryTracker tracker;
  std::unique_ptr<Gpt> gpt;
  std::unique_ptr<Optimizer> opt;
};

// The run config's model, with or without the gradient window (as gptConfigFrom decides it).
std::unique_ptr<Model> build(const std::string& backend, const ts::core::RunConfig& c, int vocab,
                             bool window) {
  auto m = std::make_unique<Model>();
  m->backend = ts::testsupport::makeTestBackend(backend);
  m->backend->setThreads(c.device.threads);  // the kernel scratch has a slice per thread
  GptConfig gc = gptConfigFrom(c, vocab, m->backend.get());
  EXPECT_TRUE(gc.gradWindow) << c.precision.policy << ": one rank, optimizer on the device";
  EXPECT_EQ(gc.valueWindow, c.precision.policy != "fp8") << c.precision.policy;
  gc.gradWindow = window;
  gc.valueWindow = window && gc.valueWindow;
  m->gpt = std::make_unique<Gpt>(gc, m->backend.get(), &m->tracker);
  m->gpt->initWeights(7);
  m->gpt->allocate(c.train.micro_batch);
  m->opt = makeOptimizer(c.optimizer, m->gpt->arena(), m->backend.get(), &m->tracker);
  return m;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};
std::vector<Batch> batches(const ts::core::RunConfig& c, int n) {
  auto data = makeDataset(c);
  std::vector<Batch> out(static_cast<size_t>(n));
  const int B = c.train.micro_batch, T = c.model.seq_len;
  for (auto& b : out) {
    b.tokens.resize(size_t(B) * T);
    b.targets.resize(size_t(B) * T);
    data->nextTrainBatch(b.tokens.data(), b.targets.data(), B, T);
  }
  return out;
}

// The gradients of one step's micro-batches, the loss multiplied by `scale` (fp16's loss scale).
void accumulate(Model& m, const std::vector<Batch>& micro, const ts::core::RunConfig& c,
                float scale) {
  Gpt& g = *m.gpt;
  g.zeroGrad();
  const int B = c.train.micro_batch, T = c.model.seq_len;
  for (const auto& b : micro) {
    g.forward(b.tokens.data(), b.targets.data(), B, T, scale / float(B * T * micro.size()));
    g.backward();
  }
  g.roundGrads();
}

// One training step as the trainer takes it on one rank (loss scale, unscale, clipping, step).
// Returns the gradient norm.
double step(Model& m, const std::vector<Batch>& micro, const ts::core::RunConfig& c, float scale,
            double clip) {
  accumulate(m, micro, c, scale);
  Gpt& g = *m.gpt;
  g.arena().scaleGrads(1.f / scale);
  const double norm = clipGradNorm(g.arena(), m.backend.get(), clip);
  m.opt->step(1e-3f);
  return norm;
}

std::vector<uint16_t> stored16(Model& m) {
  return ts::testsupport::hostCopy<uint16_t>(m.gpt->workingParams());
}

}  // namespace

TEST_P(GradWindowOn, OneMicroBatchGivesTheSameGradientsAndStepBitForBit) {
  for (const char* policy : {"bf16", "fp16", "pure_bf16"}) {
    const auto c = configFor(policy);
    const int vocab = makeDataset(c)->vocabSize();
    auto win = build(GetParam(), c, vocab, true);
    auto copy = build(GetParam(), c, vocab, false);
    ASSERT_TRUE(win->gpt->arena().gradWindow());
    ASSERT_FALSE(copy->gpt->arena().gradWindow());
    const auto data = batches(c, 3);
    const float scale = std::string(policy) == "fp16" ? 1024.f : 1.f;
    for (int s = 0; s < 3; ++s) {
      const std::vector<Batch> one = {data[size_t(s)]};
      // No clipping: the norm is summed group by group under the window (another order).
      const double nw = step(*win, one, c, scale, 0.0);
      const double nc = step(*copy, one, c, scale, 0.0);
      EXPECT_NEAR(nw, nc, 1e-6 * nc) << policy;
      // The 16-bit weights after each step (and hence the gradients they came from).
      const auto a = stored16(*win), b = stored16(*copy);
      ASSERT_EQ(a.size(), b.size());
      int64_t differ = 0;
      for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
      EXPECT_EQ(differ, 0) << policy << " step " << s + 1;
    }
    // The next backward's gradients, as the optimizer would read them.
    for (auto* m : {win.get(), copy.get()}) accumulate(*m, {data[0]}, c, 1.f);
    const auto gw = win->gpt->gradientsToHost(), gc = copy->gpt->gradientsToHost();
    ASSERT_EQ(gw.size(), gc.size());
    double any = 0;
    for (size_t i = 0; i < gw.size(); ++i) {
      ASSERT_EQ(gw[i], gc[i]) << policy << " gradient " << i;
      any += std::fabs(gc[i]);
    }
    EXPECT_GT(any, 0.0);
  }
}

TEST_P(GradWindowOn, AccumulationRoundsOncePerMicroBatchWithinTheBound) {
  // Two micro-batches: the window rounds the running sum to bf16 after each one, the fp32 copy
  // once at the end; each element differs by at most one bf16 rounding of the first
  // micro-batch's sum (2^-8 relative), so the relative L2 difference stays under 2^-8.
  const auto c = configFor("bf16");
  const int vocab = makeDataset(c)->vocabSize();
  auto win = build(GetParam(), c, vocab, true);
  auto copy = build(GetParam(), c, vocab, false);
  const auto data = batches(c, 2);
  for (auto* m : {win.get(), copy.get()}) accumulate(*m, data, c, 1.f);
  const auto gw = win->gpt->gradientsToHost(), gc = copy->gpt->gradientsToHost();
  double diff = 0, ref = 0;
  int64_t differ = 0;
  for (size_t i = 0; i < gw.size(); ++i) {
    diff += double(gw[i] - gc[i]) * double(gw[i] - gc[i]);
    ref += double(gc[i]) * double(gc[i]);
    differ += gw[i] != gc[i];
  }
  ASSERT_GT(ref, 0.0);
  EXPECT_LT(std::sqrt(diff / ref), 1.0 / 256);
  EXPECT_GT(differ, 0) << "two roundings never differed from one: is the window accumulating?";
}

TEST_P(GradWindowOn, Fp16OverflowIsFoundAsWithTheCopy) {
  const auto c = configFor("fp16");
  const int vocab = makeDataset(c)->vocabSize();
  auto win = build(GetParam(), c, vocab, true);
  auto copy = build(GetParam(), c, vocab, false);
  const auto data = batches(c, 1);
  for (auto* m : {win.get(), copy.get()}) {
    // A loss scale far past fp16's range: the 16-bit gradients overflow to inf.
    accumulate(*m, data, c, 1e12f);
    m->gpt->arena().scaleGrads(1e-12f);
  }
  const int64_t nw = win->gpt->arena().gradNonFinite(), nc = copy->gpt->arena().gradNonFinite();
  EXPECT_GT(nc, 0);
  EXPECT_EQ(nw, nc);
}

TEST_P(GradWindowOn, Fp32CopiesExistOneWindowAtATimeAsTheEstimatorSays) {
  struct Case {
    const char* policy;
    const char* arch;
    const char* gemm = "fp32";
  };
  for (const Case& k : {Case{"bf16", "gpt2"}, Case{"bf16", "gpt2", "bf16"}, Case{"fp8", "gpt2"},
                        Case{"pure_bf16", "gpt2"}, Case{"bf16", "llama"}, Case{"fp16", "llama"},
                        Case{"pure_bf16", "llama", "bf16"}}) {
    const char* policy = k.policy;
    const char* arch = k.arch;
    auto c = configFor(policy);
    c.model.arch = arch;
    c.precision.gemm = k.gemm;
    const bool tied = std::string(arch) == "gpt2";  // llama's lm_head is its own tensor
    const int vocab = makeDataset(c)->vocabSize();
    c.model.vocab = vocab;
    auto win = build(GetParam(), c, vocab, true);
    auto copy = build(GetParam(), c, vocab, false);
    const auto data = batches(c, 2);
    step(*win, data, c, 1.f, 1.0);
    step(*copy, data, c, 1.f, 1.0);
    const ParamArena& pa = win->gpt->arena();
    // Counted from the arena's groups and tensors: the embeddings' gradients are open for their
    // backward, or through the whole backward when the head is tied (it writes the token
    // table's first), the final group's for the head's and final norm's backward, with their
    // fp32 values (and the token table's when a tied head reads it in fp32; an untied head has
    // a window of its own); the embeddings' values for their forward;
    // a block's group (norms, biases) while the block runs, with one linear GEMM weight's own
    // window at a time (a fused q|k|v or gate|up whole): its gradient, or its fp32 values (not
    // read under bf16 GEMMs); pure_bf16's optimizer updates a group in place, then each linear
    // weight with its values and gradient open. fp8 keeps the whole fp32 weights (its
    // quantization reads them after every step).
    const auto& groups = pa.groups();
    ASSERT_GE(groups.size(), 3u);
    ASSERT_LT(groups.front().block, 0);
    ASSERT_LT(groups.back().block, 0);
    const int64_t first = groups.front().gradNumel, last = groups.back().gradNumel;
    const bool values = std::string(policy) != "fp8";
    const bool pure = std::string(policy) == "pure_bf16";
    const int64_t tiedFirst = tied ? first : 0;
    auto valuesOf = [&](const ts::engine::ParamGroup& g) {
      int64_t n = 0;
      for (size_t i = g.firstParam; i < g.firstParam + g.paramCount; ++i) n += pa.params()[i].numel;
      return values ? n : 0;
    };
    // The last group: the final norm, and llama's lm_head, which has windows of its own.
    const bool bf16Gemm = std::string(k.gemm) == "bf16";
    int64_t lastSmallV = 0, headW = 0;
    for (size_t i = groups.back().firstParam;
         i < groups.back().firstParam + groups.back().paramCount; ++i) {
      const auto& p = pa.params()[i];
      (p.spec.role == ts::core::TensorRole::Head ? headW : lastSmallV) += p.numel;
    }
    const int64_t lastSmallG = last - headW, firstV = valuesOf(groups.front());
    // A bf16 head reads the bf16 token table: no fp32 copy of it for the head.
    const int64_t headV = lastSmallV + (tied && !bf16Gemm ? firstV : 0);
    // (the embedding reads the bf16 tables under bf16 GEMMs)
    int64_t moment =
        values ? std::max({lastSmallG + tiedFirst + headV + headW, first, bf16Gemm ? 0 : firstV})
               : std::max(last + tiedFirst, first);
    if (pure) moment = std::max({moment, firstV + first, lastSmallV + lastSmallG + 2 * headW});
    std::map<int, int64_t> smallV, smallG, tensorMax;
    std::map<std::pair<int, int>, int64_t> gemm;
    for (const auto& p : pa.params()) {
      const int b = p.spec.block;
      if (b < 0) continue;
      ASSERT_TRUE(p.trainable());
      if (p.spec.role == ts::core::TensorRole::LinearWeight) {
        gemm[{b, static_cast<int>(p.spec.slot)}] += p.numel;
        tensorMax[b] = std::max(tensorMax[b], p.numel);
        continue;
      }
      smallV[b] += p.numel;
      smallG[b] += p.numel;
    }
    for (const auto& [key, n] : gemm)
      moment =
          std::max(moment, tiedFirst + smallG[key.first] + (values ? smallV[key.first] : 0) + n);
    if (pure)
      for (const auto& [b, n] : tensorMax) moment = std::max(moment, smallV[b] + smallG[b] + 2 * n);
    const int64_t P = pa.gradSize(), S = pa.size();
    ASSERT_EQ(pa.valueWindow(), values);
    auto ws = [](Model& m, bool peak) {
      return peak ? m.tracker.peak(MemoryTier::Device, MemoryCategory::Workspace)
                  : m.tracker.current(MemoryTier::Device, MemoryCategory::Workspace);
    };
    // The whole copies (4 S + 4 P) against what the windows keep at their peak / between steps.
    EXPECT_EQ(ws(*copy, true) - ws(*win, true),
              values ? 4 * (S + P) - 4 * moment : 4 * (P - moment))
        << policy << " " << arch << " gemm " << k.gemm;
    EXPECT_EQ(ws(*copy, false) - ws(*win, false), 4 * P + (values ? 4 * S : 0))
        << policy << ": between steps";
    // The 16-bit gradients themselves are unchanged: 2 bytes each.
    EXPECT_EQ(win->tracker.peak(MemoryTier::Device, MemoryCategory::Gradients), 2 * P) << policy;
    // The estimator predicts the windowed model to the byte, every category (one rank, the
    // optimizer on the device).
    const auto plan = ts::core::predictMemoryReport(c).ranks.at(0);
    for (int ci = 0; ci < ts::core::kMemoryCategoryCount; ++ci) {
      const auto cat = static_cast<MemoryCategory>(ci);
      EXPECT_EQ(plan.at(MemoryTier::Device, cat).peak, win->tracker.peak(MemoryTier::Device, cat))
          << policy << " " << arch << " gemm " << k.gemm << " " << ts::core::toString(cat);
    }
  }
}

TEST_P(GradWindowOn, CheckpointsMoveBetweenTheLayoutsBitForBit) {
  for (const char* policy : {"bf16", "pure_bf16"}) {
    const auto c = configFor(policy);
    const int vocab = makeDataset(c)->vocabSize();
    const auto data = batches(c, 4);
    const auto dir = ts::testsupport::tempDir("grad_window", std::string(policy) + GetParam());
    for (bool fromWindow : {true, false}) {
      auto src = build(GetParam(), c, vocab, fromWindow);
      auto dst = build(GetParam(), c, vocab, !fromWindow);
      step(*src, {data[0]}, c, 1.f, 1.0);
      step(*src, {data[1]}, c, 1.f, 1.0);
      TrainingState st;
      st.step = 2;
      const auto info = saveCheckpoint((dir / (fromWindow ? "w" : "c")).string(), src->gpt->arena(),
                                       *src->opt, nlohmann::json::object(), st);
      loadCheckpoint(info.path, dst->gpt->arena(), dst->opt.get());
      dst->gpt->roundWeights();
      EXPECT_EQ(stored16(*dst), stored16(*src)) << policy << (fromWindow ? " window->copy" : "");
      // Both continue identically (optimizer state and master came along).
      step(*src, {data[2]}, c, 1.f, 0.0);
      step(*dst, {data[2]}, c, 1.f, 0.0);
      EXPECT_EQ(stored16(*dst), stored16(*src)) << policy << " the step after the load";
      // The fp32 values the checkpoint streamed are the 16-bit weights, upcast.
      for (const auto& p : src->gpt->params()) {
        const auto a = src->gpt->arena().hostValues(p), b = dst->gpt->arena().hostValues(p);
        ASSERT_EQ(a, b) << policy << " " << p.name;
      }
    }
    std::filesystem::remove_all(dir);
  }
}

// The windows are one rank's: data parallel keeps fp32 buckets and shards, the offloaded
// optimizer copies fp32 gradients out. Both refuse a windowed arena (the run config never builds
// one there: core::gradWindowOf), and the estimate says which copies exist.
TEST(GradWindow, TheOffloadedOptimizerRefusesAWindowedArenaAndTheEstimateSaysWhy) {
  auto c = configFor("bf16");
  const int vocab = makeDataset(c)->vocabSize();
  auto m = build("cpu", c, vocab, true);
  OffloadOptions oo;
  oo.where = "cpu";
  try {
    makeOffloadedOptimizer(c.optimizer, m->gpt->arena(), m->backend.get(), &m->tracker, {}, oo);
    ADD_FAILURE() << "an arena without whole fp32 gradients was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("gradient and value windows"), std::string::npos)
        << e.what();
  }
  auto hasNote = [](const ts::core::RunConfig& rc) {
    for (const auto& n : ts::core::estimateMemory(rc).notes)
      if (n.find("one rank: the fp32 compute copies") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(hasNote(c));
  c.parallel.offload_optimizer = "cpu";
  EXPECT_FALSE(hasNote(c));  // offloaded: whole copies
  c.parallel.offload_optimizer = "none";
  c.parallel.ranks = 2;
  EXPECT_FALSE(hasNote(c));
}

INSTANTIATE_TEST_SUITE_P(Backends, GradWindowOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         ts::testsupport::backendParamName);
