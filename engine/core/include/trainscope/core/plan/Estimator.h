#pragma once
// Memory estimator: pure functions from a run config (+ device memory size) to the memory
// table the tracker measures (per rank, per tier, per category; peak and steady state), plus
// FLOPs, tokens and parameter counts. Also the published formulas it is tested against
// (ZeRO, DeepSpeed's estimators, Korthikanti et al.), each as its own labelled function.
// No compute, no I/O: the GUI calls this on every click.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/MemoryTable.h"

namespace ts::core {

// ---- The contract with the engine --------------------------------------------------------
// The prediction the engine emits as `memory_plan` at the start of every run: one RankMemory
// per rank, MemoryEntry::current = steady state (between steps), ::peak = peak during a step.
// Uses the "engine" activation model. Never throws for a config that parsed.
MemoryReport predictMemoryReport(const RunConfig& config);

// ---- Full estimate -----------------------------------------------------------------------
// "engine": exact for this engine (docs/memory.md); "pytorch": a typical PyTorch transformer
// in the Korthikanti et al. 2022 model.
enum class ActivationModel { Engine, PyTorch };
std::string_view toString(ActivationModel m);  // "engine" | "pytorch"
std::optional<ActivationModel> activationModelFromString(std::string_view s);

struct EstimateOptions {
  int64_t device_memory = 0;  // bytes per device; 0 = unknown (no fit verdict)
  ActivationModel activation_model = ActivationModel::Engine;
  int64_t default_vocab = 50257;  // used when model.vocab == 0 (taken from the data later)
  bool nf4_double_quant = false;  // NF4 absmaxes stored in 8 bits (QLoRA double quantization)
  std::optional<ModelConfig> teacher_model;  // distillation teacher shape; default = student
  // precision.gemm "auto" means bf16 GEMMs on this machine (the engine's capabilities say
  // precisions.bf16.native_gemm; it needs AMX).
  bool native_bf16_gemm = false;
  // Threads of the CPU kernels' scratch region (workspace, one slice per thread): the engine
  // passes its backend's count, 0 on a GPU. -1: what the CPU backend would use here
  // (device.threads, else the cores this process may run on; 0 when device.backend is cuda).
  int cpu_kernel_threads = -1;
  bool rank0_only = false;  // report only rank 0 (it holds the largest shard); the planner's
                            // fast path
};

struct ParameterCounts {
  int64_t total = 0;          // base + adapters (teacher not included)
  int64_t trainable = 0;      // what has gradients and optimizer state
  int64_t frozen = 0;         // base weights under LoRA
  int64_t lora = 0;           // adapter parameters (part of trainable)
  int64_t embedding = 0;      // token (+ position) embeddings
  int64_t per_layer = 0;      // one transformer block
  int64_t largest_layer = 0;  // largest single weight tensor (DeepSpeed's Λ for ZeRO-3)
  int64_t teacher = 0;        // distillation teacher, 0 when off
};

struct MemoryEstimate {
  MemoryReport report;  // per rank; current = steady state, peak = peak
  ParameterCounts params;
  ActivationModel activation_model = ActivationModel::Engine;
  int64_t vocab = 0;  // the vocabulary the estimate assumed
  int64_t device_memory = 0;
  bool fits = true;  // rank 0's device peak <= device_memory (true when unknown)
  int64_t peak_device = 0, peak_host = 0, peak_nvme = 0;  // rank 0, summed over categories
  int64_t effective_batch = 0;        // micro_batch * grad_accum * ranks (sequences per step)
  int64_t tokens_per_step = 0;        // effective_batch * seq_len
  double flops_per_step = 0;          // all ranks, fwd + bwd (+ recompute, + teacher forward)
  double recompute_flops = 0;         // the extra forward work checkpointing costs, per step
  double comm_bytes_per_step = 0;     // ZeRO collective volume per rank per step (bytes)
  double offload_bytes_per_step = 0;  // host/NVMe <-> device traffic per rank per step
  double bytes_per_param = 0;      // model states (params + grads + optimizer) / trainable, rank 0
  std::vector<std::string> notes;  // assumptions made (fp8 choice, vocab fallback, ...)
};

MemoryEstimate estimateMemory(const RunConfig& config, const EstimateOptions& options = {});

// {"ranks":[...] (exactly toJson(MemoryReport)), "activation_model":..., "parameters":{...},
//  "effective_batch":..., "tokens_per_step":..., "flops_per_step":..., "device_memory":...,
//  "fits":..., "notes":[...]} — the body of the `memory_plan` event and `estimate --json`.
nlohmann::json toJson(const MemoryEstimate& estimate);
// The `memory_plan` event fields for a config (engine activation model).
nlohmann::json memoryPlanJson(const RunConfig& config);
nlohmann::json memoryPlanJson(const RunConfig& config, const EstimateOptions& options);

// Human table (one block per distinct rank layout), as `trainscope-engine estimate` prints it.
std::string formatMemoryTable(const MemoryEstimate& estimate);

// "24GiB", "80GB", "1.5TiB", "1024" (bytes), "512MiB" -> bytes; nullopt when malformed.
std::optional<int64_t> parseByteSize(std::string_view text);
std::string formatBytes(double bytes);  // "1.50 GiB"

// ---- Model presets -----------------------------------------------------------------------
// gpt2 (124M), gpt2-medium (355M), gpt2-large (774M), gpt2-xl (1.5B), llama-7b, llama-13b,
// llama-70b (SwiGLU, RMSNorm, GQA 8 kv heads). Names are case-insensitive; aliases such as
// "gpt2-124m", "gpt2-1.5b", "llama2-7b" are accepted.
std::optional<ModelConfig> modelPreset(std::string_view name);
std::vector<std::string> modelPresetNames();

// Parameter counts for a model shape (vocab must be resolved: > 0).
ParameterCounts countParameters(const ModelConfig& model, int64_t vocab,
                                const FinetuneConfig& finetune = {});

// ---- Published formulas (reference.md), labelled by source -------------------------------
// ZeRO (Rajbhandari et al. SC'20 §III.A): model-state bytes per rank for stage 0-3,
// mixed-precision Adam with optimizer multiplier K (12).
double zeroModelStateBytes(double psi, int ranks, int stage, double k = 12.0);

struct DeepSpeedEstimate {
  double gpu_bytes = 0;
  double cpu_bytes = 0;
};
// DeepSpeed runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs.
DeepSpeedEstimate deepspeedZero2Estimate(double totalParams, int gpusPerNode, int nodes,
                                         bool cpuOffload, double bufferFactor = 1.5);
// DeepSpeed runtime/zero/stage3.py estimate_zero3_model_states_mem_needs.
DeepSpeedEstimate deepspeedZero3Estimate(double totalParams, double largestLayerParams,
                                         int gpusPerNode, int nodes, bool cpuOffload,
                                         bool cpuOffloadParams, bool zeroInit = true,
                                         double bufferFactor = 1.5);

// Korthikanti et al. 2022 Table 2: activation bytes per transformer layer, 16-bit, no
// tensor/sequence parallelism. full_recompute keeps only the layer input (2sbh); flash drops
// the 5as²b attention-score term (keeps the logsumexp, 4 bytes per row per head).
double korthikantiLayerBytes(double s, double b, double h, double a, bool fullRecompute = false,
                             bool flash = false);

// PaLM appendix B: training FLOPs per token = 6Ψ + 12·L·h·s (+ one more forward with full
// recomputation: 2Ψ + 4·L·h·s).
double trainingFlopsPerToken(double psi, int layers, int hidden, int seq, bool fullRecompute);

// bitsandbytes blockwise quantization: bytes to store n elements with `bits` per element and
// one fp32 absmax per block; double_quant stores absmaxes in 8 bits (blocks of 256, one fp32
// per block of absmaxes, plus the fp32 offset): exactly what the engine's NF4 tensors take
// (kernels/Nf4.h).
double blockwiseQuantBytes(double n, int bits, int block, bool doubleQuant = false);
// 8-bit Adam state (Dettmers et al.): two 8-bit states + fp32 absmax per 256-block; tensors
// with fewer than 4096 elements keep fp32 m and v.
int64_t adam8bitStateBytes(int64_t tensorElements);

// LoRA adapter parameters: per adapted d_in x d_out matrix r·(d_in + d_out).
int64_t loraParameters(const ModelConfig& model, const LoraConfig& lora);

}  // namespace ts::core
