// Estimator against published numbers (shared/reference.md) and independent byte counts.
#include <gtest/gtest.h>

#include <cmath>

#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/plan/ZeroLayout.h"

using namespace ts::core;

namespace {

constexpr double GB = 1e9;
constexpr double GiB = 1073741824.0;

// |value - printed| within half a unit of the printed precision.
void expectPrinted(double value, double printed, double unit) {
  EXPECT_LE(std::abs(value - printed), unit / 2 + 1e-9) << value << " vs printed " << printed;
}

int64_t entry(const RankMemory& r, MemoryTier t, MemoryCategory c) {
  return r.at(t, c).peak;
}

int64_t modelStates(const RankMemory& r) {
  int64_t s = 0;
  for (auto t : {MemoryTier::Device, MemoryTier::Host, MemoryTier::Nvme}) {
    s += r.at(t, MemoryCategory::Parameters).peak + r.at(t, MemoryCategory::Gradients).peak +
         r.at(t, MemoryCategory::OptimizerState).peak;
  }
  return s;
}

// What a rank keeps between steps (a ZeRO-3 peak adds the weights gathered for a step).
int64_t modelStatesKept(const RankMemory& r) {
  int64_t s = 0;
  for (auto t : {MemoryTier::Device, MemoryTier::Host, MemoryTier::Nvme}) {
    s += r.at(t, MemoryCategory::Parameters).current + r.at(t, MemoryCategory::Gradients).current +
         r.at(t, MemoryCategory::OptimizerState).current;
  }
  return s;
}

// The engine's ZeRO layout pads each group to whole pages and the total to equal shards
// (core/ZeroLayout.h): the Ψ its shards divide.
double paddedPsi(const RunConfig& c, int64_t vocab) {
  const auto groups = zeroGroups(modelTensors(archSpecOf(c.model, vocab)),
                                 zeroLayoutOf(c.parallel.ranks, c.parallel.zero_stage));
  return static_cast<double>(groups.back().offset + groups.back().numel);
}

RunConfig presetRun(const std::string& name) {
  RunConfig c;
  c.model = *modelPreset(name);
  c.train.micro_batch = 1;
  return c;
}

}  // namespace

// ZeRO Table I (GB = 1e9): every row, every stage, to the printed precision.
TEST(ZeroFormula, TableI) {
  struct Row {
    double psi;
    int nd;
    double s0, s1, s2, s3;
    double u0, u1, u2, u3;
  };
  const Row rows[] = {{7.5e9, 64, 120, 31.4, 16.6, 1.88, 1, 0.1, 0.1, 0.01},
                      {7.5e9, 4, 120, 52.5, 41.3, 30, 1, 0.1, 0.1, 1},
                      {128e9, 64, 2048, 536, 284, 32, 1, 1, 1, 1},
                      {1e12, 1024, 16000, 4011.7, 2013.7, 15.6, 1, 0.1, 0.1, 0.1}};
  for (const auto& r : rows) {
    expectPrinted(zeroModelStateBytes(r.psi, r.nd, 0) / GB, r.s0, r.u0);
    expectPrinted(zeroModelStateBytes(r.psi, r.nd, 1) / GB, r.s1, r.u1);
    expectPrinted(zeroModelStateBytes(r.psi, r.nd, 2) / GB, r.s2, r.u2);
    expectPrinted(zeroModelStateBytes(r.psi, r.nd, 3) / GB, r.s3, r.u3);
  }
}

// The full estimator's model states (bf16 mixed precision, Adam) follow the ZeRO formulas for
// every stage and an odd rank count.
TEST(Estimator, ModelStatesFollowZeroForEveryStage) {
  for (int ranks : {1, 3, 8}) {
    for (int stage = 0; stage <= 3; ++stage) {
      RunConfig c = presetRun("gpt2");
      c.precision.policy = "bf16";
      c.parallel.ranks = ranks;
      c.parallel.zero_stage = stage;
      auto e = estimateMemory(c);
      ASSERT_EQ(e.report.ranks.size(), static_cast<size_t>(ranks));
      const double psi = static_cast<double>(e.params.trainable);
      const double padded = paddedPsi(c, e.vocab);
      EXPECT_GE(padded, psi);
      EXPECT_LT(padded, psi + (2.0 * c.model.layers + 8 + ranks) * kZeroAlign);
      for (const auto& r : e.report.ranks) {
        // Exactly the formula over the layout's Ψ (every rank holds an equal shard).
        EXPECT_NEAR(static_cast<double>(modelStatesKept(r)),
                    zeroModelStateBytes(ranks > 1 && stage >= 1 ? padded : psi, ranks, stage), 0.5)
            << "ranks " << ranks << " stage " << stage;
        EXPECT_GE(modelStates(r), modelStatesKept(r));
      }
    }
  }
}

// ZeRO-3 shards sum to the padded total, equal on every rank, with an odd rank count too.
TEST(Estimator, ShardsCoverEverythingWithOddRankCounts) {
  RunConfig c = presetRun("gpt2");
  c.parallel.ranks = 7;
  c.parallel.zero_stage = 3;
  auto e = estimateMemory(c);
  int64_t params = 0, lo = INT64_MAX, hi = 0;
  for (const auto& r : e.report.ranks) {
    int64_t p = r.at(MemoryTier::Device, MemoryCategory::Parameters).current;
    params += p;
    lo = std::min(lo, p);
    hi = std::max(hi, p);
  }
  EXPECT_EQ(params, static_cast<int64_t>(paddedPsi(c, e.vocab)) * 4);  // fp32
  EXPECT_GE(params, e.params.total * 4);
  EXPECT_EQ(hi, lo);
}

// DeepSpeed stage3.py estimator, documented example: 2851e6 params, 32e6 largest layer,
// 1 node x 8 GPUs (GiB, two decimals).
TEST(DeepSpeedEstimator, Zero3Example) {
  auto a = deepspeedZero3Estimate(2851e6, 32e6, 8, 1, true, true, true);
  expectPrinted(a.gpu_bytes / GiB, 0.12, 0.01);
  expectPrinted(a.cpu_bytes / GiB, 71.69, 0.01);
  auto b = deepspeedZero3Estimate(2851e6, 32e6, 8, 1, true, false, true);
  expectPrinted(b.gpu_bytes / GiB, 0.78, 0.01);
  expectPrinted(b.cpu_bytes / GiB, 63.72, 0.01);
  auto c = deepspeedZero3Estimate(2851e6, 32e6, 8, 1, false, false, true);
  expectPrinted(c.gpu_bytes / GiB, 6.09, 0.01);
  expectPrinted(c.cpu_bytes / GiB, 1.43, 0.01);
  // Without zero.Init (same documentation page): 127.45 GiB of CPU memory in every case.
  for (auto [off, offp] : {std::pair{true, true}, {true, false}, {false, false}}) {
    expectPrinted(deepspeedZero3Estimate(2851e6, 32e6, 8, 1, off, offp, false).cpu_bytes / GiB,
                  127.45, 0.01);
  }
}

// DeepSpeed stage_1_and_2.py estimator: documented example (offload 5.31 GiB GPU, 127.45 GiB
// CPU) and reference.md's current no-offload formula 2Ψ + 18Ψ/total_gpus.
TEST(DeepSpeedEstimator, Zero2Example) {
  auto off = deepspeedZero2Estimate(2851e6, 8, 1, true);
  expectPrinted(off.gpu_bytes / GiB, 5.31, 0.01);
  expectPrinted(off.cpu_bytes / GiB, 127.45, 0.01);
  auto none = deepspeedZero2Estimate(2851e6, 8, 1, false);
  EXPECT_DOUBLE_EQ(none.gpu_bytes, 2 * 2851e6 + 18 * 2851e6 / 8);
  expectPrinted(none.cpu_bytes / GiB, 127.45, 0.01);
  // Two nodes: the offload CPU term grows with the total GPU count (max(4*16, 16) = 64).
  EXPECT_DOUBLE_EQ(deepspeedZero2Estimate(1e9, 8, 2, true).cpu_bytes, 1e9 * 64 * 1.5);
}

// The classic 7B example: 16-bit params (14 GB) + grads (14 GB) + 28 GB Adam = 56 GB, i.e.
// 8 bytes/param; plain fp32 Adam 16 bytes/param = 112 GB.
TEST(Estimator, SevenBillionClassicExample) {
  RunConfig c = presetRun("llama-7b");
  c.precision.policy = "pure_bf16";
  auto e = estimateMemory(c);
  EXPECT_DOUBLE_EQ(e.bytes_per_param, 8.0);
  EXPECT_NEAR(7e9 * e.bytes_per_param / GB, 56.0, 1e-9);
  const auto& r = e.report.ranks[0];
  const double P = static_cast<double>(e.params.total);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Parameters), 2 * e.params.total);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Gradients), 2 * e.params.total);
  EXPECT_NEAR(entry(r, MemoryTier::Device, MemoryCategory::OptimizerState), 4 * P, 1);
  c.precision.policy = "fp32";
  e = estimateMemory(c);
  EXPECT_DOUBLE_EQ(e.bytes_per_param, 16.0);
  EXPECT_NEAR(7e9 * e.bytes_per_param / GB, 112.0, 1e-9);
  c.precision.policy = "bf16";  // 2 + 2 + 12 (fp32 master, m, v)
  EXPECT_DOUBLE_EQ(estimateMemory(c).bytes_per_param, 16.0);
  c.optimizer.type = "sgd";  // 2 + 2 + master 4 + momentum 4
  EXPECT_DOUBLE_EQ(estimateMemory(c).bytes_per_param, 12.0);
  c.optimizer.momentum = 0;  // PyTorch keeps no momentum buffer then
  EstimateOptions o;
  o.activation_model = ActivationModel::PyTorch;
  EXPECT_DOUBLE_EQ(estimateMemory(c, o).bytes_per_param, 8.0);
}

// Published parameter counts of the preset shapes.
TEST(ModelPresets, ParameterCountsMatchPublishedModels) {
  const std::pair<const char*, int64_t> expected[] = {
      {"gpt2", 124439808},       {"gpt2-medium", 354823168}, {"gpt2-large", 774030080},
      {"gpt2-xl", 1557611200},   {"llama-7b", 6738415616},   {"llama-13b", 13015864320},
      {"llama-70b", 68976648192}};
  for (auto [name, count] : expected) {
    auto m = modelPreset(name);
    ASSERT_TRUE(m) << name;
    EXPECT_EQ(countParameters(*m, m->vocab).total, count) << name;
  }
  EXPECT_TRUE(modelPreset("GPT2-1.5B"));
  EXPECT_TRUE(modelPreset("llama2-70b"));
  EXPECT_FALSE(modelPreset("gpt5"));
  // Every family's shapes: GPT-2 4, LLaMA 8, Mistral 2, Qwen2.5 7, Qwen3 6, Gemma 2 3,
  // Gemma 3 4, Phi 3, OLMo 2 4.
  EXPECT_EQ(modelPresetNames().size(), 41u);
  EXPECT_EQ(modelPreset("llama-70b")->kv_heads, 8);
}

// Korthikanti et al. Table 2, GPT-3 175B layer (a 96, h 12288, s 2048, b 1).
TEST(Korthikanti, Gpt3Layer) {
  EXPECT_DOUBLE_EQ(korthikantiLayerBytes(2048, 1, 12288, 96), 2868903936.0);
  EXPECT_DOUBLE_EQ(korthikantiLayerBytes(2048, 1, 12288, 96, true), 50331648.0);
  // Flash attention removes the 5as²b term, keeping a fp32 logsumexp per row and head.
  EXPECT_DOUBLE_EQ(korthikantiLayerBytes(2048, 1, 12288, 96, false, true),
                   34.0 * 2048 * 12288 + 4.0 * 96 * 2048);
}

// The "pytorch" activation model of the full estimator reproduces the same per-layer bytes
// (difference between 2 and 1 layers of the GPT-3 shape, 16-bit, with dropout).
TEST(Korthikanti, EstimatorPytorchModelPerLayer) {
  RunConfig c;
  c.model.arch = "gpt2";
  c.model.d_model = 12288;
  c.model.heads = 96;
  c.model.seq_len = 2048;
  c.model.vocab = 1000;
  c.model.dropout = 0.1;
  c.train.micro_batch = 1;
  c.precision.policy = "bf16";
  EstimateOptions o;
  o.activation_model = ActivationModel::PyTorch;
  auto act = [&](int layers, const std::string& ck) {
    c.model.layers = layers;
    c.memory.checkpointing = ck;
    return entry(estimateMemory(c, o).report.ranks[0], MemoryTier::Device,
                 MemoryCategory::Activations);
  };
  EXPECT_EQ(act(2, "none") - act(1, "none"), 2868903936);
  EXPECT_EQ(act(3, "all") - act(2, "all"), 50331648);
}

// ZeRO §III.B: GPT-2 1.5B (h 1600, L 48, s 1024, b 32) activations ≈ 60 GB in 16-bit (the
// paper counts 12·h·s·b·L values, a lower bound); checkpointing brings them to ≈ 8 GB. The
// estimator's PyTorch activation model must land on both. The paper counts the transformer
// blocks only, so the vocabulary is made tiny to take the LM head's logits (9.9 GB at V 50257)
// out of the comparison.
TEST(Korthikanti, ZeroPaperGpt2XlActivations) {
  RunConfig c;
  c.model.arch = "gpt2";
  c.model.layers = 48;
  c.model.d_model = 1600;
  c.model.heads = 25;
  c.model.seq_len = 1024;
  c.model.vocab = 64;
  c.train.micro_batch = 32;
  c.precision.policy = "bf16";
  EstimateOptions o;
  o.activation_model = ActivationModel::PyTorch;
  auto act = [&](const std::string& ck, bool flash) {
    c.memory.checkpointing = ck;
    c.attention.impl = flash ? "flash" : "naive";
    return double(entry(estimateMemory(c, o).report.ranks[0], MemoryTier::Device,
                        MemoryCategory::Activations));
  };
  EXPECT_GE(act("none", false) / GB, 60.0);
  EXPECT_NEAR(act("all", true) / GB, 8.0, 0.25 * 8.0);
}

// NF4 (bitsandbytes): 7B weights 3.5 GB + 0.44 GB absmax (blocks of 64) or 0.11 GB with
// double quantization; int8 7 GB.
TEST(Quantization, Nf4SevenBillion) {
  const double n = 7e9;
  const double base = n * 0.5;
  expectPrinted(blockwiseQuantBytes(n, 4, 64) / GB, 3.5 + 0.44, 0.01);
  expectPrinted((blockwiseQuantBytes(n, 4, 64) - base) / GB, 0.44, 0.01);
  expectPrinted((blockwiseQuantBytes(n, 4, 64, true) - base) / GB, 0.11, 0.01);
  // 0.127 bits/param overhead with double quantization.
  EXPECT_NEAR((blockwiseQuantBytes(n, 4, 64, true) - base) * 8 / n, 0.127, 0.0005);
  expectPrinted(blockwiseQuantBytes(n, 8, 64) / GB, 7.0 + 0.44, 0.01);
}

// 8-bit Adam: two 1-byte states + an fp32 absmax per 256-block each; < 4096 elements keep
// fp32 m and v.
TEST(Quantization, EightBitAdamState) {
  EXPECT_EQ(adam8bitStateBytes(4095), 4095 * 8);
  EXPECT_EQ(adam8bitStateBytes(4096), 4096 * 2 + 2 * 4 * 16);
  EXPECT_EQ(adam8bitStateBytes(1000000), 2000000 + 2 * 4 * 3907);
  // The estimator sums this per tensor: GPT-2 small in fp32 with 8-bit Adam. Tensors: wte,
  // wpe, ln_f (w, b) and per block ln (4x C), c_attn w/b, attn proj w/b, fc w/b, proj w/b.
  RunConfig c = presetRun("gpt2");
  c.optimizer.state_bits = 8;
  const int64_t C = 768, V = 50257, T = 1024, L = 12;
  std::vector<int64_t> sizes = {V * C, T * C, C, C};
  for (int l = 0; l < L; ++l) {
    for (int64_t n : {C, C, C, C, 3 * C * C, 3 * C, C * C, C, 4 * C * C, 4 * C, 4 * C * C, C}) {
      sizes.push_back(n);
    }
  }
  int64_t expected = 0;
  for (auto n : sizes) expected += adam8bitStateBytes(n);
  auto e = estimateMemory(c);
  EXPECT_EQ(entry(e.report.ranks[0], MemoryTier::Device, MemoryCategory::OptimizerState), expected);
}

// LoRA (Hu et al.): GPT-3 175B shape, r = 4 on q and v -> 18.9M trainable parameters.
TEST(Lora, Gpt3Rank4QV) {
  ModelConfig m;
  m.layers = 96;
  m.d_model = 12288;
  m.heads = 96;
  LoraConfig l;
  l.r = 4;
  l.targets = {"q", "v"};
  EXPECT_EQ(loraParameters(m, l), 18874368);
  expectPrinted(loraParameters(m, l) / 1e6, 18.9, 0.1);
}

// LoRA: the frozen base has no gradients or optimizer state; NF4 stores block linears in 4 bits.
TEST(Lora, FrozenBaseHasNoGradsAndNf4Base) {
  RunConfig c = presetRun("llama-7b");
  c.precision.policy = "bf16";
  c.finetune.lora.r = 16;
  c.finetune.lora.targets = {"q", "k", "v", "o"};
  auto e = estimateMemory(c);
  const int64_t C = 4096, L = 32;
  const int64_t lora = L * 4 * 16 * (C + C);
  EXPECT_EQ(e.params.lora, lora);
  EXPECT_EQ(e.params.trainable, lora);
  EXPECT_EQ(e.params.frozen, 6738415616);
  const auto& r = e.report.ranks[0];
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Gradients), 2 * lora);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::OptimizerState), 12 * lora);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Parameters),
            2 * lora + 2 * e.params.frozen);

  c.finetune.base_quant = "nf4";
  e = estimateMemory(c);
  // Block linears (4 of C² and 3 of C·11008 per layer) in NF4 with double quantization, per
  // tensor as bitsandbytes: n/2 bytes of codes, one byte per 64-block, an fp32 absmax per 256
  // blocks and the fp32 offset; embeddings, head and norms in bf16.
  auto nf4 = [](double n) { return n / 2 + n / 64 + 4 * std::ceil(n / 64 / 256) + 4; };
  const double lin = static_cast<double>(L * (4 * C * C + 3 * C * 11008));
  const double rest = static_cast<double>(e.params.frozen) - lin;
  const double quant = L * (4 * nf4(double(C * C)) + 3 * nf4(double(C * 11008)));
  EXPECT_NEAR(entry(e.report.ranks[0], MemoryTier::Device, MemoryCategory::Parameters),
              quant + rest * 2 + 2.0 * lora, 1);
  EXPECT_NEAR(8 * quant / lin, 4.127, 1e-3);
  // The PyTorch model follows bnb_4bit_use_double_quant (off): an fp32 absmax per block.
  EstimateOptions pt;
  pt.activation_model = ActivationModel::PyTorch;
  e = estimateMemory(c, pt);
  EXPECT_NEAR(entry(e.report.ranks[0], MemoryTier::Device, MemoryCategory::Parameters),
              lin * 0.5 + (lin / 64) * 4 + rest * 2 + 2.0 * lora, 1);
}

// PaLM appendix B FLOPs: 6Ψ + 12·L·h·s per token (+ 2Ψ + 4·L·h·s with full recomputation).
TEST(Flops, PalmFormulaAndEstimator) {
  EXPECT_DOUBLE_EQ(trainingFlopsPerToken(1e9, 10, 1000, 100, false), 6e9 + 12e6);
  EXPECT_DOUBLE_EQ(trainingFlopsPerToken(1e9, 10, 1000, 100, true), 8e9 + 16e6);
  RunConfig c = presetRun("gpt2");
  c.train.micro_batch = 4;
  c.train.grad_accum = 3;
  c.parallel.ranks = 2;
  auto e = estimateMemory(c);
  EXPECT_EQ(e.effective_batch, 4 * 3 * 2);
  EXPECT_EQ(e.tokens_per_step, 24 * 1024);
  // Position embeddings are a lookup (no FLOPs); the tied wte is the LM head.
  const double psi = 124439808.0 - 1024 * 768;
  EXPECT_NEAR(e.flops_per_step, e.tokens_per_step * (6 * psi + 12.0 * 12 * 768 * 1024), 1e3);
  c.memory.checkpointing = "all";
  e = estimateMemory(c);
  EXPECT_NEAR(e.flops_per_step, e.tokens_per_step * (8 * psi + 16.0 * 12 * 768 * 1024), 1e3);
  EXPECT_NEAR(e.recompute_flops, e.tokens_per_step * (2 * psi + 4.0 * 12 * 768 * 1024), 1e3);
}

// Offload tiers: optimizer state (and the gradients it consumes) to host or NVMe; ZeRO-3
// parameters to host.
TEST(Estimator, OffloadTiers) {
  RunConfig c = presetRun("gpt2");
  c.precision.policy = "bf16";
  c.parallel.ranks = 2;
  c.parallel.zero_stage = 3;
  c.parallel.offload_optimizer = "cpu";
  c.parallel.offload_params = "cpu";
  auto e = estimateMemory(c);
  const auto& r = e.report.ranks[0];
  // The engine's layout (padded shards): the optimizer state (12 B) and the bf16 weights' shard
  // (2 B per element) on the host; between steps no weight on the device, during one the
  // gathered groups (less than the whole model).
  const double shard = paddedPsi(c, e.vocab) / 2;
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::OptimizerState), 0);
  EXPECT_EQ(r.at(MemoryTier::Device, MemoryCategory::Parameters).current, 0);
  EXPECT_GT(entry(r, MemoryTier::Device, MemoryCategory::Parameters), 0);
  EXPECT_LT(entry(r, MemoryTier::Device, MemoryCategory::Parameters), 2.0 * e.params.total);
  EXPECT_EQ(entry(r, MemoryTier::Host, MemoryCategory::OptimizerState), int64_t(12.0 * shard));
  EXPECT_EQ(entry(r, MemoryTier::Host, MemoryCategory::Parameters), int64_t(2.0 * shard));
  EXPECT_GT(e.offload_bytes_per_step, 0);
  c.parallel.offload_optimizer = "nvme";
  c.parallel.offload_params = "none";
  e = estimateMemory(c);
  // The engine's own offload (ZeRO layout: 12 bytes per padded shard element).
  EXPECT_EQ(entry(e.report.ranks[0], MemoryTier::Nvme, MemoryCategory::OptimizerState),
            int64_t(12.0 * paddedPsi(c, e.vocab) / 2));
  EXPECT_GT(entry(e.report.ranks[0], MemoryTier::Host, MemoryCategory::Workspace), 0);
}

// Communication volume per ZeRO stage: 2Ψ (stages 0-2), 3Ψ (stage 3), in 16-bit elements.
TEST(Estimator, CommunicationVolumePerStage) {
  RunConfig c = presetRun("gpt2");
  c.precision.policy = "bf16";
  c.parallel.ranks = 4;
  const double psi = 124439808.0;
  for (int stage = 0; stage <= 3; ++stage) {
    c.parallel.zero_stage = stage;
    EXPECT_DOUBLE_EQ(estimateMemory(c).comm_bytes_per_step, (stage == 3 ? 3 : 2) * psi * 2);
  }
  c.parallel.ranks = 1;
  EXPECT_DOUBLE_EQ(estimateMemory(c).comm_bytes_per_step, 0.0);
}

// Distillation: the teacher's weights and logits are added; a bigger teacher can be given.
TEST(Estimator, DistillationTeacher) {
  RunConfig c = presetRun("gpt2");
  c.train.micro_batch = 2;
  auto base = estimateMemory(c);
  c.distill.teacher_checkpoint = "teacher.safetensors";
  EstimateOptions o;
  o.teacher_model = *modelPreset("gpt2-medium");
  auto e = estimateMemory(c, o);
  EXPECT_EQ(e.params.teacher, 354823168);
  const auto dev = [](const MemoryEstimate& m, MemoryCategory cat) {
    return m.report.ranks[0].at(MemoryTier::Device, cat).peak;
  };
  EXPECT_EQ(dev(e, MemoryCategory::Parameters) - dev(base, MemoryCategory::Parameters),
            354823168LL * 4);
  EXPECT_GE(dev(e, MemoryCategory::Activations) - dev(base, MemoryCategory::Activations),
            2LL * 1024 * 50257 * 4);  // teacher logits, fp32
  EXPECT_GT(e.flops_per_step, base.flops_per_step);
}

// Techniques move the activation bar the right way (engine model).
TEST(Estimator, ActivationTechniquesShrinkActivations) {
  RunConfig c = presetRun("gpt2");
  c.train.micro_batch = 2;
  auto act = [&] {
    return entry(estimateMemory(c).report.ranks[0], MemoryTier::Device,
                 MemoryCategory::Activations);
  };
  const int64_t plain = act();
  c.attention.impl = "flash";
  const int64_t flash = act();
  EXPECT_LT(flash, plain);
  // Naive keeps B·NH·T·T probabilities per block; flash a B·NH·T logsumexp.
  EXPECT_EQ(plain - flash, 12LL * 2 * 12 * (1024LL * 1024 - 1024) * 4);
  c.memory.checkpointing = "all";
  const int64_t ckpt = act();
  EXPECT_LT(ckpt, flash);
  c.memory.activation_compression = "int8";
  const int64_t ckptInt8 = act();
  EXPECT_LT(ckptInt8, ckpt);
  c.memory.checkpointing = "every_k";
  c.memory.checkpoint_every = 4;
  const int64_t k4 = act();
  EXPECT_GT(k4, ckptInt8);  // 3 checkpoints + 4 live blocks > 12 inputs + 1 block
  // Accumulation does not change one micro-batch's activations.
  c.train.grad_accum = 8;
  EXPECT_EQ(act(), k4);
}

// docs/memory.md's worked example (the engine's own byte count): B 16, T 32, C 64, NH 4, L 2,
// V 14 (addition data), AdamW, naive attention, fp32.
TEST(Estimator, EngineMemoryDocExample) {
  RunConfig c;  // the defaults are that shape
  c.model.vocab = 0;
  c.data.source = "synthetic";
  c.data.task = "addition";
  c.device.threads = 1;  // one kernel scratch slice
  auto r = predictMemoryReport(c).ranks.at(0);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Parameters), 412160);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Gradients), 412160);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::OptimizerState), 824320);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Activations), 5036032);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Workspace), 1968640);
  // Allocated once: steady state == peak.
  EXPECT_EQ(r.at(MemoryTier::Device, MemoryCategory::Activations).current, 5036032);
  EXPECT_EQ(r.totalPeak(MemoryTier::Host), 0);
  // The engine keeps an SGD buffer even at momentum 0 (4·P); PyTorch keeps none.
  c.optimizer.type = "sgd";
  c.optimizer.momentum = 0;
  EXPECT_EQ(
      entry(predictMemoryReport(c).ranks.at(0), MemoryTier::Device, MemoryCategory::OptimizerState),
      412160);
  EstimateOptions o;
  o.activation_model = ActivationModel::PyTorch;
  EXPECT_EQ(entry(estimateMemory(c, o).report.ranks.at(0), MemoryTier::Device,
                  MemoryCategory::OptimizerState),
            0);
  // Flash attention keeps B·NH·T floats instead of B·NH·T² and drops d(probabilities); its
  // backward tiles (2·64² + 2·64·16 + 32 floats) replace LayerNorm's 2C as the scratch slice.
  c.attention.impl = "flash";
  r = predictMemoryReport(c).ranks.at(0);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Activations),
            5036032 - 2 * 4 * (65536 - 2048));
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Workspace),
            1968640 - 4 * 65536 - 4 * 128 + 4 * 10272);
  // Each thread adds a slice; a GPU needs none.
  c.device.threads = 3;
  r = predictMemoryReport(c).ranks.at(0);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Workspace),
            1968640 - 4 * 65536 - 4 * 128 + 3 * 4 * 10272);
  c.device.backend = "cuda";
  r = predictMemoryReport(c).ranks.at(0);
  EXPECT_EQ(entry(r, MemoryTier::Device, MemoryCategory::Workspace), 1968640 - 4 * 65536 - 4 * 128);
}

TEST(Estimator, PredictMemoryReportAndJson) {
  RunConfig c;
  c.model.vocab = 0;  // resolved later from the data: the estimate says what it assumed
  c.data.source = "tokens";
  auto r = predictMemoryReport(c);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_GT(r.ranks[0].totalPeak(MemoryTier::Device), 0);
  auto j = memoryPlanJson(c);
  EXPECT_EQ(memoryReportFromJson(j), r);  // the memory_plan body parses as a MemoryReport
  EXPECT_EQ(j["activation_model"], "engine");
  EXPECT_FALSE(j["notes"].empty());
  EstimateOptions o;
  o.device_memory = 1;
  EXPECT_FALSE(estimateMemory(c, o).fits);
}

TEST(ByteSize, Parse) {
  EXPECT_EQ(parseByteSize("24GiB"), 24LL << 30);
  EXPECT_EQ(parseByteSize("80GB"), 80000000000LL);
  EXPECT_EQ(parseByteSize("1.5 TiB"), 1649267441664LL);
  EXPECT_EQ(parseByteSize("1024"), 1024);
  EXPECT_FALSE(parseByteSize("lots"));
  EXPECT_FALSE(parseByteSize("-3GB"));
  EXPECT_FALSE(parseByteSize("3 parsecs"));
}
