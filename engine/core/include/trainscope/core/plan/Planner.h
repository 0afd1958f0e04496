#pragma once
// Planner: given a model, a device memory size, a rank count and a goal, enumerate technique
// combinations (precision, checkpointing, activation compression, attention, micro-batch and
// accumulation, ZeRO stage, offload, LoRA / NF4 base, 8-bit optimizer), predict each one's
// memory with the estimator and a relative step time from a simple cost model, and rank them.
//
// Ranking: plans are first grouped by class — full training on the device, then adapters
// (LoRA / QLoRA) on the device, then full training with offload, then adapters with offload —
// because adapters change what is trained and offload costs PCIe/NVMe traffic. Inside a class
// the goal orders them: `fastest` by step time (5% buckets), then fewest numerical compromises,
// then lower peak; `fit` keeps the requested micro-batch and puts fewest compromises first;
// `largest_batch` maximises the micro-batch.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/Estimator.h"

namespace ts::core {

enum class PlanGoal { Fit, Fastest, LargestBatch };
std::string_view toString(PlanGoal g);  // "fit" | "fastest" | "largest_batch"
std::optional<PlanGoal> planGoalFromString(std::string_view s);

// Nominal hardware for the relative cost (defaults: a datacenter GPU of the H100 class).
// Only ratios matter: a plan's cost is reported relative to plain bf16 training.
struct HardwareModel {
  double device_flops = 400e12;     // dense bf16 FLOP/s actually reached
  double device_bandwidth = 3e12;   // HBM bytes/s
  double link_bandwidth = 150e9;    // collective bytes/s per rank within a node (<= 8 ranks)
  double network_bandwidth = 25e9;  // collective bytes/s per rank across nodes
  double pcie_bandwidth = 25e9;     // host <-> device bytes/s
  double nvme_bandwidth = 5e9;      // NVMe bytes/s
  double cpu_optimizer_params_per_s = 1e9;  // CPU Adam (DeepSpeed CPUAdam class)
  double micro_step_overhead_s = 2e-3;      // launches, syncs per micro-batch
};

struct PlanRequest {
  RunConfig base;                // model shape, seq_len, optimizer, micro_batch, grad_accum
  int64_t device_memory = 0;     // bytes per device (required, > 0)
  int64_t host_memory = 0;       // bytes of host RAM per rank for offload; 0 = unlimited
  double usable_fraction = 0.9;  // of device memory (runtime context, fragmentation)
  int ranks = 1;
  PlanGoal goal = PlanGoal::Fit;
  int64_t global_batch = 0;  // sequences per optimizer step; 0 = base micro_batch*grad_accum*ranks
  bool allow_adapters = true;  // LoRA / QLoRA (only when full training does not fit on device)
  bool allow_offload = true;
  bool allow_nvme = false;  // needs an NVMe path
  bool allow_fp8 = false;   // needs fp8 tensor cores (sm_89+)
  int lora_rank = 16;
  std::vector<std::string> lora_targets = {"q", "k", "v", "o"};
  ActivationModel activation_model = ActivationModel::PyTorch;
  HardwareModel hardware;
  size_t max_plans = 10;
  // Why the engine that will run a plan cannot run it (empty: it can), e.g. from the engine's
  // capabilities; unset: every plan counts as runnable.
  std::function<std::vector<std::string>(const RunConfig&)> limitations;
  bool runnable_only = false;  // leave out plans with limitations (counted in not_runnable)
  // List the best plan of each kind (Plan::kind) first, then the rest in the goal's order: the
  // first ten of several hundred fits are otherwise near-duplicates of one kind.
  bool best_of_each_kind_first = false;
};

struct PlanCost {
  double compute_s = 0;    // fwd + bwd
  double recompute_s = 0;  // checkpointing's extra forward
  double attention_s = 0;  // naive attention's score-matrix traffic
  double compression_s = 0;
  double comm_s = 0;       // ZeRO collectives
  double offload_s = 0;    // PCIe/NVMe traffic + CPU optimizer
  double optimizer_s = 0;  // device optimizer step
  double overhead_s = 0;   // per micro-batch
  double total_s = 0;
  // total / the modeled step time of the setup as configured (PlanResult::baseline): 1.00 is
  // "as fast as what you have", 0.5 "twice as fast".
  double relative = 0;
  // total / (plain bf16 full training compute time of the same tokens): the ideal's multiple.
  double relative_to_ideal = 0;
};

struct Plan {
  RunConfig config;  // ready to run / export
  MemoryEstimate estimate;
  PlanCost cost;
  std::string plan_class;  // "full" | "adapters" | "full+offload" | "adapters+offload"
  // What a user chooses between: "full", "full + ZeRO", "full + offload", "LoRA", "QLoRA",
  // "LoRA + offload", "QLoRA + offload" (ZeRO without offload only counts on several ranks).
  std::string kind;
  int compromises = 0;  // numerical compromises (fp16, pure_bf16, fp8, int8 activations, NF4)
  std::vector<std::string> techniques;  // human labels, e.g. "bf16", "ZeRO-2", "flash"
  std::string summary;
  std::vector<std::string> limitations;  // why the engine cannot run it (PlanRequest)
};

struct PlanResult {
  std::vector<Plan> plans;  // fitting plans, best first
  int64_t evaluated = 0;    // configurations estimated
  std::string message;      // why nothing fits, when plans is empty
  // The setup as configured (base, with the request's ranks and batch): the basis of
  // PlanCost::relative, whether or not it fits.
  PlanCost baseline;
  std::string baseline_summary;
  int64_t not_runnable = 0;  // fitting plans left out by runnable_only
  int64_t fitting = 0;       // combinations that fit (runnable or not), of which plans are the best
};

PlanResult planTraining(const PlanRequest& request);
nlohmann::json toJson(const Plan& plan);
nlohmann::json toJson(const PlanResult& result);
std::string formatPlans(const PlanResult& result);

}  // namespace ts::core
