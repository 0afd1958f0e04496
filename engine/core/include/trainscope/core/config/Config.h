#pragma once
// The run config: one JSON document shared by the engine, the GUI and the estimator.
// docs/config.md is the schema reference. Key names here are a public contract.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::core {

struct ModelConfig {
  std::string arch = "gpt2";
  int layers = 2;
  int heads = 4;
  int d_model = 64;
  int seq_len = 32;
  int vocab = 0;                    // 0 = take it from the data source's tokenizer
  std::string activation = "gelu";  // gelu | relu
  double dropout = 0.0;
  // Extra shapes only the estimator uses (LLaMA-style): mlp (gelu|swiglu), norm, kv_heads.
  std::string mlp = "gelu";
  std::string norm = "layernorm";  // layernorm | rmsnorm
  int kv_heads = 0;                // 0 = heads (no grouped-query attention)
  int d_ff = 0;                    // 0 = 4 * d_model
  double rope_theta = 10000.0;     // llama: rotary embedding base
  // The llama-like families' shape beyond the sizes (docs/models.md; each family says which of
  // these it reads, ModelFamily::modelKeys).
  int head_dim = 0;             // 0 = d_model / heads
  double norm_eps = 1e-5;       // RMSNorm / LayerNorm epsilon (rms_norm_eps)
  bool tie_embeddings = false;  // llama-like: the head is the token embedding (gpt2: always)
  // transformers' rope_scaling / rope_parameters: type default | linear | dynamic | llama3 |
  // yarn | longrope, and that type's parameters (modeling_rope_utils).
  struct RopeScaling {
    std::string type = "default";
    double factor = 1.0;
    double low_freq_factor = 1.0;                   // llama3
    double high_freq_factor = 4.0;                  // llama3
    int original_max_position_embeddings = 0;       // llama3, yarn, longrope (0 = max positions)
    double attention_factor = 0.0;                  // yarn, longrope: 0 = the type's default
    double beta_fast = 32.0, beta_slow = 1.0;       // yarn
    std::vector<double> short_factor, long_factor;  // longrope: rotary_dim / 2 each
    bool operator==(const RopeScaling&) const = default;
  };
  RopeScaling rope_scaling;
  double partial_rotary_factor = 1.0;  // Phi-3: the rotated share of each head
  int max_positions = 0;  // the model's max_position_embeddings (0 = seq_len): dynamic/longrope
  // Sliding-window attention: 0 = none. Pattern k > 0: every k-th layer is global and the
  // others slide (Gemma 2: 2, Gemma 3: 6); 0: every layer slides (Mistral, Phi-3).
  int sliding_window = 0;
  int sliding_window_pattern = 0;
  double rope_local_theta = 0.0;       // Gemma 3: the sliding layers' rotary base (0 = rope_theta)
  double query_pre_attn_scalar = 0.0;  // Gemma: scores scaled by its ^-0.5 (0 = head_dim)
  double attn_softcap = 0.0;           // Gemma 2: tanh soft-capping of the scores (0 = off)
  double final_softcap = 0.0;          // Gemma 2: of the logits (0 = off)
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic | text | tokens | jsonl
  std::string task = "addition";     // addition | grammar (synthetic only)
  std::string path;                  // text, tokens or jsonl file
  // text/jsonl: "" = the fine-tuning base's tokenizer.json when it has one, else bytes;
  // "bytes"; or a tokenizer.json (or a folder holding one).
  std::string tokenizer;
  int digits = 3;  // addition difficulty
  double val_fraction = 0.1;
};

struct TrainConfig {
  int64_t steps = 500;
  int micro_batch = 16;
  int grad_accum = 1;
  uint64_t seed = 1337;
  double grad_clip = 1.0;  // 0 = off
  int64_t eval_every = 50;
  int64_t checkpoint_every = 0;  // 0 = only at the end
};

struct OptimizerConfig {
  std::string type = "adamw";  // adamw | sgd
  double lr = 1e-3;
  std::vector<double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.1;
  double momentum = 0.9;  // sgd
  int state_bits = 32;    // 32 | 8
};

struct ScheduleConfig {
  std::string type = "cosine";  // constant | linear | cosine
  int64_t warmup_steps = 0;
  double min_lr = 0.0;
};

struct LossScaleConfig {
  std::string mode = "dynamic";  // dynamic | static
  double init = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double static_scale = 1.0;
};

struct Fp8Config {
  std::string recipe = "delayed";  // delayed | blockwise
  int amax_history = 1024;
  int margin = 0;
  std::string format = "hybrid";  // hybrid (E4M3 fwd, E5M2 grads) | e4m3
};

struct PrecisionConfig {
  std::string policy = "fp32";  // fp32 | bf16 | fp16 | fp8 | pure_bf16
  // GEMMs of the block linear layers under bf16 / pure_bf16: "bf16" multiplies the bf16
  // weights with bf16-rounded inputs (fp32 accumulation); "fp32" uses fp32 copies upcast from
  // the bf16 weights; "auto" is bf16 where the CPU has AMX and oneDNN a kernel for it.
  std::string gemm = "auto";  // auto | fp32 | bf16
  LossScaleConfig loss_scale;
  Fp8Config fp8;
};

struct MemoryConfig {
  std::string checkpointing = "none";           // none | all | every_k
  int checkpoint_every = 0;                     // k for every_k; 0 = sqrt(layers)
  std::string activation_compression = "none";  // none | int8 | sparse
};

struct AttentionConfig {
  std::string impl = "naive";  // naive | flash
};

struct ParallelConfig {
  int ranks = 1;
  int zero_stage = 0;
  std::string offload_optimizer = "none";  // none | cpu | nvme
  std::string offload_params = "none";     // none | cpu | nvme
  std::string nvme_path;
  // ranks > 1 on several machines: an mpirun hostfile (empty: every rank on this machine).
  std::string hostfile;
};

struct LoraConfig {
  int r = 0;  // 0 = LoRA off
  double alpha = 16.0;
  double dropout = 0.0;
  // Short names q k v o fc proj, or the model's module names (gpt2: c_attn, attn.c_proj, c_fc,
  // mlp.c_proj; llama: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj).
  std::vector<std::string> targets = {"q", "v"};
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r (rank-stabilized)
};

struct FinetuneConfig {
  std::string base_checkpoint;
  LoraConfig lora;
  std::string base_quant = "none";  // none | nf4
};

struct DistillConfig {
  std::string teacher_checkpoint;  // empty = off
  double temperature = 2.0;
  double alpha = 0.5;
  // How the frozen teacher is stored: auto (bf16 under a 16-bit policy, else fp32) | fp32 |
  // bf16 | nf4 (its block linears as NF4, dequantized to bf16 for each GEMM).
  std::string teacher_dtype = "auto";
};

struct CurriculumConfig {
  std::string type = "none";      // none | length | difficulty
  std::string pacing = "linear";  // linear | root | step
  double full_at = 0.5;           // fraction of steps at which the full data is in use
};

struct ProfileConfig {
  bool enabled = false;
  int wait = 1;
  int warmup = 1;
  int active = 3;
  int repeat = 1;
};

struct DeviceConfig {
  std::string backend = "auto";  // auto | cpu | cuda
  int threads = 0;               // 0 = all cores
};

struct RunConfig {
  std::string name = "run";
  std::vector<std::string> tags;
  std::string notes;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  PrecisionConfig precision;
  MemoryConfig memory;
  AttentionConfig attention;
  ParallelConfig parallel;
  FinetuneConfig finetune;
  DistillConfig distill;
  CurriculumConfig curriculum;
  ProfileConfig profile;
  DeviceConfig device;
};

// One problem found in a config: where (JSON path like "/model/layers" or "model.layers"),
// the offending value (as JSON text) and what is allowed.
struct ConfigIssue {
  std::string path;
  std::string value;
  std::string message;
  std::string toString() const;
};

struct ConfigResult {
  std::optional<RunConfig> config;  // set only when issues is empty
  std::vector<ConfigIssue> issues;
  bool ok() const { return issues.empty(); }
};

// What the validator may assume about the machine (cross-field rules such as "fp8 needs a
// backend that supports it or CPU emulation"). Defaults describe a CPU-only build.
struct ValidationContext {
  bool cuda_available = false;
  bool fp8_emulation = true;
  // When true, device.backend "cuda" needs cuda_available (the run command sets it; validate and
  // the estimator leave it off so GPU configs can be checked on any machine).
  bool check_backend = false;
  // When true, files the config names for the run to read (parallel.hostfile) must exist and be
  // readable (the run command sets it; validate leaves it off for configs of other machines).
  bool check_files = false;
};

// Parse + validate a JSON text (reports malformed JSON with line and column).
ConfigResult parseConfigText(const std::string& text, const ValidationContext& ctx = {});
// Validate an already-parsed document; collects every problem at once, unknown keys included.
ConfigResult parseConfigJson(const nlohmann::json& doc, const ValidationContext& ctx = {});
// Load from a file; a missing or unreadable file is an issue naming the file.
ConfigResult loadConfigFile(const std::string& path, const ValidationContext& ctx = {});
// loadConfigFile + applyOverride for each "--set" assignment, then validation (run, validate).
ConfigResult loadConfigWithOverrides(const std::string& path,
                                     const std::vector<std::string>& overrides,
                                     const ValidationContext& ctx = {});
// Apply "--set a.b.c=value" overrides to a document before validation; value parsed as JSON
// when it is valid JSON, else taken as a string. Returns issues for malformed overrides.
std::vector<ConfigIssue> applyOverride(nlohmann::json& doc, const std::string& assignment);
// The resolved document (every default filled).
nlohmann::json toJson(const RunConfig& config);

}  // namespace ts::core
