#include "trainscope/engine/train/Trainer.h"

#include "TrainingSession.h"
#include "trainscope/core/model/ModelFamily.h"

namespace ts::engine {

std::vector<core::ConfigIssue> unsupportedFeatures(const core::RunConfig& c) {
  std::vector<core::ConfigIssue> out;
  auto add = [&](std::string path, nlohmann::json value, std::string why) {
    out.push_back({std::move(path), value.dump(), std::move(why)});
  };
  const std::string later = "is not implemented by this engine yet";
  core::modelFamily(core::archSpecOf(c.model, 2).arch).refusals(c, add);
  const auto& pol = c.precision.policy;
  if (pol != "fp32" && pol != "bf16" && pol != "fp16" && pol != "fp8" && pol != "pure_bf16")
    add("precision.policy", pol, pol + " " + later + " (use fp32, bf16, fp16, fp8 or pure_bf16)");
  if (c.optimizer.state_bits == 8 && c.optimizer.type != "adamw")
    add("optimizer.state_bits", c.optimizer.state_bits,
        "8-bit state is 8-bit AdamW: needs optimizer.type adamw");
  if (c.optimizer.state_bits == 8 && c.precision.policy == "pure_bf16")
    add("optimizer.state_bits", c.optimizer.state_bits,
        "8-bit AdamW keeps an fp32 master; pure_bf16 has none (use bf16)");
  if (c.memory.activation_compression == "sparse" && c.device.backend == "cuda")
    add("memory.activation_compression", c.memory.activation_compression,
        "sparse compression packs on the host: the cpu backend only (int8 runs on cuda)");
  const int stage = c.parallel.zero_stage;
  if (stage >= 1 && pol == "pure_bf16" && c.finetune.lora.r > 0)
    add("parallel.zero_stage", stage,
        "pure_bf16 keeps no fp32 master to shard over a frozen base: use precision.policy bf16");
  if (c.parallel.offload_optimizer != "none" && (c.optimizer.type != "adamw" || pol == "pure_bf16"))
    add("parallel.offload_optimizer", c.parallel.offload_optimizer,
        "the offloaded optimizer is AdamW (32- or 8-bit state) with an fp32 master "
        "(optimizer.type adamw, a policy other than pure_bf16)");

  if (c.finetune.base_quant == "nf4" && pol == "fp8")
    add("finetune.base_quant", c.finetune.base_quant,
        "an NF4 base multiplies in bf16 GEMMs: use precision.policy bf16 or fp32 with it");
  return out;
}

Trainer::Trainer(core::RunConfig config, kernels::Backend* backend, TrainerOptions options)
    : config_(std::move(config)), backend_(backend), options_(std::move(options)) {}

Trainer::~Trainer() = default;

void Trainer::post(const core::Command& command) {
  std::lock_guard lock(mutex_);
  commands_.push_back(command);
}

TrainResult Trainer::run() {
  TrainingSession session(config_, backend_, options_, tracker_, [this] {
    std::deque<core::Command> commands;
    std::lock_guard lock(mutex_);
    commands.swap(commands_);
    return commands;
  });
  return session.run();
}

}  // namespace ts::engine
