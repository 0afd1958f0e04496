// `trainscope-engine estimate CONFIG [--device-memory 24GiB] [--json] [--set k=v ...]`: the
// predicted per-rank memory table (or, with --json, the `memory_plan` event body).
// `trainscope-engine plan CONFIG|--model NAME [--device-memory 80GiB] [--ranks N]
// [--goal fit|fastest|largest_batch] [--json]`: ranked technique combinations.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "Commands.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/config/ConfigExport.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/plan/Planner.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/kernels/Backend.h"

namespace ts::app {
namespace {

bool loadConfig(const std::string& path, const std::vector<std::string>& overrides,
                core::RunConfig& out) {
  core::ConfigResult result = core::loadConfigWithOverrides(path, overrides);
  if (!result.ok() || !result.config) {
    for (const auto& issue : result.issues) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), issue.toString().c_str());
    }
    return false;
  }
  out = *result.config;
  return true;
}

bool parseSize(const std::string& flag, const std::string& text, int64_t& out) {
  if (text.empty()) return true;
  auto v = core::parseByteSize(text);
  if (!v || *v <= 0) {
    std::fprintf(stderr, "%s: '%s' is not a memory size (use e.g. 24GiB, 80GB, 512MiB or bytes)\n",
                 flag.c_str(), text.c_str());
    return false;
  }
  out = *v;
  return true;
}

bool parseActivationModel(const std::string& text, core::ActivationModel& out) {
  auto m = core::activationModelFromString(text);
  if (!m) {
    std::fprintf(stderr, "--activation-model: '%s' is not one of engine, pytorch\n", text.c_str());
    return false;
  }
  out = *m;
  return true;
}

bool writeJson(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return true;
  std::ofstream f(path);
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  f << j.dump(2) << "\n";
  return static_cast<bool>(f);
}

bool exportConfig(const core::RunConfig& config, const std::string& dsPath,
                  const std::string& hfPath) {
  if (!writeJson(dsPath, core::toDeepSpeedConfig(config))) return false;
  if (!hfPath.empty()) {
    return writeJson(hfPath, core::toJson(core::toHuggingFace(
                                 config, dsPath.empty() ? "ds_config.json" : dsPath)));
  }
  return true;
}

struct EstimateCliOptions {
  std::string config, deviceMemory, activationModel = "engine", dsOut, hfOut;
  std::vector<std::string> overrides;
  bool json = false, doubleQuant = false;
};

struct PlanCliOptions {
  std::string config, model, deviceMemory = "80GiB", hostMemory, goal = "fit",
                             activationModel = "pytorch", dsOut, hfOut;
  std::vector<std::string> overrides;
  int ranks = 0, seqLen = 0, microBatch = 0, top = 10;
  int64_t globalBatch = 0;
  bool json = false, noAdapters = false, noOffload = false, allowNvme = false, allowFp8 = false;
};

int estimateMain(const EstimateCliOptions& eo) {
  core::RunConfig config;
  core::EstimateOptions options;
  if (!loadConfig(eo.config, eo.overrides, config) ||
      !parseSize("--device-memory", eo.deviceMemory, options.device_memory) ||
      !parseActivationModel(eo.activationModel, options.activation_model)) {
    return kExitBadInput;
  }
  options.nf4_double_quant = eo.doubleQuant;
  if (!config.distill.teacher_checkpoint.empty()) {
    try {
      options.teacher_model = engine::modelConfigAt(config.distill.teacher_checkpoint);
    } catch (const std::exception& e) {
      std::cerr << "distill.teacher_checkpoint: " << e.what()
                << " (the teacher is assumed to be the student's shape)\n";
    }
  }
  // precision.gemm "auto" as `run` resolves it on this machine.
  options.native_bf16_gemm = engine::autoPicksBf16Gemm(kernels::makeCpuBackend().get());
  core::MemoryEstimate e = core::estimateMemory(config, options);
  if (eo.json)
    std::cout << core::toJson(e).dump() << std::endl;
  else
    std::cout << core::formatMemoryTable(e);
  return exportConfig(config, eo.dsOut, eo.hfOut) ? kExitOk : kExitRunFailed;
}

int planMain(const PlanCliOptions& po) {
  core::PlanRequest req;
  if (!po.config.empty()) {
    if (!loadConfig(po.config, po.overrides, req.base)) {
      return kExitBadInput;
    }
  } else if (po.model.empty()) {
    std::fprintf(stderr, "plan: give a CONFIG file or --model NAME\n");
    return kExitBadInput;
  } else {
    req.base.train.micro_batch = 1;
  }
  if (!po.model.empty()) {
    auto m = core::modelPreset(po.model);
    if (!m) {
      std::string names;
      for (const auto& n : core::modelPresetNames()) names += " " + n;
      std::fprintf(stderr, "--model: unknown preset '%s' (known:%s)\n", po.model.c_str(),
                   names.c_str());
      return kExitBadInput;
    }
    req.base.model = *m;
  }
  if (po.seqLen > 0) req.base.model.seq_len = po.seqLen;
  if (po.microBatch > 0) req.base.train.micro_batch = po.microBatch;
  req.ranks = po.ranks > 0 ? po.ranks : std::max(1, req.base.parallel.ranks);
  req.goal = *core::planGoalFromString(po.goal);
  req.global_batch = po.globalBatch;
  req.allow_adapters = !po.noAdapters;
  req.allow_offload = !po.noOffload;
  req.allow_nvme = po.allowNvme;
  req.allow_fp8 = po.allowFp8;
  req.max_plans = static_cast<size_t>(po.top);
  if (!parseSize("--device-memory", po.deviceMemory, req.device_memory) ||
      !parseSize("--host-memory", po.hostMemory, req.host_memory) ||
      !parseActivationModel(po.activationModel, req.activation_model)) {
    return kExitBadInput;
  }
  core::PlanResult result = core::planTraining(req);
  if (po.json)
    std::cout << core::toJson(result).dump() << std::endl;
  else
    std::cout << core::formatPlans(result);
  if (result.plans.empty()) {
    return kExitRunFailed;
  }
  return exportConfig(result.plans.front().config, po.dsOut, po.hfOut) ? kExitOk : kExitRunFailed;
}

void addEstimateCommand(CLI::App& app, int& exitCode) {
  auto eo = std::make_shared<EstimateCliOptions>();
  CLI::App* est = app.add_subcommand(
      "estimate",
      "Predict per-rank memory (parameters, gradients, optimizer state, activations, "
      "workspace per device/host/nvme tier), FLOPs and batch for a run config");
  est->add_option("CONFIG", eo->config, "Run config JSON file")->required();
  est->add_option("--device-memory", eo->deviceMemory,
                  "Memory per device to check the fit against, e.g. 24GiB, 80GB");
  est->add_flag("--json", eo->json, "Print the memory_plan event body as JSON");
  est->add_option("--activation-model", eo->activationModel,
                  "engine (exact for this engine) or pytorch (Korthikanti et al.)");
  est->add_flag("--double-quant", eo->doubleQuant, "NF4 base with double-quantized absmaxes");
  est->add_option("--export-deepspeed", eo->dsOut, "Also write a DeepSpeed JSON config here");
  est->add_option("--export-hf", eo->hfOut,
                  "Also write Hugging Face Trainer / peft / bitsandbytes arguments here");
  est->add_option("--set", eo->overrides, "Override a config field: key.path=value")
      ->take_all()
      ->allow_extra_args(false);
  est->callback([eo, &exitCode] { exitCode = estimateMain(*eo); });
}

void addPlanCommand(CLI::App& app, int& exitCode) {
  auto po = std::make_shared<PlanCliOptions>();
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Rank technique combinations that fit a model on given devices (fit, fastest, "
      "largest batch) with predicted memory and relative step cost");
  plan->add_option("CONFIG", po->config, "Run config JSON file (or use --model)");
  plan->add_option(
      "--model", po->model, "Model preset: " + [] {
        std::string s;
        for (const auto& n : core::modelPresetNames()) s += (s.empty() ? "" : ", ") + n;
        return s;
      }());
  plan->add_option("--device-memory", po->deviceMemory, "Memory per device (default 80GiB)");
  plan->add_option("--host-memory", po->hostMemory,
                   "Host RAM per rank for offload (default: "
                   "unlimited)");
  plan->add_option("--ranks", po->ranks, "Data-parallel ranks (default: the config's)")
      ->check(CLI::Range(1, 1 << 20));
  plan->add_option("--goal", po->goal, "fit | fastest | largest_batch")
      ->check(CLI::IsMember({"fit", "fastest", "largest_batch"}));
  plan->add_option("--global-batch", po->globalBatch, "Sequences per optimizer step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  plan->add_option("--seq-len", po->seqLen, "Sequence length")->check(CLI::Range(1, 1 << 24));
  plan->add_option("--micro-batch", po->microBatch, "Micro-batch for --goal fit")
      ->check(CLI::Range(1, 1 << 20));
  plan->add_option("--top", po->top, "Plans to print (default 10)")->check(CLI::Range(1, 1000));
  plan->add_flag("--no-adapters", po->noAdapters, "Never propose LoRA / QLoRA");
  plan->add_flag("--no-offload", po->noOffload, "Never propose CPU/NVMe offload");
  plan->add_flag("--allow-nvme", po->allowNvme, "Also propose NVMe offload");
  plan->add_flag("--allow-fp8", po->allowFp8, "Also propose fp8 (needs fp8 tensor cores)");
  plan->add_option("--activation-model", po->activationModel, "pytorch (default) or engine");
  plan->add_flag("--json", po->json, "Print the plans as JSON");
  plan->add_option("--export-deepspeed", po->dsOut, "Write the best plan as DeepSpeed JSON");
  plan->add_option("--export-hf", po->hfOut, "Write the best plan as Hugging Face arguments");
  plan->add_option("--set", po->overrides, "Override a config field: key.path=value")
      ->take_all()
      ->allow_extra_args(false);
  plan->callback([po, &exitCode] { exitCode = planMain(*po); });
}

}  // namespace

void addEstimateCommands(CLI::App& app, int& exitCode) {
  addEstimateCommand(app, exitCode);
  addPlanCommand(app, exitCode);
}

}  // namespace ts::app
