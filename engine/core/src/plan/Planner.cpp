#include "trainscope/core/plan/Planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <tuple>

namespace ts::core {
namespace {

struct Combo {
  std::string precision;
  std::string checkpointing;
  std::string compression;
  std::string attention;
  int zero = 0;
  std::string offloadOpt = "none";
  std::string offloadParams = "none";
  int stateBits = 32;
  int adapters = 0;  // 0 none, 1 LoRA, 2 LoRA + NF4 base
};

int compromisesOf(const Combo& c) {
  int n = 0;
  if (c.precision == "fp16" || c.precision == "fp8") n += 1;
  if (c.precision == "pure_bf16") n += 2;
  if (c.compression != "none") n += 1;
  if (c.adapters == 2) n += 1;
  return n;
}

int classOf(const Combo& c) {
  const bool offload = c.offloadOpt != "none" || c.offloadParams != "none";
  return (offload ? 2 : 0) + (c.adapters > 0 ? 1 : 0);
}

// The combination a config already uses (the setup as configured).
Combo comboOf(const RunConfig& c) {
  Combo k{c.precision.policy,        c.memory.checkpointing, c.memory.activation_compression,
          c.attention.impl,          c.parallel.zero_stage,  c.parallel.offload_optimizer,
          c.parallel.offload_params, c.optimizer.state_bits, 0};
  if (c.finetune.lora.r > 0) k.adapters = c.finetune.base_quant == "nf4" ? 2 : 1;
  return k;
}

const char* classNames[] = {"full", "adapters", "full+offload", "adapters+offload"};

std::string kindOf(const Combo& c) {
  std::string k = c.adapters == 2 ? "QLoRA" : c.adapters == 1 ? "LoRA" : "full";
  if (c.offloadOpt != "none" || c.offloadParams != "none")
    k += " + offload";
  else if (c.zero > 0)
    k += " + ZeRO";
  return k;
}

RunConfig applyCombo(const PlanRequest& req, const Combo& c, int micro, int accum) {
  RunConfig cfg = req.base;
  cfg.precision.policy = c.precision;
  cfg.memory.checkpointing = c.checkpointing;
  cfg.memory.checkpoint_every = 0;
  cfg.memory.activation_compression = c.compression;
  cfg.attention.impl = c.attention;
  cfg.parallel.ranks = req.ranks;
  cfg.parallel.zero_stage = c.zero;
  cfg.parallel.offload_optimizer = c.offloadOpt;
  cfg.parallel.offload_params = c.offloadParams;
  cfg.optimizer.state_bits = c.stateBits;
  cfg.train.micro_batch = micro;
  cfg.train.grad_accum = accum;
  if (c.adapters > 0) {
    cfg.finetune.lora.r = req.lora_rank;
    cfg.finetune.lora.targets = req.lora_targets;
  } else {
    cfg.finetune.lora.r = 0;
  }
  cfg.finetune.base_quant = c.adapters == 2 ? "nf4" : "none";
  return cfg;
}

PlanCost costOf(const PlanRequest& req, const Combo& c, const RunConfig& cfg,
                const MemoryEstimate& e, double idealS) {
  const HardwareModel& hw = req.hardware;
  const int ranks = std::max(1, req.ranks);
  PlanCost k;
  double flops = hw.device_flops;
  if (c.precision == "fp32") flops /= 2;  // TF32-class throughput
  if (c.precision == "fp8") flops *= 2;
  if (c.adapters == 2) flops /= 1.15;  // NF4 dequantization before every GEMM
  const double perRank = 1.0 / ranks;
  k.compute_s = (e.flops_per_step - e.recompute_flops) * perRank / flops;
  k.recompute_s = e.recompute_flops * perRank / flops;
  const double act = c.precision == "fp32" ? 4.0 : 2.0;
  const double accum = cfg.train.grad_accum;
  const double B = cfg.train.micro_batch, T = cfg.model.seq_len;
  const double heads = cfg.model.heads, layers = cfg.model.layers;
  if (c.attention == "naive") {
    // Scores and probabilities written and read in forward and backward.
    k.attention_s = 4 * B * heads * T * T * act * layers * accum / hw.device_bandwidth;
  }
  if (c.compression != "none") {
    const double saved = static_cast<double>(
        e.report.ranks[0].at(MemoryTier::Device, MemoryCategory::Activations).peak);
    k.compression_s = 3 * saved * accum / hw.device_bandwidth;
  }
  k.comm_s = e.comm_bytes_per_step / (ranks > 8 ? hw.network_bandwidth : hw.link_bandwidth);
  if (c.offloadOpt != "none" || c.offloadParams != "none") {
    const bool nvme = c.offloadOpt == "nvme" || c.offloadParams == "nvme";
    k.offload_s = e.offload_bytes_per_step / (nvme ? hw.nvme_bandwidth : hw.pcie_bandwidth);
    if (c.offloadOpt != "none") {
      const double shard = static_cast<double>(e.params.trainable) / (c.zero >= 1 ? ranks : 1);
      k.offload_s += shard / hw.cpu_optimizer_params_per_s;
      if (c.offloadOpt == "nvme") {
        const double opt = static_cast<double>(
            e.report.ranks[0].at(MemoryTier::Nvme, MemoryCategory::OptimizerState).peak);
        k.offload_s += 2 * opt / hw.nvme_bandwidth;  // read and write back every step
      }
    }
  }
  const auto& r0 = e.report.ranks[0];
  k.optimizer_s =
      2.0 *
      static_cast<double>(r0.at(MemoryTier::Device, MemoryCategory::OptimizerState).peak +
                          r0.at(MemoryTier::Device, MemoryCategory::Parameters).peak) /
      hw.device_bandwidth;
  k.overhead_s = accum * hw.micro_step_overhead_s;
  k.total_s = k.compute_s + k.recompute_s + k.attention_s + k.compression_s + k.comm_s +
              k.offload_s + k.optimizer_s + k.overhead_s;
  k.relative_to_ideal = idealS > 0 ? k.total_s / idealS : 0;
  return k;
}

std::vector<std::string> techniquesOf(const Combo& c, const RunConfig& cfg, int ranks) {
  std::vector<std::string> t = {c.precision};
  if (c.checkpointing == "all") t.push_back("checkpointing (every block)");
  if (c.checkpointing == "every_k") t.push_back("checkpointing (every sqrt(L) blocks)");
  if (c.compression != "none") t.push_back(c.compression + " activations");
  if (c.attention == "flash") t.push_back("flash attention");
  if (cfg.train.grad_accum > 1) {
    t.push_back("accumulation x" + std::to_string(cfg.train.grad_accum));
  }
  if (c.zero > 0) t.push_back("ZeRO-" + std::to_string(c.zero));
  if (c.offloadOpt != "none") t.push_back("optimizer offload (" + c.offloadOpt + ")");
  if (c.offloadParams != "none") t.push_back("parameter offload (" + c.offloadParams + ")");
  if (c.stateBits == 8) t.push_back("8-bit optimizer");
  if (c.adapters >= 1) t.push_back("LoRA r=" + std::to_string(cfg.finetune.lora.r));
  if (c.adapters == 2) t.push_back("NF4 base");
  (void)ranks;
  return t;
}

struct Candidate {
  Plan plan;
  int cls = 0;
  long bucket = 0;
};

long bucketOf(double s) {
  return s > 0 ? std::lround(std::log(s) / std::log(1.05)) : 0;
}

std::string joinTechniques(const std::vector<std::string>& t) {
  std::ostringstream s;
  for (size_t i = 0; i < t.size(); ++i) s << (i ? " + " : "") << t[i];
  return s.str();
}

// The batch every plan trains: the global batch split over the ranks, and the micro-batch
// sizes to try (those that divide a rank's share; accumulation makes up the rest).
struct BatchShape {
  int ranks = 1;
  int64_t baseMicro = 1;
  int64_t perRank = 1;
  std::vector<int> micros;
};

BatchShape batchShapeOf(const PlanRequest& req) {
  BatchShape b;
  b.ranks = std::max(1, req.ranks);
  b.baseMicro = std::max(1, req.base.train.micro_batch);
  int64_t global = req.global_batch > 0
                       ? req.global_batch
                       : b.baseMicro * std::max(1, req.base.train.grad_accum) * b.ranks;
  b.perRank = std::max<int64_t>(1, global / b.ranks);
  if (req.goal == PlanGoal::Fit) {
    b.micros.push_back(static_cast<int>(std::min(b.baseMicro, b.perRank)));
  } else {
    for (int64_t m = 1; m <= b.perRank && m <= 4096; ++m) {
      if (b.perRank % m == 0) b.micros.push_back(static_cast<int>(m));
    }
  }
  return b;
}

// Ideal: plain bf16 full training of the same tokens, compute only.
double idealSeconds(const PlanRequest& req, const BatchShape& b, const EstimateOptions& fast) {
  RunConfig plain = req.base;
  plain.finetune = {};
  plain.train.micro_batch = 1;
  plain.train.grad_accum = static_cast<int>(b.perRank);
  plain.parallel.ranks = b.ranks;
  plain.memory.checkpointing = "none";
  return estimateMemory(plain, fast).flops_per_step / b.ranks / req.hardware.device_flops;
}

// The basis of every relative step time: the setup as configured, at the request's ranks and
// batch (a tiny model's step is all overhead, so "relative to the ideal" reads 2000x).
void setBaseline(const PlanRequest& req, const BatchShape& b, const EstimateOptions& fast,
                 double idealS, PlanResult& result) {
  const Combo asIs = comboOf(req.base);
  const int micro = static_cast<int>(std::min(b.baseMicro, b.perRank));
  RunConfig cfg = req.base;
  cfg.parallel.ranks = b.ranks;
  cfg.train.micro_batch = micro;
  cfg.train.grad_accum = static_cast<int>(std::max<int64_t>(1, b.perRank / micro));
  result.baseline = costOf(req, asIs, cfg, estimateMemory(cfg, fast), idealS);
  std::ostringstream s;
  s << joinTechniques(techniquesOf(asIs, cfg, b.ranks)) << " | micro-batch "
    << cfg.train.micro_batch << " x " << cfg.train.grad_accum;
  result.baseline_summary = s.str();
  result.baseline.relative = 1.0;
}

// Every combination the request allows, in the order they are tried (precision outermost, the
// adapters innermost; the order decides among equal plans).
std::vector<Combo> combinationsOf(const PlanRequest& req, int ranks) {
  std::vector<std::string> precisions = {"bf16", "fp16", "pure_bf16", "fp32"};
  if (req.allow_fp8) precisions.push_back("fp8");
  std::vector<std::pair<std::string, std::string>> offloads = {{"none", "none"}};
  if (req.allow_offload) {
    offloads.push_back({"cpu", "none"});
    offloads.push_back({"cpu", "cpu"});
    if (req.allow_nvme) {
      offloads.push_back({"nvme", "none"});
      offloads.push_back({"nvme", "nvme"});
    }
  }
  std::vector<int> stages = {0};
  if (ranks > 1)
    stages = {0, 1, 2, 3};
  else if (req.allow_offload)
    stages = {0, 3};  // stage 3 on one rank: parameter offload
  const int maxAdapters = req.allow_adapters ? 2 : 0;

  std::vector<Combo> combos;
  for (const auto& prec : precisions)
    for (const std::string ck : {"none", "every_k", "all"})
      for (const std::string comp : {"none", "int8"})
        for (const std::string att : {"flash", "naive"})
          for (int zero : stages)
            for (const auto& [oo, op] : offloads) {
              if (op != "none" && zero != 3) continue;
              if (zero == 3 && ranks == 1 && op == "none") continue;
              for (int bits : {32, 8})
                for (int ad = 0; ad <= maxAdapters; ++ad)
                  combos.push_back(Combo{prec, ck, comp, att, zero, oo, op, bits, ad});
            }
  return combos;
}

// A combination at its largest fitting micro-batch (memory grows with it: binary search), or
// nothing when even the smallest does not fit.
std::optional<Candidate> bestFit(const PlanRequest& req, const Combo& c, const BatchShape& b,
                                 const EstimateOptions& fast, double idealS, int64_t& evaluated) {
  const double budget = static_cast<double>(req.device_memory) * req.usable_fraction;
  const auto& micros = b.micros;
  int lo = 0, hi = static_cast<int>(micros.size()) - 1, best = -1;
  MemoryEstimate bestEst;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    RunConfig cfg = applyCombo(req, c, micros[mid], static_cast<int>(b.perRank / micros[mid]));
    MemoryEstimate e = estimateMemory(cfg, fast);
    ++evaluated;
    const bool hostOk = req.host_memory <= 0 || e.peak_host <= req.host_memory;
    if (static_cast<double>(e.peak_device) <= budget && hostOk) {
      best = mid;
      bestEst = std::move(e);
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (best < 0) return std::nullopt;
  Candidate cand;
  Plan& p = cand.plan;
  p.config = applyCombo(req, c, micros[best], static_cast<int>(b.perRank / micros[best]));
  p.estimate = std::move(bestEst);
  p.cost = costOf(req, c, p.config, p.estimate, idealS);
  cand.cls = classOf(c);
  cand.bucket = bucketOf(p.cost.total_s);
  p.plan_class = classNames[cand.cls];
  p.kind = kindOf(c);
  p.compromises = compromisesOf(c);
  p.techniques = techniquesOf(c, p.config, b.ranks);
  return cand;
}

// Best first for the goal: the class (no adapters, no offload first), then the goal's order.
void sortForGoal(std::vector<Candidate>& fits, PlanGoal goal) {
  auto key = [&](const Candidate& c) {
    const auto& p = c.plan;
    const double peak = static_cast<double>(p.estimate.peak_device);
    switch (goal) {
      case PlanGoal::Fastest:
        return std::make_tuple(c.cls, c.bucket, static_cast<long>(p.compromises), 0L, peak);
      case PlanGoal::LargestBatch:
        return std::make_tuple(c.cls, -static_cast<long>(p.config.train.micro_batch), c.bucket,
                               static_cast<long>(p.compromises), peak);
      default:
        return std::make_tuple(c.cls, static_cast<long>(p.compromises), c.bucket, 0L, peak);
    }
  };
  std::stable_sort(fits.begin(), fits.end(),
                   [&](const Candidate& a, const Candidate& b) { return key(a) < key(b); });
}

// The order plans are listed in: the goal's, or the best of each kind first and then the rest
// in the goal's order.
std::vector<Candidate*> listingOrder(const PlanRequest& req, std::vector<Candidate*> order) {
  if (!req.best_of_each_kind_first) return order;
  std::vector<Candidate*> firsts, rest;
  std::vector<std::string> seen;
  for (Candidate* c : order) {
    const bool first = std::find(seen.begin(), seen.end(), c->plan.kind) == seen.end();
    if (first) seen.push_back(c->plan.kind);
    (first ? firsts : rest).push_back(c);
  }
  firsts.insert(firsts.end(), rest.begin(), rest.end());
  return firsts;
}

// The first max_plans (runnable ones, when asked) with their summary and full per-rank report.
// Every fit's limitations are looked up (cheap next to the estimates), so not_runnable counts
// them all and a kind's representative is its best runnable plan.
void takePlans(const PlanRequest& req, std::vector<Candidate>& fits, PlanResult& result) {
  const double basisS = result.baseline.total_s;
  result.fitting = static_cast<int64_t>(fits.size());
  std::vector<Candidate*> order;
  for (auto& c : fits) {
    if (req.limitations) c.plan.limitations = req.limitations(c.plan.config);
    if (req.runnable_only && !c.plan.limitations.empty()) {
      ++result.not_runnable;
      continue;
    }
    order.push_back(&c);
  }
  for (Candidate* c : listingOrder(req, std::move(order))) {
    if (result.plans.size() >= req.max_plans) break;
    Plan& p = c->plan;
    p.cost.relative = basisS > 0 ? p.cost.total_s / basisS : 0;
    p.summary = joinTechniques(p.techniques) + " | micro-batch " +
                std::to_string(p.config.train.micro_batch);
    EstimateOptions full;
    full.activation_model = req.activation_model;
    full.device_memory = req.device_memory;
    p.estimate = estimateMemory(p.config, full);
    result.plans.push_back(std::move(p));
  }
}

// Why no plan came back: none fit, or none this engine can run.
std::string noPlanMessage(const PlanRequest& req, const std::vector<Candidate>& fits,
                          const PlanResult& result) {
  if (result.not_runnable > 0) {
    std::string why;
    for (const auto& c : fits)
      if (!c.plan.limitations.empty()) {
        why = c.plan.limitations.front();
        break;
      }
    return std::to_string(result.not_runnable) + " setup(s) fit, but this engine cannot run them" +
           (why.empty() ? std::string() : " (" + why + ")") + "; show all that fit to see them";
  }
  const double budget = static_cast<double>(req.device_memory) * req.usable_fraction;
  return "no combination fits in " + formatBytes(budget) + " per device" +
         (req.host_memory > 0
              ? " and " + formatBytes(static_cast<double>(req.host_memory)) + " host"
              : std::string()) +
         "; add ranks, allow offload/adapters, or shorten the sequence";
}

}  // namespace

std::string_view toString(PlanGoal g) {
  switch (g) {
    case PlanGoal::Fastest:
      return "fastest";
    case PlanGoal::LargestBatch:
      return "largest_batch";
    default:
      return "fit";
  }
}

std::optional<PlanGoal> planGoalFromString(std::string_view s) {
  if (s == "fit") return PlanGoal::Fit;
  if (s == "fastest") return PlanGoal::Fastest;
  if (s == "largest_batch" || s == "largest-batch") return PlanGoal::LargestBatch;
  return std::nullopt;
}

PlanResult planTraining(const PlanRequest& req) {
  PlanResult result;
  if (req.device_memory <= 0) {
    result.message = "device memory must be given (> 0 bytes)";
    return result;
  }
  const BatchShape batch = batchShapeOf(req);
  EstimateOptions fast;
  fast.activation_model = req.activation_model;
  fast.rank0_only = true;
  const double idealS = idealSeconds(req, batch, fast);
  setBaseline(req, batch, fast, idealS, result);

  std::vector<Candidate> fits;
  for (const Combo& c : combinationsOf(req, batch.ranks))
    if (auto cand = bestFit(req, c, batch, fast, idealS, result.evaluated))
      fits.push_back(std::move(*cand));
  sortForGoal(fits, req.goal);
  takePlans(req, fits, result);
  if (result.plans.empty()) result.message = noPlanMessage(req, fits, result);
  return result;
}

nlohmann::json toJson(const Plan& p) {
  return {{"summary", p.summary},
          {"class", p.plan_class},
          {"kind", p.kind},
          {"techniques", p.techniques},
          {"compromises", p.compromises},
          {"micro_batch", p.config.train.micro_batch},
          {"grad_accum", p.config.train.grad_accum},
          {"config", toJson(p.config)},
          {"memory", toJson(p.estimate)},
          {"limitations", p.limitations},
          {"cost",
           {{"relative", p.cost.relative},
            {"relative_to_ideal", p.cost.relative_to_ideal},
            {"total_s", p.cost.total_s},
            {"compute_s", p.cost.compute_s},
            {"recompute_s", p.cost.recompute_s},
            {"attention_s", p.cost.attention_s},
            {"compression_s", p.cost.compression_s},
            {"comm_s", p.cost.comm_s},
            {"offload_s", p.cost.offload_s},
            {"optimizer_s", p.cost.optimizer_s},
            {"overhead_s", p.cost.overhead_s}}}};
}

nlohmann::json toJson(const PlanResult& r) {
  nlohmann::json plans = nlohmann::json::array();
  for (const auto& p : r.plans) plans.push_back(toJson(p));
  return {{"plans", plans},
          {"evaluated", r.evaluated},
          {"message", r.message},
          {"not_runnable", r.not_runnable},
          {"fitting", r.fitting},
          {"baseline", {{"summary", r.baseline_summary}, {"total_s", r.baseline.total_s}}}};
}

std::string formatPlans(const PlanResult& r) {
  std::ostringstream out;
  if (r.plans.empty()) {
    out << r.message << "\n";
    return out.str();
  }
  int i = 1;
  for (const auto& p : r.plans) {
    char line[160];
    std::snprintf(line, sizeof line, "%2d. [%s] step time %.2fx, device peak %s", i++,
                  p.plan_class.c_str(), p.cost.relative,
                  formatBytes(static_cast<double>(p.estimate.peak_device)).c_str());
    out << line;
    if (p.estimate.peak_host > 0) {
      out << ", host " << formatBytes(static_cast<double>(p.estimate.peak_host));
    }
    if (p.estimate.peak_nvme > 0) {
      out << ", nvme " << formatBytes(static_cast<double>(p.estimate.peak_nvme));
    }
    out << "\n    " << p.summary << "\n";
  }
  out << "(" << r.evaluated << " configurations estimated; step time relative to the setup as "
      << "configured: " << r.baseline_summary << ")\n";
  return out.str();
}

}  // namespace ts::core
