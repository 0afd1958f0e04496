#pragma once
// Export a run config for users who take a plan to their own cluster: a DeepSpeed JSON config
// and Hugging Face Trainer arguments (+ peft LoRA and bitsandbytes 4-bit keys), and import a
// DeepSpeed JSON config back into run-config fields (the GUI's "import DeepSpeed config").
// Key names follow the DeepSpeed config documentation and transformers.TrainingArguments.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"

namespace ts::core {

// DeepSpeed config: train_batch_size, train_micro_batch_size_per_gpu,
// gradient_accumulation_steps, gradient_clipping, bf16 / fp16 (loss scaling), zero_optimization
// (stage, offload_optimizer, offload_param), optimizer (AdamW / SGD), scheduler (WarmupCosineLR,
// WarmupDecayLR, WarmupLR), activation_checkpointing.
nlohmann::json toDeepSpeedConfig(const RunConfig& config);

struct HuggingFaceExport {
  nlohmann::json training_args;    // transformers.TrainingArguments keyword arguments
  nlohmann::json lora_config;      // peft.LoraConfig kwargs; null when LoRA is off
  nlohmann::json bnb_config;       // transformers.BitsAndBytesConfig kwargs; null without NF4
  std::vector<std::string> notes;  // what has no equivalent (fp8, pure bf16, ...)
};
// `deepspeedPath` is the file name written into training_args.deepspeed when the config uses
// ZeRO or offload (the caller writes toDeepSpeedConfig() there). `doubleQuant` sets
// bnb_4bit_use_double_quant.
HuggingFaceExport toHuggingFace(const RunConfig& config,
                                const std::string& deepspeedPath = "ds_config.json",
                                bool doubleQuant = false);
// {"training_args":..., "lora_config":..., "bnb_config":..., "notes":[...]}
nlohmann::json toJson(const HuggingFaceExport& e);

struct DeepSpeedImport {
  RunConfig config;                  // `base` with the DeepSpeed fields applied
  std::vector<ConfigIssue> issues;   // wrong types / values (path like "/fp16/loss_scale")
  std::vector<std::string> ignored;  // keys without a Trainscope equivalent, or "auto" values
  bool ok() const { return issues.empty(); }
};
// Never throws; `base` supplies everything DeepSpeed does not describe (model, data, ...).
DeepSpeedImport importDeepSpeedConfig(const nlohmann::json& deepspeed, const RunConfig& base = {});

}  // namespace ts::core
