// Rules that involve more than one field. Each names the field the user most likely has to
// change, and is skipped when a field it reads already had its own problem.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <initializer_list>

#include "ConfigInternal.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"

namespace ts::core::config {
namespace {

using nlohmann::json;

// The rules over one validated config, grouped by the section they report in; the order of the
// groups (and of the rules in each) is the order of the problems reported.
class CrossFieldRules {
 public:
  CrossFieldRules(const RunConfig& c, const ValidationContext& ctx,
                  const std::set<std::string>& bad, std::vector<ConfigIssue>& issues)
      : c_(c), ctx_(ctx), bad_(bad), issues_(issues) {}

  void checkModel();
  void checkFamilyKeys();
  void checkData();
  void checkSchedule();
  void checkPrecision();
  void checkMemory();
  void checkParallel();
  void checkFinetune();
  void checkCurriculum();

 private:
  // A field is usable unless it, or a section above it, was reported.
  bool okPath(const std::string& p) const {
    for (std::string q = p;;) {
      if (bad_.count(q)) return false;
      auto dot = q.rfind('.');
      if (dot == std::string::npos) return true;
      q.resize(dot);
    }
  }
  bool ok(std::initializer_list<const char*> paths) const {
    for (const char* p : paths) {
      if (!okPath(p)) return false;
    }
    return true;
  }
  void add(std::string path, const json& value, std::string msg) {
    issues_.push_back(ConfigIssue{std::move(path), valueText(value), std::move(msg)});
  }

  const RunConfig& c_;
  const ValidationContext& ctx_;
  const std::set<std::string>& bad_;
  std::vector<ConfigIssue>& issues_;
};

void CrossFieldRules::checkModel() {
  const auto& m = c_.model;
  if (ok({"model.d_model", "model.heads", "model.head_dim"}) && m.head_dim == 0 &&
      m.d_model % m.heads != 0) {
    add("model.d_model", m.d_model,
        "must be divisible by model.heads (" + std::to_string(m.heads) + ")");
  }
  if (ok({"model.kv_heads", "model.heads"}) && m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    add("model.kv_heads", m.kv_heads,
        "must be 0 or divide model.heads (" + std::to_string(m.heads) + ")");
  }
  if (ok({"model.vocab"}) && m.vocab == 1) {
    add("model.vocab", m.vocab, "must be 0 (from the data) or >= 2");
  }
  checkFamilyKeys();
}

// The llama-like keys a family does not read must keep their defaults: a set value would do
// nothing (docs/models.md lists which family reads which).
void CrossFieldRules::checkFamilyKeys() {
  const ModelFamily* family = findModelFamily(c_.model.arch);
  if (!family || !ok({"model"})) return;
  RunConfig defaults;
  defaults.model.arch = c_.model.arch;
  const json now = toJson(c_)["model"], def = toJson(defaults)["model"];
  for (const char* k :
       {"head_dim", "norm_eps", "tie_embeddings", "rope_scaling", "max_positions",
        "partial_rotary_factor", "sliding_window", "sliding_window_pattern", "rope_local_theta",
        "query_pre_attn_scalar", "attn_softcap", "final_softcap"})
    if (!family->readsModelKey(k) && now[k] != def[k])
      add(std::string("model.") + k, now[k],
          "does nothing for model.arch " + c_.model.arch + " (" + family->displayName() +
              " does not read it; docs/models.md lists each family's keys): remove it");
}

void CrossFieldRules::checkData() {
  const auto& d = c_.data;
  if (ok({"data.source", "data.path"}) && d.source != "synthetic" && d.path.empty()) {
    add("data.path", d.path, "must name a file when data.source is \"" + d.source + "\"");
  }
  if (ok({"data.source", "data.task"}) && d.source == "synthetic" && d.task.empty()) {
    add("data.task", d.task, "must be one of: addition, grammar when data.source is \"synthetic\"");
  }
  if (ok({"train.eval_every", "data.val_fraction"}) && c_.train.eval_every > 0 &&
      d.val_fraction <= 0) {
    add("train.eval_every", c_.train.eval_every,
        "must be 0 (no evaluation) when data.val_fraction is 0: there is no validation split");
  }
}

void CrossFieldRules::checkSchedule() {
  if (ok({"schedule.min_lr", "optimizer.lr"}) && c_.schedule.min_lr > c_.optimizer.lr) {
    add("schedule.min_lr", c_.schedule.min_lr,
        "must be <= optimizer.lr (" + fmtNumber(c_.optimizer.lr) + ")");
  }
}

// Precision and the device it needs.
void CrossFieldRules::checkPrecision() {
  const auto& p = c_.precision;
  if (ok({"precision.gemm", "precision.policy"}) && p.gemm == "bf16" && p.policy != "bf16" &&
      p.policy != "pure_bf16") {
    add("precision.gemm", p.gemm,
        "bf16 GEMMs multiply the bf16 weights, so they need precision.policy bf16 or pure_bf16 "
        "(it is \"" +
            p.policy + "\"); allowed here: auto, fp32");
  }
  if (ok({"precision.policy", "device.backend"}) && p.policy == "fp8") {
    bool cudaPossible = ctx_.cuda_available && c_.device.backend != "cpu";
    bool cpuPossible = ctx_.fp8_emulation && c_.device.backend != "cuda";
    if (!cudaPossible && !cpuPossible) {
      add("precision.policy", p.policy,
          "fp8 needs a CUDA device with fp8 support or CPU emulation (device.backend \"" +
              c_.device.backend + "\" offers neither here); allowed: fp32, bf16, fp16, pure_bf16");
    }
  }
  if (ctx_.check_backend && ok({"device.backend"}) && c_.device.backend == "cuda" &&
      !ctx_.cuda_available) {
    add("device.backend", c_.device.backend, "no CUDA device is available; allowed: auto, cpu");
  }
}

void CrossFieldRules::checkMemory() {
  const auto& m = c_.model;
  const auto& mem = c_.memory;
  if (ok({"memory.checkpointing", "memory.checkpoint_every", "model.layers"}) &&
      mem.checkpointing == "every_k" && mem.checkpoint_every > m.layers) {
    add("memory.checkpoint_every", mem.checkpoint_every,
        "must be 0 (sqrt(layers)) or <= model.layers (" + std::to_string(m.layers) + ")");
  }

  if (ok({"memory.activation_compression", "model.activation"}) &&
      mem.activation_compression == "sparse" && m.activation != "relu") {
    add("memory.activation_compression", mem.activation_compression,
        "\"sparse\" stores post-ReLU zeros as a bitmap, so it needs model.activation \"relu\" "
        "(it is \"" +
            m.activation + "\"); allowed here: none, int8");
  }
}

void CrossFieldRules::checkParallel() {
  const auto& par = c_.parallel;
  if (ok({"parallel.zero_stage", "parallel.ranks"}) && par.zero_stage > 0 && par.ranks < 2) {
    add("parallel.zero_stage", par.zero_stage,
        "must be 0 when parallel.ranks is 1: ZeRO shards state across ranks (set ranks >= 2)");
  }
  if (ok({"parallel.offload_optimizer", "parallel.zero_stage"}) &&
      par.offload_optimizer != "none" && par.zero_stage < 1) {
    add("parallel.offload_optimizer", par.offload_optimizer,
        "must be \"none\" unless parallel.zero_stage >= 1");
  }
  if (ok({"parallel.offload_params", "parallel.zero_stage"}) && par.offload_params != "none" &&
      par.zero_stage != 3) {
    add("parallel.offload_params", par.offload_params,
        "must be \"none\" unless parallel.zero_stage is 3 (parameters are sharded only there)");
  }
  if (ok({"parallel.offload_optimizer", "parallel.offload_params", "parallel.nvme_path"}) &&
      (par.offload_optimizer == "nvme" || par.offload_params == "nvme") && par.nvme_path.empty()) {
    add("parallel.nvme_path", par.nvme_path, "must name a directory when offloading to nvme");
  }
  // A hostfile is handed to mpirun as a file name, never to a shell; it must be one.
  if (ctx_.check_files && ok({"parallel.hostfile"}) && !par.hostfile.empty()) {
    std::ifstream probe(par.hostfile);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(par.hostfile, ec) || !probe)
      add("parallel.hostfile", par.hostfile,
          "must be a readable mpirun hostfile (a file of host names, one per line), or \"\" for "
          "this machine only; it is not a readable file");
  }
}

void CrossFieldRules::checkFinetune() {
  const auto& ft = c_.finetune;
  const auto& shortTargets = loraShortTargets();
  if (ok({"finetune.base_quant", "finetune.lora.r"}) && ft.base_quant == "nf4" && ft.lora.r == 0) {
    add("finetune.base_quant", ft.base_quant,
        "nf4 freezes the base weights, so it needs LoRA: set finetune.lora.r >= 1, or use "
        "\"none\"");
  }
  if (ok({"finetune.lora.r", "finetune.lora.targets"}) && ft.lora.r > 0 &&
      ft.lora.targets.empty()) {
    add("finetune.lora.targets", json::array(),
        "must list at least one of: " + joinList(loraTargetNames()) + " when finetune.lora.r >= 1");
  }
  if (ok({"finetune.lora.targets", "model.arch"}) && ft.lora.r > 0) {
    // A module name must be one of this architecture's modules.
    const auto modules = loraModules(archSpecOf(c_.model, 2));
    for (const auto& t : ft.lora.targets)
      if (std::find(shortTargets.begin(), shortTargets.end(), t) == shortTargets.end() &&
          std::find(modules.begin(), modules.end(), t) == modules.end())
        add("finetune.lora.targets", t,
            "is not a module of model.arch \"" + c_.model.arch + "\" (its modules: " +
                joinList(modules) + "; or a short name: " + joinList(shortTargets) + ")");
  }
}

void CrossFieldRules::checkCurriculum() {
  if (ok({"curriculum.type", "data.source"}) && c_.curriculum.type == "difficulty" &&
      c_.data.source != "synthetic") {
    add("curriculum.type", c_.curriculum.type,
        "\"difficulty\" needs data.source \"synthetic\" (only generated data knows its "
        "difficulty); allowed here: none, length");
  }
}

}  // namespace

void checkCrossField(const RunConfig& c, const ValidationContext& ctx,
                     const std::set<std::string>& bad, std::vector<ConfigIssue>& issues) {
  CrossFieldRules rules(c, ctx, bad, issues);
  rules.checkModel();
  rules.checkData();
  rules.checkSchedule();
  rules.checkPrecision();
  rules.checkMemory();
  rules.checkParallel();
  rules.checkFinetune();
  rules.checkCurriculum();
}

}  // namespace ts::core::config
