// The parameter arena (block groups, alignment, gradient storage only for trainable tensors)
// and model.dropout, for both architectures, on each test backend.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../../support/TestBackends.h"
#include "ModelTestUtil.h"
#include "RefGpt.h"
#include "RefLlama.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::engine;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;
using ts::engine::testutil::randomize;
using ts::engine::testutil::toRef;
using ts::testsupport::hostCopy;

namespace {

GptConfig tiny(const std::string& arch = "gpt2") {
  GptConfig c;
  c.architecture = arch;
  c.layers = 2;
  c.heads = arch == "llama" ? 4 : 2;
  c.kvHeads = arch == "llama" ? 2 : 0;
  c.d_model = arch == "llama" ? 16 : 8;
  c.dFf = arch == "llama" ? 12 : 0;
  c.seq_len = 6;
  c.vocab = 7;
  return c;
}

const std::vector<int32_t> kTokens = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6};
const std::vector<int32_t> kTargets = {4, 6, -1, 2, 3, 5, 1, 6, -1, 0};
constexpr int kB = 2, kT = 5;

// Every named tensor's values (host), by name.
std::map<std::string, std::vector<float>> named(Gpt& m, bool grads = false) {
  std::map<std::string, std::vector<float>> out;
  const auto host = hostCopy(grads ? m.gradBuffer() : m.paramBuffer());
  for (const auto& p : m.params()) {
    if (grads && !p.trainable()) continue;
    const float* d = host.data() + (grads ? p.gradOffset : p.offset);
    out[p.name] = std::vector<float>(d, d + p.numel);
  }
  return out;
}

// `steps` AdamW steps on the fixed batch; returns each step's loss.
std::vector<double> train(Gpt& m, Optimizer& opt, int steps, ts::kernels::Backend& be) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    m.zeroGrad();
    m.setDropoutKey(uint64_t(s));
    int64_t count = 0;
    const double sum = m.forward(kTokens.data(), kTargets.data(), kB, kT, 1.f / 8.f, &count);
    m.backward();
    m.roundGrads();
    clipGradNorm(m.arena(), &be, 1.0);
    opt.step(1e-2f);
    losses.push_back(sum / double(count));
  }
  return losses;
}

class ArenaOn : public ::testing::TestWithParam<std::string> {};
class DropoutOn : public ::testing::TestWithParam<std::string> {};

}  // namespace

// Groups are the embeddings, each block and the head, in storage order; each is one slice of
// both buffers, starting at a multiple of the alignment, holding exactly its tensors.
TEST_P(ArenaOn, GroupsAreAlignedContiguousSlicesOfTheirBlock) {
  for (const std::string arch : {"gpt2", "llama"}) {
    auto be = ts::testsupport::makeTestBackend(GetParam());
    MemoryTracker tracker;
    GptConfig c = tiny(arch);
    c.arenaAlign = 64;
    Gpt m(c, be.get(), &tracker);
    const ParamArena& a = m.arena();
    const auto& g = a.groups();
    ASSERT_EQ(g.size(), size_t(c.layers) + 2) << arch;
    EXPECT_EQ(g.front().block, -1);
    EXPECT_EQ(g.back().block, -1);
    int64_t end = 0, gend = 0, real = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (i > 0 && i + 1 < g.size()) EXPECT_EQ(g[i].block, int(i) - 1);
      EXPECT_EQ(g[i].offset % 64, 0) << arch << " group " << i;
      EXPECT_EQ(g[i].gradOffset % 64, 0);
      EXPECT_EQ(g[i].offset, end) << "groups tile the buffer";
      EXPECT_EQ(g[i].gradOffset, gend);
      EXPECT_EQ(g[i].numel % 64, 0);
      int64_t inside = 0;
      for (size_t k = g[i].firstParam; k < g[i].firstParam + g[i].paramCount; ++k) {
        const ParamInfo& p = a.params()[k];
        EXPECT_EQ(p.spec.block, g[i].block) << p.name;
        EXPECT_GE(p.offset, g[i].offset);
        EXPECT_LE(p.offset + p.numel, g[i].offset + g[i].numel) << p.name;
        inside += p.numel;
      }
      EXPECT_LT(g[i].numel - inside, 64) << "padding is less than one alignment unit";
      real += inside;
      end = g[i].offset + g[i].numel;
      gend = g[i].gradOffset + g[i].gradNumel;
    }
    EXPECT_EQ(real, a.numParams());
    EXPECT_EQ(end, a.size());
    EXPECT_GT(a.size(), a.numParams()) << "this shape needs padding";
    // The tracker counts the padded buffers: that is what is allocated.
    EXPECT_EQ(tracker.current(MemoryTier::Device, MemoryCategory::Parameters), 4 * a.size());
    EXPECT_EQ(tracker.current(MemoryTier::Device, MemoryCategory::Gradients), 4 * a.gradSize());
  }
}

// Padding moves tensors, nothing else: three AdamW steps give bitwise the same losses and
// weights with alignment 64 as without.
TEST_P(ArenaOn, AlignmentChangesOnlyTheLayout) {
  for (const std::string arch : {"gpt2", "llama"}) {
    std::vector<std::map<std::string, std::vector<float>>> weights;
    std::vector<std::vector<double>> losses;
    for (int64_t align : {1, 64}) {
      auto be = ts::testsupport::makeTestBackend(GetParam());
      MemoryTracker tracker;
      GptConfig c = tiny(arch);
      c.arenaAlign = align;
      Gpt m(c, be.get(), &tracker);
      m.initWeights(3);
      m.allocate(kB);
      auto opt = makeOptimizer(ts::core::OptimizerConfig{}, m.arena(), be.get(), &tracker);
      losses.push_back(train(m, *opt, 3, *be));
      weights.push_back(named(m));
    }
    EXPECT_EQ(losses[0], losses[1]) << arch;
    EXPECT_EQ(weights[0], weights[1]) << arch;
  }
}

// Frozen tensors (here the token embedding, tied to the head, and all of block 0) have no
// gradient storage, no optimizer state, no update; the trainable tensors' gradients are bitwise
// those of the fully trainable model.
TEST_P(ArenaOn, FrozenTensorsHaveNoGradientStateOrUpdate) {
  for (const std::string arch : {"gpt2", "llama"}) {
    const std::vector<std::string> freeze =
        arch == "gpt2" ? std::vector<std::string>{"wte", "h.0."}
                       : std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0."};
    auto be = ts::testsupport::makeTestBackend(GetParam());
    MemoryTracker fullT, frozenT;
    Gpt full(tiny(arch), be.get(), &fullT);
    GptConfig fc = tiny(arch);
    fc.freeze = freeze;
    Gpt frozen(fc, be.get(), &frozenT);
    randomize(full, 5);
    randomize(frozen, 5);
    int64_t frozenElems = 0;
    for (const auto& p : frozen.params()) {
      const bool f = p.name == freeze[0] || p.name.rfind(freeze[1], 0) == 0;
      EXPECT_EQ(p.trainable(), !f) << p.name;
      if (f) {
        frozenElems += p.numel;
        EXPECT_EQ(frozen.grad(p), nullptr);
      }
    }
    ASSERT_GT(frozenElems, 0);
    const ParamArena& a = frozen.arena();
    EXPECT_EQ(a.trainableParams(), a.numParams() - frozenElems);
    EXPECT_EQ(a.gradSize(), a.trainableParams());
    EXPECT_EQ(frozenT.current(MemoryTier::Device, MemoryCategory::Gradients),
              4 * a.trainableParams());
    for (Gpt* m : {&full, &frozen}) {
      m->allocate(kB);
      m->zeroGrad();
      m->forward(kTokens.data(), kTargets.data(), kB, kT, 1.f / 8.f);
      m->backward();
    }
    const auto gFull = named(full, true), gFrozen = named(frozen, true);
    ASSERT_EQ(gFrozen.size() + 1 + (arch == "gpt2" ? 12 : 9), gFull.size());
    for (const auto& [name, g] : gFrozen) EXPECT_EQ(g, gFull.at(name)) << arch << " " << name;
    // AdamW keeps m and v for the trainable elements only, and leaves the frozen ones alone.
    const int64_t before = frozenT.current(MemoryTier::Device, MemoryCategory::OptimizerState);
    auto opt = makeOptimizer(ts::core::OptimizerConfig{}, frozen.arena(), be.get(), &frozenT);
    EXPECT_EQ(frozenT.current(MemoryTier::Device, MemoryCategory::OptimizerState) - before,
              2 * 4 * a.trainableParams());
    const auto w0 = named(frozen);
    train(frozen, *opt, 2, *be);
    const auto w1 = named(frozen);
    for (const auto& p : frozen.params()) {
      if (p.trainable())
        EXPECT_NE(w0.at(p.name), w1.at(p.name)) << p.name << " should have trained";
      else
        EXPECT_EQ(w0.at(p.name), w1.at(p.name)) << p.name << " is frozen";
    }
  }
}

// Under bf16 the fp32 master copy is of the trainable tensors only, and training still leaves
// the frozen 16-bit weights exactly as they were.
TEST_P(ArenaOn, FrozenUnderBf16KeepsAMasterOfTheTrainableOnly) {
  auto be = ts::testsupport::makeTestBackend(GetParam());
  MemoryTracker t;
  GptConfig c = tiny();
  c.working = DType::BF16;
  c.freeze = {"h.1."};
  Gpt m(c, be.get(), &t);
  m.initWeights(9);
  m.allocate(kB);
  const ParamArena& a = m.arena();
  EXPECT_EQ(t.current(MemoryTier::Device, MemoryCategory::Gradients), 2 * a.gradSize());
  auto opt = makeOptimizer(ts::core::OptimizerConfig{}, m.arena(), be.get(), &t);
  EXPECT_EQ(t.current(MemoryTier::Device, MemoryCategory::OptimizerState), 3 * 4 * a.gradSize());
  const auto before = hostCopy<uint16_t>(m.workingParams());
  train(m, *opt, 2, *be);
  const auto after = hostCopy<uint16_t>(m.workingParams());
  int changed = 0;
  for (const auto& p : m.params())
    for (int64_t i = 0; i < p.numel; ++i) {
      const bool same = before[size_t(p.offset + i)] == after[size_t(p.offset + i)];
      if (!p.trainable()) ASSERT_TRUE(same) << p.name << "[" << i << "]";
      changed += !same;
    }
  EXPECT_GT(changed, 0);
}

// A checkpoint of a model with frozen tensors and padding holds the trainable tensors by name
// (the frozen base comes from where it came from), and loads back into the same layout bit for
// bit (optimizer state included), leaving the loading model's frozen tensors as they were.
TEST_P(ArenaOn, CheckpointWithFrozenTensorsAndPaddingRoundTrips) {
  namespace fs = std::filesystem;
  auto be = ts::testsupport::makeTestBackend(GetParam());
  MemoryTracker ta, tb;
  GptConfig c = tiny("llama");
  c.freeze = {"lm_head.weight"};
  c.arenaAlign = 32;
  Gpt a(c, be.get(), &ta), b(c, be.get(), &tb);
  a.initWeights(1);
  b.initWeights(2);
  a.allocate(kB);
  auto oa = makeOptimizer(ts::core::OptimizerConfig{}, a.arena(), be.get(), &ta);
  auto ob = makeOptimizer(ts::core::OptimizerConfig{}, b.arena(), be.get(), &tb);
  train(a, *oa, 2, *be);
  const fs::path dir =
      fs::temp_directory_path() / ("ts_arena_ckpt_" + ts::testsupport::backendTestName(GetParam()));
  fs::remove_all(dir);
  auto info = saveCheckpoint(dir.string(), a.arena(), *oa, {}, TrainingState{});
  const auto bBefore = named(b);
  loadCheckpoint(info.path, b.arena(), ob.get());
  const auto wa = named(a), wb = named(b);
  for (const auto& p : b.params()) {
    if (p.trainable())
      EXPECT_EQ(wb.at(p.name), wa.at(p.name)) << p.name;
    else
      EXPECT_EQ(wb.at(p.name), bBefore.at(p.name)) << p.name << " is frozen: not in the file";
  }
  SafetensorsFile mf = SafetensorsFile::load(info.path + "/model.safetensors");
  EXPECT_FALSE(mf.has("lm_head.weight"));
  EXPECT_TRUE(mf.has("model.embed_tokens.weight"));
  EXPECT_EQ(ob->stepCount(), 2);
  for (size_t i = 0; i < oa->state().size(); ++i)
    EXPECT_EQ(hostCopy(*oa->state()[i].second), hostCopy(*ob->state()[i].second))
        << oa->state()[i].first;
  fs::remove_all(dir);
}

// ZeRO-3's partitioned weights: a rank holds only its shard, so a load (resume, a base, an HF
// folder: all through setValuesFromHost), roundWeights and setting the weights from a whole
// master (a LoRA update) write only the shard, and valuesToHost reads only it. On the guarded
// backend the other pages stay closed until committed (a touch faults, as an unmapped
// granule of a GPU buffer would); on both, committing them afterwards shows they were never
// written. Both ranks of 2, fp32 and bf16 (whose 16-bit weights are partitioned too).
TEST_P(ArenaOn, PartitionedWeightsLoadOnlyTheShard) {
  namespace fs = std::filesystem;
  auto be = ts::testsupport::makeTestBackend(GetParam());
  const fs::path dir =
      fs::temp_directory_path() / ("ts_arena_part_" + ts::testsupport::backendTestName(GetParam()));
  fs::remove_all(dir);
  MemoryTracker tw;
  Gpt whole(tiny(), be.get(), &tw);
  whole.initWeights(3);
  auto ow = makeOptimizer(ts::core::OptimizerConfig{}, whole.arena(), be.get(), &tw);
  const auto info = saveCheckpoint(dir.string(), whole.arena(), *ow, {}, TrainingState{});
  const auto want = named(whole);
  for (const DType working : {DType::F32, DType::BF16})
    for (int rank = 0; rank < 2; ++rank) {
      SCOPED_TRACE(std::string(working == DType::F32 ? "fp32" : "bf16") + " rank " +
                   std::to_string(rank));
      MemoryTracker tp;
      GptConfig c = tiny();
      c.working = working;
      c.partitionRanks = 2;
      c.partitionRank = rank;
      c.partitionValues = true;
      Gpt part(c, be.get(), &tp);
      part.initWeights(5);
      ParamArena& a = part.arena();
      const auto [lo, hi] = a.ownedValues();
      ASSERT_GT(hi, lo);
      ASSERT_LT(hi - lo, a.size());
      loadCheckpoint(info.path, a, nullptr);
      part.roundWeights();
      std::vector<float> got(size_t(a.size()), NAN);
      a.valuesToHost(got.data());
      // A whole master (gradient space = value space here) whose every element is 1: only the
      // shard may take it.
      Tensor ones(be.get(), nullptr, MemoryCategory::Workspace, DType::F32, {a.size()});
      be->fillF32(ones.f32(), 1.f, a.size());
      std::vector<float> owned(got.begin() + lo, got.begin() + hi);
      a.setWeightsFrom(ones.f32());
      // Now open every page and look: outside the shard nothing was ever written.
      be->commit(a.values().data(), size_t(a.values().bytes()));
      if (working != DType::F32) be->commit(a.values16().data(), size_t(a.values16().bytes()));
      const auto v = hostCopy(a.values());
      for (const auto& p : part.params())
        for (int64_t i = 0; i < p.numel; ++i) {
          const int64_t e = p.offset + i;
          const float w = want.at(p.name)[size_t(i)];
          if (e >= lo && e < hi) {
            // The checkpoint's value (bf16: rounded, as the stored weights hold it).
            const float r =
                working == DType::F32 ? w : ts::kernels::bf16ToFloat(ts::kernels::floatToBf16(w));
            ASSERT_EQ(owned[size_t(e - lo)], r) << p.name << "[" << i << "]";
            ASSERT_EQ(v[size_t(e)], 1.f) << p.name << "[" << i << "]";
          } else {
            ASSERT_EQ(got[size_t(e)], 0.f) << p.name << "[" << i << "] is not this rank's";
            ASSERT_EQ(v[size_t(e)], 0.f) << p.name << "[" << i << "] was written";
          }
        }
      if (working != DType::F32) {
        std::vector<uint16_t> h(size_t(a.size()));
        be->copyToHost(h.data(), a.values16().data(), h.size() * sizeof(uint16_t));
        for (int64_t e = 0; e < a.size(); ++e)
          ASSERT_EQ(h[size_t(e)], e >= lo && e < hi ? ts::kernels::floatToBf16(1.f) : 0) << e;
      }
    }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, ArenaOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         [](const auto& info) {
                           return ts::testsupport::backendTestName(info.param);
                         });

// With dropout the loss is still a deterministic function of the weights (the masks are fixed
// by seed and key), so the whole model's gradient can be checked against finite differences of
// the fp64 references with the same masks: gpt2 and llama, naive and flash.
class DropoutGradCheck
    : public ::testing::TestWithParam<std::tuple<std::string, bool, std::string>> {};

TEST_P(DropoutGradCheck, EveryParameterTensorMatchesFiniteDifferences) {
  const std::string arch = std::get<0>(GetParam());
  const bool flash = std::get<1>(GetParam());
  const std::string backend = std::get<2>(GetParam());
  auto be = ts::testsupport::makeTestBackend(backend);
  be->setThreads(1);
  MemoryTracker tracker;
  GptConfig c = tiny(arch);
  c.flash = flash;
  c.dropout = 0.25f;
  c.dropoutSeed = 11;
  Gpt m(c, be.get(), &tracker);
  randomize(m, 42);
  m.allocate(kB);
  m.setDropoutKey(3);
  int64_t count = 0;
  m.zeroGrad();
  const double sum = m.forward(kTokens.data(), kTargets.data(), kB, kT, 1.f / 8.f, &count);
  m.backward();
  reftest::RefDropout drop{0.25, 11, 3};
  reftest::Params ref = toRef(m);
  auto loss = [&](const reftest::Params& p) {
    if (arch == "llama")
      return reftest::llamaForward({c.layers, c.heads, c.kvHeads, c.d_model, c.dFf, c.vocab}, p,
                                   kTokens, kTargets, kB, kT, &drop);
    return reftest::forward({c.layers, c.heads, c.d_model, c.seq_len, c.vocab, false}, p, kTokens,
                            kTargets, kB, kT, nullptr, &drop);
  };
  const double refLoss = loss(ref);
  EXPECT_NEAR(sum / count, refLoss, 1e-5 * std::abs(refLoss));
  // Without the masks the loss differs: dropout did something.
  const double plain =
      arch == "llama"
          ? reftest::llamaForward({c.layers, c.heads, c.kvHeads, c.d_model, c.dFf, c.vocab}, ref,
                                  kTokens, kTargets, kB, kT)
          : reftest::forward({c.layers, c.heads, c.d_model, c.seq_len, c.vocab, false}, ref,
                             kTokens, kTargets, kB, kT);
  EXPECT_GT(std::abs(plain - refLoss), 1e-3);
  const double eps = 1e-5;
  const auto grads = hostCopy(m.gradBuffer());
  for (const auto& info : m.params()) {
    auto& v = ref[info.name];
    const float* g = grads.data() + info.gradOffset;
    for (int64_t i = 0; i < info.numel; ++i) {
      const double keep = v[size_t(i)];
      v[size_t(i)] = keep + eps;
      const double lp = loss(ref);
      v[size_t(i)] = keep - eps;
      const double lm = loss(ref);
      v[size_t(i)] = keep;
      const double fd = (lp - lm) / (2 * eps);
      ASSERT_NEAR(g[i], fd, 2e-5 + 2e-3 * std::abs(fd)) << info.name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, DropoutGradCheck,
    ::testing::Combine(::testing::Values("gpt2", "llama"), ::testing::Values(false, true),
                       ::testing::ValuesIn(ts::testsupport::engineTestBackends())),
    [](const auto& info) {
      return std::get<0>(info.param) + (std::get<1>(info.param) ? "_Flash_" : "_Naive_") +
             ts::testsupport::backendTestName(std::get<2>(info.param));
    });

// Evaluation (training off) is the model without dropout, bit for bit; in training the same
// key draws the same masks and another key others.
TEST_P(DropoutOn, EvaluationIsTheModelWithoutDropoutAndKeysSelectMasks) {
  for (const std::string arch : {"gpt2", "llama"}) {
    auto be = ts::testsupport::makeTestBackend(GetParam());
    MemoryTracker t0, t1;
    GptConfig c = tiny(arch);
    Gpt plain(c, be.get(), &t0);
    c.dropout = 0.3f;
    Gpt drop(c, be.get(), &t1);
    plain.initWeights(4);
    drop.initWeights(4);
    plain.allocate(kB);
    drop.allocate(kB);
    auto loss = [&](Gpt& m) {
      int64_t n = 0;
      return m.forward(kTokens.data(), kTargets.data(), kB, kT, 0.f, &n) / double(n);
    };
    const double base = loss(plain);
    drop.setTraining(false);
    EXPECT_EQ(loss(drop), base) << arch;
    // The logits themselves (a forward without targets keeps them; rows past B*T are unused).
    for (Gpt* m : {&plain, &drop}) m->forward(kTokens.data(), nullptr, kB, kT, 0.f);
    const size_t used = size_t(kB) * kT * size_t(c.vocab);
    auto lp = hostCopy(plain.logits()), ld = hostCopy(drop.logits());
    lp.resize(used);
    ld.resize(used);
    EXPECT_EQ(ld, lp) << arch;
    drop.setTraining(true);
    drop.setDropoutKey(1);
    const double k1 = loss(drop);
    EXPECT_NE(k1, base);
    drop.setDropoutKey(2);
    const double k2 = loss(drop);
    EXPECT_NE(k2, k1);
    drop.setDropoutKey(1);
    EXPECT_EQ(loss(drop), k1);
  }
}

// Checkpointing recomputes the segments with the same masks: gradients bitwise equal.
TEST_P(DropoutOn, CheckpointingRecomputesTheSameMasks) {
  for (const std::string arch : {"gpt2", "llama"}) {
    std::vector<std::map<std::string, std::vector<float>>> grads;
    for (int k : {0, 1}) {
      auto be = ts::testsupport::makeTestBackend(GetParam());
      MemoryTracker t;
      GptConfig c = tiny(arch);
      c.dropout = 0.2f;
      c.checkpointEvery = k;
      Gpt m(c, be.get(), &t);
      m.initWeights(8);
      m.allocate(kB);
      m.setDropoutKey(5);
      m.zeroGrad();
      m.forward(kTokens.data(), kTargets.data(), kB, kT, 1.f / 8.f);
      m.backward();
      grads.push_back(named(m, true));
    }
    EXPECT_EQ(grads[0], grads[1]) << arch;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, DropoutOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         [](const auto& info) {
                           return ts::testsupport::backendTestName(info.param);
                         });
