// Estimator vs measurement: the real engine trains a grid of small configs and the memory
// tracker's per-category peaks must match core::predictMemoryReport exactly, activations and
// workspace included (within 5% only for sparse compression's data-dependent activations).
// The grid covers every option the engine accepts; options it still rejects
// (unsupportedFeatures) are listed and skipped, so the grid grows by itself as techniques land.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "Support.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/model/Gpt.h"

using namespace ts;
using namespace ts::validation;
using core::MemoryCategory;
using core::MemoryTier;

namespace {

constexpr double kRelTolerance = 0.05;

std::string describe(const core::RunConfig& c) {
  char buf[360];
  std::snprintf(
      buf, sizeof buf,
      "%s L%d H%d D%d T%d mb%d ga%d %s %s %s %s ckpt=%s comp=%s %s%s gemm=%s drop=%.2g lora=%d "
      "bits=%d%s",
      c.model.arch.c_str(), c.model.layers, c.model.heads, c.model.d_model, c.model.seq_len,
      c.train.micro_batch, c.train.grad_accum, c.model.activation.c_str(), c.attention.impl.c_str(),
      c.optimizer.type.c_str(), c.data.task.c_str(), c.memory.checkpointing.c_str(),
      c.memory.activation_compression.c_str(), c.precision.policy.c_str(),
      c.precision.policy == "fp8" ? ("/" + c.precision.fp8.recipe).c_str() : "",
      c.precision.gemm.c_str(), c.model.dropout, c.finetune.lora.r, c.optimizer.state_bits,
      c.finetune.base_quant == "nf4" ? " nf4" : "");
  return buf;
}

core::RunConfig baseConfig() {
  core::RunConfig c;
  c.name = "validation-grid";
  c.data.source = "synthetic";
  c.data.digits = 2;
  c.train.steps = 2;
  c.train.eval_every = 0;  // one eval at the end: its forward-only peak is part of the run
  c.train.checkpoint_every = 0;
  c.optimizer.lr = 1e-3;
  c.schedule.warmup_steps = 0;
  c.device.threads = 1;
  return c;
}

// 24 base points: each axis cycles with a different period so that the combinations mix.
std::vector<core::RunConfig> baseGrid() {
  const int layers[] = {1, 2, 3};
  const int heads[] = {1, 2, 4, 2, 4};
  const int dModel[] = {16, 32, 48, 64};
  const int seqLen[] = {8, 16, 32, 64, 24};
  const int micro[] = {1, 2, 4, 8, 3, 5, 6};
  const int accum[] = {1, 2, 3};
  std::vector<core::RunConfig> grid;
  for (int i = 0; i < 24; ++i) {
    core::RunConfig c = baseConfig();
    c.model.layers = layers[i % 3];
    c.model.heads = heads[i % 5];
    c.model.d_model = dModel[i % 4];
    c.model.seq_len = seqLen[i % 5];
    c.train.micro_batch = micro[i % 7];
    c.train.grad_accum = accum[(i / 2) % 3];
    c.model.activation = i % 2 ? "relu" : "gelu";
    c.attention.impl = (i / 2) % 2 ? "flash" : "naive";
    c.optimizer.type = (i / 3) % 2 ? "sgd" : "adamw";
    c.data.task = (i / 4) % 2 ? "grammar" : "addition";
    // One addition sample is 10 tokens at 2 digits; the grammar corpus takes the short rows.
    if (c.data.task == "addition" && c.model.seq_len < 10) c.model.seq_len = 12;
    c.train.seed = 100 + i;
    grid.push_back(c);
  }
  return grid;
}

// A row per llama-like family, each with what it adds to the llama block at a size where it
// shows: head_dim unequal to d_model / heads, q/k norms, norms after the branches, windows,
// soft-caps, partial rotary (docs/models.md).
void familyRows(const std::vector<core::RunConfig>& base, int& k,
                std::vector<core::RunConfig>& out) {
  struct Family {
    const char *arch, *attention, *checkpointing, *compression, *policy;
  };
  for (const Family& f : {Family{"mistral", "flash", "none", "none", "fp32"},
                          Family{"qwen2", "naive", "every_k", "none", "bf16"},
                          Family{"qwen3", "flash", "all", "none", "fp32"},
                          Family{"gemma2", "naive", "none", "int8", "fp32"},
                          Family{"gemma3", "flash", "all", "none", "bf16"},
                          Family{"phi3", "naive", "none", "none", "fp32"},
                          Family{"olmo2", "flash", "every_k", "none", "fp32"}}) {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.model.arch = f.arch;
    c.model.layers = 3;
    c.model.heads = 4;
    c.model.kv_heads = 2;
    c.model.d_model = 32;
    c.model.d_ff = 88;
    c.model.activation = "gelu";
    c.attention.impl = f.attention;
    c.memory.checkpointing = f.checkpointing;
    c.memory.checkpoint_every = 0;
    c.memory.activation_compression = f.compression;
    c.precision.policy = f.policy;
    const std::string a = f.arch;
    if (a == "qwen3" || a == "gemma2" || a == "gemma3") c.model.head_dim = 12;
    if (a == "qwen3" || a == "gemma2" || a == "gemma3") c.model.tie_embeddings = true;
    if (a == "mistral" || a == "gemma2" || a == "gemma3" || a == "phi3") c.model.sliding_window = 5;
    if (a == "gemma2" || a == "gemma3") c.model.sliding_window_pattern = 2;
    if (a == "gemma2") c.model.attn_softcap = c.model.final_softcap = 20.0;
    if (a == "gemma3") c.model.rope_local_theta = 10000.0;
    if (a == "phi3") {
      c.model.partial_rotary_factor = 0.5;  // head 8: 4 dims rotated
      c.model.rope_scaling.type = "longrope";
      c.model.rope_scaling.short_factor = {1.0, 1.5};
      c.model.rope_scaling.long_factor = {2.0, 4.0};
      c.model.rope_scaling.original_max_position_embeddings = 4;
    }
    out.push_back(c);
    ++k;
  }
}

// Techniques that land over time; each is tried on a few shapes and kept when the engine
// accepts it.
std::vector<core::RunConfig> techniqueGrid() {
  std::vector<core::RunConfig> out;
  const auto base = baseGrid();
  const char* checkpointing[] = {"all", "every_k"};
  const char* compression[] = {"int8", "sparse"};
  int k = 0;
  for (const char* ck : checkpointing)
    for (const char* comp : {"none", "int8", "sparse"}) {
      core::RunConfig c = base[(k * 5) % base.size()];
      c.memory.checkpointing = ck;
      c.memory.checkpoint_every = 0;
      c.memory.activation_compression = comp;
      if (std::string(comp) == "sparse") c.model.activation = "relu";  // keeps relu's zeros
      out.push_back(c);
      ++k;
    }
  for (const char* comp : compression) {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.memory.activation_compression = comp;
    if (std::string(comp) == "sparse") c.model.activation = "relu";
    out.push_back(c);
    ++k;
  }
  {
    core::RunConfig c = base[7];
    c.model.layers = 3;
    c.memory.checkpointing = "every_k";
    c.memory.checkpoint_every = 2;
    out.push_back(c);
  }
  for (const char* p : {"bf16", "fp16"}) {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.precision.policy = p;
    out.push_back(c);
    ++k;
  }
  for (const char* recipe : {"delayed", "blockwise"}) {  // fp8 weights, scales, tile scratch
    core::RunConfig c = base[(k * 5) % base.size()];
    c.precision.policy = "fp8";
    c.precision.fp8.recipe = recipe;
    out.push_back(c);
    ++k;
  }
  for (const char* p : {"bf16", "pure_bf16"}) {  // bf16 GEMMs (emulated where no AMX)
    core::RunConfig c = base[(k * 5) % base.size()];
    c.precision.policy = p;
    c.precision.gemm = "bf16";
    out.push_back(c);
    ++k;
  }
  // model.dropout: masks are recomputed from their seed, never stored; one more workspace
  // buffer for a branch's gradient through its mask. Plain, checkpointed, and llama.
  for (const char* ck : {"none", "all"}) {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.model.dropout = 0.1;
    c.memory.checkpointing = ck;
    out.push_back(c);
    ++k;
  }
  // 8-bit AdamW: uint8 m and v with an fp32 absmax per 256 for tensors >= 4096 elements,
  // fp32 state below; with bf16 the fp32 master as well.
  for (const char* p : {"fp32", "bf16"}) {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.optimizer.type = "adamw";
    c.optimizer.state_bits = 8;
    c.model.d_model = 64;
    c.model.heads = 4;
    c.precision.policy = p;
    out.push_back(c);
    ++k;
  }
  // LoRA: a frozen base (parameters only), gradients and optimizer state of the adapters, each
  // adapter's saved x A^T, the adapter workspace (and its dropped input with lora dropout).
  {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.finetune.lora.r = 4;
    c.finetune.lora.targets = {"q", "v", "fc"};
    out.push_back(c);
    ++k;
    c = base[(k * 5) % base.size()];
    c.finetune.lora.r = 3;
    c.finetune.lora.dropout = 0.1;
    c.finetune.lora.targets = {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"};
    c.memory.checkpointing = "all";
    c.precision.policy = "bf16";
    out.push_back(c);
    ++k;
  }
  // QLoRA: the frozen block linears as NF4 (4-bit codes, 8-bit absmaxes, fp32 second-level
  // scales and offset per tensor: parameters), bf16 operand scratch and one dequantized weight
  // (workspace); fp32 and bf16 policies, gpt2 and llama (separate q, k, v tensors).
  for (const char* p : {"fp32", "bf16"})
    for (const char* arch : {"gpt2", "llama"}) {
      core::RunConfig c = base[(k * 5) % base.size()];
      c.precision.policy = p;
      c.finetune.lora.r = 2;
      c.finetune.lora.targets = {"q", "v"};
      c.finetune.base_quant = "nf4";
      if (std::string(arch) == "llama") {
        c.model.arch = "llama";
        c.model.heads = 4;
        c.model.kv_heads = 2;
        c.model.d_model = 32;
        c.model.d_ff = 88;
      }
      out.push_back(c);
      ++k;
    }
  // The llama description: grouped-query attention, SwiGLU of an odd width, no biases, untied
  // head, with each activation technique and the 16-bit and fp8 policies.
  struct Llama {
    const char *attention, *checkpointing, *compression, *policy;
  };
  for (const Llama& l :
       {Llama{"naive", "none", "none", "fp32"}, Llama{"flash", "all", "none", "fp32"},
        Llama{"naive", "every_k", "int8", "fp32"}, Llama{"flash", "none", "int8", "bf16"},
        Llama{"naive", "none", "none", "fp8"}, Llama{"flash", "all", "none", "bf16"}}) {
    core::RunConfig c = base[(k * 5) % base.size()];
    c.model.arch = "llama";
    c.model.layers = 2;
    c.model.heads = 4;
    c.model.kv_heads = 2;
    c.model.d_model = 32;
    c.model.d_ff = 88;
    c.attention.impl = l.attention;
    c.memory.checkpointing = l.checkpointing;
    c.memory.checkpoint_every = 0;
    c.memory.activation_compression = l.compression;
    c.precision.policy = l.policy;
    if (std::string(l.policy) == "bf16" && std::string(l.checkpointing) == "all") {
      c.model.dropout = 0.2;
      c.finetune.lora.r = 4;  // on every llama module, with adapter dropout
      c.finetune.lora.dropout = 0.1;
      c.finetune.lora.targets = {"q", "k", "v", "o", "fc", "proj"};
    }
    out.push_back(c);
    ++k;
  }
  familyRows(base, k, out);
  return out;
}

struct Row {
  std::string config;
  core::MemoryReport predicted, measured;
  std::string status;
  std::vector<std::string> failures;
};

std::string table(const std::vector<Row>& rows) {
  std::ostringstream os;
  const MemoryCategory cats[] = {MemoryCategory::Parameters, MemoryCategory::Gradients,
                                 MemoryCategory::OptimizerState, MemoryCategory::Activations,
                                 MemoryCategory::Workspace};
  os << "\nmemory grid: predicted/measured peak bytes per category (device tier, rank 0)\n";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-3s %-78s %-21s %-21s %-21s %-21s %-21s %s\n", "#", "config",
                "parameters", "gradients", "optimizer_state", "activations", "workspace",
                "verdict");
  os << buf;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    std::snprintf(buf, sizeof buf, "%-3zu %-78s ", i, r.config.c_str());
    os << buf;
    for (auto cat : cats) {
      const int64_t p =
          r.predicted.ranks.empty() ? 0 : r.predicted.ranks[0].at(MemoryTier::Device, cat).peak;
      const int64_t m =
          r.measured.ranks.empty() ? 0 : r.measured.ranks[0].at(MemoryTier::Device, cat).peak;
      std::snprintf(buf, sizeof buf, "%10lld/%-10lld ", (long long)p, (long long)m);
      os << buf;
    }
    os << (r.failures.empty() ? r.status : "MISMATCH") << "\n";
    for (const auto& f : r.failures) os << "      " << f << "\n";
  }
  return os.str();
}

}  // namespace

TEST(MemoryGrid, PredictedPeaksMatchMeasuredOnRealRuns) {
  std::vector<core::RunConfig> candidates = baseGrid();
  for (auto& c : techniqueGrid()) candidates.push_back(c);

  const fs::path dir = tempDir("grid");
  const auto cpu = kernels::makeCpuBackend();
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  int ran = 0, mismatched = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    core::RunConfig c = candidates[i];
    Row row;
    row.config = describe(c);
    if (auto issues = engine::unsupportedFeatures(c); !issues.empty()) {
      skipped.push_back(row.config + ": " + issues.front().toString());
      continue;
    }
    // The estimator needs the vocabulary the trainer will take from the data (vocab 0).
    core::RunConfig predictCfg = c;
    try {
      predictCfg.model.vocab = engine::makeDataset(c)->vocabSize();
    } catch (const std::exception& e) {
      row.failures.push_back(std::string("data: ") + e.what());
      rows.push_back(row);
      ++mismatched;
      continue;
    }
    // precision.gemm "auto" resolves on this machine's CPU (bf16 GEMMs only with AMX).
    predictCfg.precision.gemm = engine::useBf16Gemm(c, cpu.get()) ? "bf16" : "fp32";
    row.predicted = core::predictMemoryReport(predictCfg);

    Recorded rec;
    const auto result = runInProcess(c, rec, (dir / std::to_string(i)).string());
    row.status = result.status;
    if (result.status != "completed") {
      row.failures.push_back("run " + result.status + ": " + result.reason);
      rows.push_back(row);
      ++mismatched;
      continue;
    }
    ++ran;
    row.measured = result.memory;
    // The streamed `memory` event must carry the same table as the tracker's report.
    const auto memEvents = rec.of(core::EventType::Memory);
    if (memEvents.empty() || core::memoryReportFromJson(memEvents.back()) != row.measured)
      row.failures.push_back("last memory event differs from the tracker's report");

    if (row.predicted.ranks.size() != 1 || row.measured.ranks.size() != 1) {
      row.failures.push_back("expected one rank in prediction and measurement");
    } else {
      for (int t = 0; t < core::kMemoryTierCount; ++t)
        for (int k = 0; k < core::kMemoryCategoryCount; ++k) {
          const auto tier = static_cast<MemoryTier>(t);
          const auto cat = static_cast<MemoryCategory>(k);
          const auto& p = row.predicted.ranks[0].at(tier, cat);
          const auto& m = row.measured.ranks[0].at(tier, cat);
          // Every category is exact: engine and estimator read the same model description
          // (core/ModelSpec.h). Only sparse compression's activations depend on the data (the
          // nonzeros of the ReLU output; the estimator assumes half).
          const bool exact =
              !(cat == MemoryCategory::Activations && c.memory.activation_compression == "sparse");
          const std::string where =
              std::string(core::toString(tier)) + "." + std::string(core::toString(cat));
          if (exact) {
            if (p.peak != m.peak || p.current != m.current)
              row.failures.push_back(where + ": predicted peak/current " + std::to_string(p.peak) +
                                     "/" + std::to_string(p.current) + ", measured " +
                                     std::to_string(m.peak) + "/" + std::to_string(m.current) +
                                     " (must be exact)");
          } else if (std::llabs(p.peak - m.peak) > kRelTolerance * static_cast<double>(m.peak)) {
            row.failures.push_back(
                where + ": predicted peak " + std::to_string(p.peak) + ", measured " +
                std::to_string(m.peak) + " (off by " +
                std::to_string(m.peak ? 100.0 * (p.peak - m.peak) / m.peak : 100.0) +
                "%, allowed 5%)");
          }
        }
    }
    if (!row.failures.empty()) ++mismatched;
    rows.push_back(row);
  }
  fs::remove_all(dir);

  std::string report = table(rows);
  if (!skipped.empty()) {
    report += "not accepted by the engine yet (skipped):\n";
    for (const auto& s : skipped) report += "  " + s + "\n";
  }
  EXPECT_GE(ran, 20) << "the grid must exercise at least 20 real runs" << report;
  EXPECT_EQ(mismatched, 0) << report;
  if (!HasFailure()) std::printf("%s", report.c_str());  // on failure the messages carry it
}
