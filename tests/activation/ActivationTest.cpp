// Activation memory techniques: checkpointing (all / every_k) and activation compression
// (int8 / sparse), alone and combined with gradient accumulation and flash attention. Lossless
// variants must give bitwise the plain path's gradients; the tracker must equal docs/memory.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "../support/TrainerHarness.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/train/Trainer.h"

using namespace ts::engine;
using ts::core::EventType;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;
using Comp = GptConfig::Compression;

namespace {

struct Variant {
  std::string name;
  int k = 0;  // checkpoint segment (0 = off, 1 = all)
  Comp comp = Comp::None;
  int accum = 1;
  bool flash = false;
  bool relu = false;
  int L = 3;
  DType saved = DType::F32;  // 16-bit storage of saved activations (GptConfig::saved)
  int llamaDff = 0;          // > 0: a llama block (RMSNorm, SwiGLU, rotary, 1 KV head) of this d_ff
  bool bf16Gemm = false;     // bf16 working weights multiplied by the bf16 GEMM
};
// Test listings show the variant's name instead of its bytes.
void PrintTo(const Variant& v, std::ostream* os) {
  *os << v.name;
}

GptConfig configOf(const Variant& v) {
  GptConfig c;
  c.layers = v.L;
  c.heads = 2;
  c.d_model = 16;
  c.seq_len = 9;  // odd on purpose
  c.vocab = 23;
  c.relu = v.relu;
  c.flash = v.flash;
  c.checkpointEvery = v.k;
  c.compression = v.comp;
  c.saved = v.saved;
  if (v.bf16Gemm) {
    c.working = DType::BF16;
    c.bf16Gemm = true;
  }
  if (v.llamaDff > 0) {
    c.architecture = "llama";
    c.kvHeads = 1;
    c.dFf = v.llamaDff;
  }
  return c;
}

struct StepRun {
  std::vector<float> grads;
  double loss = 0;
  int64_t actPeak = 0;
  int64_t actCurrent = 0;
};

// One step on 4 sequences: `accum` micro-batches of 4/accum, loss normalised by all tokens.
StepRun runStep(const Variant& v, ts::kernels::Backend* backend) {
  MemoryTracker tracker;
  const GptConfig cfg = configOf(v);
  Gpt model(cfg, backend, &tracker);
  model.initWeights(42);
  const int total = 4, B = total / v.accum, T = cfg.seq_len;
  model.allocate(B);
  std::vector<int32_t> tok(total * T), tgt(total * T);
  for (int i = 0; i < total * T; ++i) {
    tok[i] = (i * 7 + 3) % cfg.vocab;
    tgt[i] = i % 5 == 0 ? -1 : (i * 11 + 1) % cfg.vocab;
  }
  int64_t n = 0;
  for (int32_t t : tgt) n += t >= 0;
  model.zeroGrad();
  StepRun r;
  for (int a = 0; a < v.accum; ++a) {
    r.loss += model.forward(tok.data() + a * B * T, tgt.data() + a * B * T, B, T, 1.f / n);
    model.backward();
  }
  r.loss /= n;
  r.grads.resize(model.numParams());
  std::memcpy(r.grads.data(), model.gradBuffer().data(), model.gradBuffer().bytes());
  r.actPeak = tracker.peak(MemoryTier::Device, MemoryCategory::Activations);
  r.actCurrent = tracker.current(MemoryTier::Device, MemoryCategory::Activations);
  return r;
}

double relErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

bool bitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// docs/memory.md, "Activation checkpointing and compression": bytes of one block's saved set
// (without its input when `withInput` is false), and the total activations. U: bytes per value
// of the tensors backward takes approximately (4 fp32, 2 with 16-bit storage, 1 int8, which
// adds one fp32 scale per row); R: the same for the norms' inputs (fp32 under 16-bit storage,
// bf16 under int8). 16-bit storage keeps no norm output (backward recomputes it from the exact
// input) and no MLP activation output (recomputed from the pre-activation): `normOuts` and
// `actOut` are how many bytes per value they take.
struct Storage {
  int64_t U = 4, R = 4;
  bool int8 = false;
  bool packedResidual() const { return R != 4; }
  int64_t normOuts() const { return U == 2 ? 0 : U; }
  int64_t actOut() const { return U == 2 ? 0 : U; }
};
Storage storageOf(const GptConfig& c) {
  Storage st;
  if (c.compression == Comp::Int8) return {1, 2, true};
  if (c.saved != DType::F32) st.U = 2;
  return st;
}

int64_t blockBytes(const GptConfig& c, int64_t B, int64_t nnz, bool withInput) {
  const int64_t T = c.seq_len, C = c.d_model, NH = c.heads, N = B * T;
  const int64_t A = c.flash ? B * NH * T : B * NH * T * T;
  const Storage st = storageOf(c);
  const int64_t U = st.U, R = st.R;
  const bool keepPre = !(st.int8 && c.relu);
  int64_t bytes = R * N * C                                      // input
                  + 4 * 4 * N                                    // two norms' mean and rstd
                  + U * 3 * N * C                                // qkv
                  + R * N * C                                    // resid2
                  + U * N * C                                    // attOut
                  + st.normOuts() * 2 * N * C;                   // ln1, ln2
  bytes += c.flash ? 4 * A : U * A + (st.int8 ? 4 * A / T : 0);  // lse exact; probabilities
  if (keepPre) bytes += U * 4 * N * C;                           // c_fc output
  if (c.compression == Comp::Sparse)
    bytes += (4 * N * C + 7) / 8 + 4 * nnz;  // bitmap + the nonzeros (fp32)
  else
    bytes += st.actOut() * 4 * N * C;               // the activation
  if (st.int8) bytes += 4 * N * (keepPre ? 6 : 5);  // a scale per row of each int8 tensor
  return withInput ? bytes : bytes - R * N * C;
}

// `nnz` holds the nonzero ReLU outputs of every block set alive (sparse only).
int64_t activationFormula(const GptConfig& c, int64_t B, const std::vector<int64_t>& nnz) {
  const int64_t T = c.seq_len, C = c.d_model, V = c.vocab, N = B * T, L = c.layers;
  const int64_t k = c.checkpointEvery;
  const Storage st = storageOf(c);
  auto nz = [&](size_t i) { return i < nnz.size() ? nnz[i] : 0; };
  int64_t blocks = 0;
  if (k == 0) {
    for (int64_t l = 0; l < L; ++l) blocks += blockBytes(c, B, nz(l), true);
  } else {
    // A packed residual: the first set keeps its input too.
    blocks = ((L + k - 1) / k) * 4 * N * C;
    for (int64_t i = 0; i < k; ++i) blocks += blockBytes(c, B, nz(i), i > 0 || st.packedResidual());
  }
  // tokens, targets, ln_f's statistics, losses, logits; the last block's output (a norm
  // input) and ln_f's output (the head's input).
  return 4 * (2 * N + 3 * N + N * V) + st.R * N * C + st.normOuts() * N * C +
         (st.int8 ? 4 * N : 0) + blocks;
}

class Checkpointing : public ::testing::TestWithParam<Variant> {};

}  // namespace

// Recomputation runs the same kernels on the same inputs with the same thread count, so the
// gradients are the plain path's bit for bit.
TEST_P(Checkpointing, GradientsBitwiseEqualPlain) {
  auto backend = ts::kernels::makeCpuBackend();
  Variant v = GetParam();
  Variant plain = v;
  plain.k = 0;
  const StepRun a = runStep(plain, backend.get());
  const StepRun b = runStep(v, backend.get());
  EXPECT_TRUE(bitwiseEqual(a.grads, b.grads)) << "relative error " << relErr(b.grads, a.grads);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_LT(b.actPeak, a.actPeak);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, Checkpointing,
    ::testing::Values(Variant{"all", 1}, Variant{"k2_uneven", 2, Comp::None, 1, false, false, 5},
                      Variant{"k3_flash_relu", 3, Comp::None, 1, true, true, 6},
                      Variant{"all_gelu_flash", 1, Comp::None, 1, true, false, 4}),
    [](const auto& info) { return info.param.name; });

TEST(Checkpointing, SegmentFromConfig) {
  EXPECT_EQ(checkpointSegment("none", 3, 12), 0);
  EXPECT_EQ(checkpointSegment("all", 0, 12), 1);
  EXPECT_EQ(checkpointSegment("every_k", 0, 12), 3);  // round(sqrt(12)) = round(3.46)
  EXPECT_EQ(checkpointSegment("every_k", 0, 7), 3);   // round(2.65)
  EXPECT_EQ(checkpointSegment("every_k", 0, 1), 1);
  EXPECT_EQ(checkpointSegment("every_k", 4, 12), 4);
  EXPECT_EQ(checkpointSegment("every_k", 20, 12), 12);
}

// L = 8: the activation peak with `all` is well under half of the plain path's (it keeps one
// input per block + one block recomputed at a time: 8 x 16NC -> 8 x NC + 15NC + ...).
TEST(Checkpointing, AllHalvesTheActivationPeak) {
  auto backend = ts::kernels::makeCpuBackend();
  Variant plain{"plain", 0, Comp::None, 1, false, false, 8};
  Variant all = plain;
  all.k = 1;
  const StepRun a = runStep(plain, backend.get());
  const StepRun b = runStep(all, backend.get());
  std::printf("activation peak L=8 (B=4,T=9,C=16): plain %lld B, checkpointing all %lld B\n",
              static_cast<long long>(a.actPeak), static_cast<long long>(b.actPeak));
  EXPECT_LT(b.actPeak * 2, a.actPeak);
  EXPECT_EQ(a.actPeak, activationFormula(configOf(plain), 4, {}));
  EXPECT_EQ(b.actPeak, activationFormula(configOf(all), 4, {}));
}

// Tracker == docs/memory.md byte for byte for checkpointing, int8 and 16-bit storage, GELU and
// ReLU (allocated once, so after a step current == peak == formula).
TEST(ActivationFormula, TrackerMatchesFormulaForCheckpointingAndInt8) {
  auto backend = ts::kernels::makeCpuBackend();
  for (int k : {0, 1, 2, 5})
    for (Comp comp : {Comp::None, Comp::Int8})
      for (DType saved : {DType::F32, DType::BF16, DType::F16})
        for (bool flash : {false, true})
          for (bool relu : {false, true}) {
            if (comp == Comp::Int8 && saved == DType::F16) continue;  // int8 wins: no new case
            Variant v{"f", k, comp, 1, flash, relu, 5, saved};
            const StepRun r = runStep(v, backend.get());
            const int64_t want = activationFormula(configOf(v), 4, {});
            EXPECT_EQ(r.actPeak, want)
                << "k=" << k << " int8=" << (comp == Comp::Int8) << " saved=" << int(saved)
                << " flash=" << flash << " relu=" << relu;
            EXPECT_EQ(r.actCurrent, want);
          }
}

// The estimator (memory_plan) predicts the engine's activation bytes exactly for checkpointing
// and int8, from a run config, through gptConfigFrom (the mapping the Trainer uses).
TEST(ActivationFormula, EstimatorPredictsTrackerForCheckpointingAndInt8) {
  auto backend = ts::kernels::makeCpuBackend();
  struct Mode {
    const char* ck;
    int every;
    const char* comp;
    const char* attn;
    const char* policy = "fp32";
    const char* arch = "gpt2";
  };
  for (const Mode& m :
       {Mode{"none", 0, "int8", "naive"}, Mode{"all", 0, "none", "naive"},
        Mode{"all", 0, "int8", "flash"}, Mode{"every_k", 0, "none", "flash"},
        Mode{"every_k", 2, "int8", "naive"}, Mode{"every_k", 5, "none", "naive"},
        // 16-bit storage of the saved activations under the mixed policies
        Mode{"none", 0, "none", "naive", "bf16"}, Mode{"all", 0, "none", "flash", "fp16"},
        Mode{"every_k", 2, "int8", "naive", "bf16"}, Mode{"none", 0, "none", "naive", "fp8"},
        Mode{"none", 0, "none", "flash", "pure_bf16"},
        Mode{"none", 0, "none", "naive", "bf16", "llama"},
        Mode{"all", 0, "int8", "flash", "fp16", "llama"}}) {
    ts::core::RunConfig c;
    c.model.arch = m.arch;
    c.model.layers = 5;
    c.model.heads = 2;
    c.model.d_model = 16;
    c.model.seq_len = 12;
    c.model.vocab = 14;
    c.data.source = "synthetic";
    c.data.task = "addition";
    c.train.micro_batch = 3;
    c.memory.checkpointing = m.ck;
    c.memory.checkpoint_every = m.every;
    c.memory.activation_compression = m.comp;
    c.attention.impl = m.attn;
    c.precision.policy = m.policy;
    c.precision.gemm = "fp32";  // the estimator cannot know what auto measures here
    const auto plan = ts::core::predictMemoryReport(c).ranks.at(0);
    MemoryTracker tracker;
    Gpt model(gptConfigFrom(c, 14), backend.get(), &tracker);
    model.initWeights(1);
    model.allocate(3);
    // One training step: the peaks of a real step (16-bit policies keep fp32 copies only while
    // a window is open; pure_bf16's optimizer opens a linear weight's values and gradient
    // together).
    auto opt = makeOptimizer(c.optimizer, model.arena(), backend.get(), &tracker);
    std::vector<int32_t> tok(3 * 12), tgt(3 * 12);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t(i * 5 % 14), tgt[i] = int32_t(i % 14);
    model.zeroGrad();
    model.forward(tok.data(), tgt.data(), 3, 12, 1.f / 36);
    model.backward();
    opt->step(1e-3f);
    EXPECT_EQ(plan.at(MemoryTier::Device, MemoryCategory::Activations).peak,
              tracker.peak(MemoryTier::Device, MemoryCategory::Activations))
        << m.ck << " " << m.every << " " << m.comp << " " << m.attn << " " << m.policy << " "
        << m.arch;
    EXPECT_EQ(plan.at(MemoryTier::Device, MemoryCategory::Workspace).peak,
              tracker.peak(MemoryTier::Device, MemoryCategory::Workspace))
        << m.policy << " " << m.arch;
  }
}

// Sparse is lossless (bitwise gradients) and stores bitmap + exactly the nonzeros, counted here
// independently from the plain model's saved ReLU outputs.
TEST(SparseCompression, LosslessAndStorageFollowsNonzeroCount) {
  auto backend = ts::kernels::makeCpuBackend();
  Variant plain{"plain", 0, Comp::None, 1, false, true, 3};
  Variant sparse = plain;
  sparse.comp = Comp::Sparse;
  const StepRun a = runStep(plain, backend.get());
  const StepRun b = runStep(sparse, backend.get());
  EXPECT_TRUE(bitwiseEqual(a.grads, b.grads)) << "relative error " << relErr(b.grads, a.grads);
  EXPECT_EQ(a.loss, b.loss);

  // Nonzeros per block, from a plain model's fp32 fcAct after the same forward.
  MemoryTracker tp, trk;
  Gpt mp(configOf(plain), backend.get(), &tp), msp(configOf(sparse), backend.get(), &trk);
  mp.initWeights(42);
  msp.initWeights(42);
  mp.allocate(4);
  msp.allocate(4);
  const int T = 9, N = 4 * T;
  std::vector<int32_t> tok(N), tgt(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 5 + 2) % 23, tgt[i] = (i * 3) % 23;
  mp.forward(tok.data(), tgt.data(), 4, T, 1.f / N);
  msp.forward(tok.data(), tgt.data(), 4, T, 1.f / N);
  std::vector<int64_t> nnz;
  int64_t zeros = 0, values = 0;
  for (const auto& blk : mp.activations().blocks) {
    int64_t c = 0;
    for (int64_t i = 0; i < blk.mlp.act.data.numel(); ++i) c += blk.mlp.act.data.f32()[i] != 0.f;
    nnz.push_back(c);
    zeros += blk.mlp.act.data.numel() - c;
    values += blk.mlp.act.data.numel();
  }
  const int64_t want = activationFormula(configOf(sparse), 4, nnz);
  EXPECT_EQ(trk.current(MemoryTier::Device, MemoryCategory::Activations), want);
  const int64_t plainBytes = tp.current(MemoryTier::Device, MemoryCategory::Activations);
  std::printf("sparse: %lld of %lld ReLU outputs zero; activations %lld B vs plain %lld B\n",
              static_cast<long long>(zeros), static_cast<long long>(values),
              static_cast<long long>(want), static_cast<long long>(plainBytes));
  EXPECT_LT(want, plainBytes);
  const auto& st = msp.compressionStats();
  EXPECT_EQ(st.reluZeros, zeros);
  EXPECT_EQ(st.reluValues, values);
}

// int8 gradients stay close to fp32: relative L2 error of the whole gradient vector < 1%
// (per-row absmax int8 has a relative rounding error of at most 1/254 of the row's maximum).
TEST(Int8Compression, GradientsCloseToPlain) {
  auto backend = ts::kernels::makeCpuBackend();
  for (bool relu : {false, true}) {
    Variant plain{"plain", 0, Comp::None, 1, false, relu, 3};
    Variant q = plain;
    q.comp = Comp::Int8;
    const StepRun a = runStep(plain, backend.get());
    const StepRun b = runStep(q, backend.get());
    const double e = relErr(b.grads, a.grads);
    std::printf("int8 (relu=%d): gradient relative error %.4g\n", relu, e);
    EXPECT_LT(e, 0.01);
    EXPECT_GT(e, 0.0);          // it really is compressed
    EXPECT_EQ(a.loss, b.loss);  // the forward itself runs in fp32
  }
}

// 16-bit storage (the bf16/fp16/fp8 policies' saved activations): the forward is the fp32
// one (the loss is bitwise equal: tensors are packed after use), the gradients are those of
// the fp32-stored model within 16-bit rounding (bf16 keeps 8 bits: < 1%; fp16 11: < 0.1%), and
// really rounded. int8 (with its bf16 residual stream) within 1%. Both architectures, naive and
// flash; the llama block with d_ff 16 has a qkv row (32) wider than its SwiGLU pre-activation
// half, and one with d_ff 8 narrower than d_model: scratch sizing is exercised both ways.
TEST(SavedStorage, GradientsCloseToFp32Storage) {
  auto backend = ts::kernels::makeCpuBackend();
  for (int llama : {0, 16, 8})
    for (bool flash : {false, true}) {
      Variant exact{"exact", 0, Comp::None, 1, flash, false, 3};
      exact.llamaDff = llama;
      const StepRun a = runStep(exact, backend.get());
      struct Case {
        DType saved;
        Comp comp;
        double bound;
      };
      for (const Case& k : {Case{DType::BF16, Comp::None, 1e-2}, Case{DType::F16, Comp::None, 1e-3},
                            Case{DType::F32, Comp::Int8, 1e-2}, Case{DType::BF16, Comp::Int8, 1e-2},
                            Case{DType::F16, Comp::Int8, 1e-2}}) {  // fp16 residual, centered
        Variant v = exact;
        v.saved = k.saved;
        v.comp = k.comp;
        const StepRun b = runStep(v, backend.get());
        const double e = relErr(b.grads, a.grads);
        std::printf("llama d_ff %d flash %d saved %d int8 %d: gradient relative error %.3g\n",
                    llama, flash, int(k.saved), k.comp == Comp::Int8, e);
        EXPECT_LT(e, k.bound) << "llama " << llama << " flash " << flash;
        EXPECT_GT(e, 0.0) << "nothing was rounded";
        EXPECT_EQ(a.loss, b.loss) << "the forward changed";
      }
    }
}

namespace {
// One named tensor's slice of runStep's gradient vector (the layout depends only on the config).
std::vector<float> gradOf(const Variant& v, const StepRun& r, const std::string& name) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt model(configOf(v), backend.get(), &tracker);
  const ParamInfo* p = model.find(name);
  const auto first = r.grads.begin() + p->gradOffset;
  return {first, first + p->numel};
}
}  // namespace

// 16-bit storage keeps no norm output: backward recomputes it from the exact (fp32) norm input
// with forward's kernel. What reads only those and the exact logits is then bitwise the
// fp32-stored run's: the untied LM head's gradient (dlogits^T · ln_f's output) and the final
// norm's (its input and the gradient through the head) — a rounded copy of ln_f's output would
// change both — while the blocks' gradients, which read the 16-bit tensors, are not.
TEST(SavedStorage, NormOutputsRecomputedExactly) {
  auto backend = ts::kernels::makeCpuBackend();
  for (bool flash : {false, true})
    for (DType half : {DType::BF16, DType::F16}) {
      Variant exact{"exact", 0, Comp::None, 1, flash, false, 2};
      exact.llamaDff = 16;
      Variant v = exact;
      v.saved = half;
      const StepRun a = runStep(exact, backend.get());
      const StepRun b = runStep(v, backend.get());
      for (const char* name : {"lm_head.weight", "model.norm.weight"})
        EXPECT_TRUE(bitwiseEqual(gradOf(v, b, name), gradOf(exact, a, name)))
            << name << " flash " << flash << " saved " << int(half);
      EXPECT_GT(relErr(b.grads, a.grads), 0.0) << "nothing was stored in 16 bits";
    }
}

// With bf16 GEMMs the linears read the bf16 saved inputs directly (rounded once, in forward):
// the same values they would round themselves, so the gradients stay within bf16 storage's
// rounding of the fp32-stored run's, GELU and ReLU, naive and flash (flash's backward also
// reads the fp32 attention output), GPT-2 and LLaMA; checkpointing stays bitwise.
TEST(SavedStorage, Bf16GemmReadsTheStoredInputs) {
  auto backend = ts::kernels::makeCpuBackend();
  for (int llama : {0, 16})
    for (bool flash : {false, true})
      for (bool relu : {false, true}) {
        if (llama && relu) continue;  // SwiGLU
        Variant exact{"exact", 0, Comp::None, 1, flash, relu, 3};
        exact.llamaDff = llama;
        exact.bf16Gemm = true;
        Variant v = exact;
        v.saved = DType::BF16;
        const StepRun a = runStep(exact, backend.get());
        const StepRun b = runStep(v, backend.get());
        const double e = relErr(b.grads, a.grads);
        EXPECT_LT(e, 1e-2) << "llama " << llama << " flash " << flash << " relu " << relu;
        EXPECT_GT(e, 0.0);
        EXPECT_EQ(a.loss, b.loss);
        Variant ck = v;
        ck.k = 1;
        EXPECT_TRUE(bitwiseEqual(runStep(ck, backend.get()).grads, b.grads));
      }
}

// Checkpointing recomputes packed tensors bit for bit (the int8 path runs the blocks on an fp32
// stream and packs each input; set 0 keeps its packed input too), so gradients equal the same
// storage without checkpointing exactly.
TEST(SavedStorage, CheckpointingBitwiseEqualsPlain) {
  auto backend = ts::kernels::makeCpuBackend();
  for (int llama : {0, 16})
    for (Comp comp : {Comp::None, Comp::Int8})
      for (int k : {1, 2}) {
        Variant plain{"p", 0, comp, 1, false, false, 5, DType::BF16, llama};
        Variant ck = plain;
        ck.k = k;
        const StepRun a = runStep(plain, backend.get());
        const StepRun b = runStep(ck, backend.get());
        EXPECT_TRUE(bitwiseEqual(a.grads, b.grads))
            << "llama " << llama << " int8 " << (comp == Comp::Int8) << " k " << k << ": "
            << relErr(b.grads, a.grads);
        EXPECT_EQ(a.loss, b.loss);
        EXPECT_LT(b.actPeak, a.actPeak);
      }
}

// Every pairing of {checkpointing, compression, accumulation, flash}: against the same settings
// without checkpointing/compression (bitwise unless int8: 1%), and against the plain naive
// single-batch step (fp32 rounding: 1e-4 relative; 1% with int8).
namespace {
class Pairings : public ::testing::TestWithParam<Variant> {};
}  // namespace

TEST_P(Pairings, MatchPlainPath) {
  auto backend = ts::kernels::makeCpuBackend();
  const Variant v = GetParam();
  Variant same = v;
  same.k = 0;
  same.comp = Comp::None;
  Variant plain{"plain", 0, Comp::None, 1, false, v.relu, v.L};
  const StepRun r = runStep(v, backend.get());
  const StepRun s = runStep(same, backend.get());
  const StepRun p = runStep(plain, backend.get());
  const bool lossy = v.comp == Comp::Int8;
  if (lossy)
    EXPECT_LT(relErr(r.grads, s.grads), 0.01);
  else
    EXPECT_TRUE(bitwiseEqual(r.grads, s.grads)) << relErr(r.grads, s.grads);
  EXPECT_LT(relErr(r.grads, p.grads), lossy ? 0.01 : 1e-4);
  EXPECT_NEAR(r.loss, p.loss, 1e-5 * std::fabs(p.loss));
}

INSTANTIATE_TEST_SUITE_P(
    All, Pairings,
    ::testing::Values(Variant{"ckpt_int8", 1, Comp::Int8},
                      Variant{"ckpt_sparse", 2, Comp::Sparse, 1, false, true, 4},
                      Variant{"ckpt_accum", 1, Comp::None, 2},
                      Variant{"ckpt_flash", 2, Comp::None, 1, true, false, 4},
                      Variant{"int8_accum", 0, Comp::Int8, 2},
                      Variant{"int8_flash", 0, Comp::Int8, 1, true},
                      Variant{"sparse_accum", 0, Comp::Sparse, 4, false, true},
                      Variant{"sparse_flash", 0, Comp::Sparse, 1, true, true},
                      Variant{"accum_flash", 0, Comp::None, 2, true},
                      Variant{"all_four_int8", 2, Comp::Int8, 2, true, false, 3},
                      Variant{"all_four_sparse", 1, Comp::Sparse, 2, true, true, 3}),
    [](const auto& info) { return info.param.name; });

// ---- Through the Trainer: the config keys run, and the memory event reports compression. ----
namespace {

ts::core::RunConfig additionConfig() {
  ts::core::RunConfig c;
  c.model.layers = 2;
  c.model.heads = 4;
  c.model.d_model = 64;
  c.model.seq_len = 16;
  c.data.source = "synthetic";
  c.data.task = "addition";
  c.data.digits = 2;
  c.train.steps = 600;
  c.train.micro_batch = 32;
  c.train.grad_accum = 1;
  c.train.eval_every = 600;
  c.train.checkpoint_every = 0;
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0.0;
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = 20;
  c.schedule.min_lr = 3e-4;
  c.device.threads = 1;
  return c;
}

std::vector<nlohmann::json> train(const ts::core::RunConfig& c, TrainResult& result,
                                  EventType want) {
  const auto dir = ts::testsupport::tempDir("activation", "train");
  ts::testsupport::Recorded rec;
  ts::testsupport::RunOptions o;
  o.exactMatchSamples = 64;
  result = ts::testsupport::runTrainer(c, rec, dir.string(), o);
  std::filesystem::remove_all(dir);
  return rec.of(want);
}

}  // namespace

// The plain learning test's target (tests/engine TrainerTest: >= 90% exact match on 2-digit
// addition after 600 steps) holds with int8-compressed activations (+ checkpointing).
TEST(Int8Compression, TrainsAdditionToPlainAccuracyTarget) {
  auto c = additionConfig();
  c.memory.activation_compression = "int8";
  c.memory.checkpointing = "all";
  TrainResult r;
  auto evals = train(c, r, EventType::Eval);
  ASSERT_EQ(r.status, "completed") << r.reason;
  ASSERT_FALSE(evals.empty());
  std::printf("int8 + checkpointing all: exact-match accuracy %.3f\n",
              evals.back()["accuracy"].get<double>());
  EXPECT_GE(evals.back()["accuracy"].get<double>(), 0.9) << evals.back().dump();
}

TEST(MemoryEvent, ReportsCompressionRatioAndSparsity) {
  auto c = additionConfig();
  c.train.steps = 2;
  c.train.eval_every = 0;
  c.memory.activation_compression = "int8";
  TrainResult r;
  auto mem = train(c, r, EventType::Memory);
  ASSERT_EQ(r.status, "completed") << r.reason;
  ASSERT_FALSE(mem.empty());
  ASSERT_TRUE(mem[0].contains("activation_compression")) << mem[0].dump();
  EXPECT_TRUE(mem[0].contains("ranks"));  // existing fields kept
  const auto& ci = mem[0]["activation_compression"];
  EXPECT_EQ(ci["mode"], "int8");
  // Per token and block: ln_1, qkv (3C), attention out, ln_2, c_fc out and activation (4C
  // each): 14C values, 4 bytes -> 1 byte + a 4-byte scale per row of each of the 6; the
  // probabilities: NH rows of T; ln_f's output once. (The residual stream is kept in bf16: not
  // compression.)
  const double C = 64, L = 2, NH = 4, T = 16;
  const double raw = L * (4 * 14 * C + NH * 4 * T) + 4 * C;
  const double stored = L * (14 * C + 6 * 4 + NH * (T + 4)) + C + 4;
  EXPECT_NEAR(ci["ratio"].get<double>(), raw / stored, 1e-12);
  EXPECT_FALSE(ci.contains("sparsity"));

  c.model.activation = "relu";
  c.memory.activation_compression = "sparse";
  c.memory.checkpointing = "every_k";
  mem = train(c, r, EventType::Memory);
  ASSERT_EQ(r.status, "completed") << r.reason;
  const auto& cs = mem[0]["activation_compression"];
  EXPECT_EQ(cs["mode"], "sparse");
  const double sp = cs["sparsity"].get<double>();
  EXPECT_GT(sp, 0.2);
  EXPECT_LT(sp, 0.8);
  // 4n bytes -> n/8 bitmap + 4 bytes per nonzero (n is a multiple of 8 here).
  EXPECT_NEAR(cs["ratio"].get<double>(), 32.0 / (1.0 + 32.0 * (1.0 - sp)), 1e-9);
}
