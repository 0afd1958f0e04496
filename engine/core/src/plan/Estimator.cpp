#include "trainscope/core/plan/Estimator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "EstimatorInternal.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"

namespace ts::core {
namespace {

using estimator::Cat;
using estimator::ceilDiv;
using estimator::lower;
using estimator::Tier;

bool isLora(const TensorSpec& t) {
  return t.role == TensorRole::LoraA || t.role == TensorRole::LoraB;
}

// Every family's named shapes, in registry order.
const std::vector<std::pair<std::string, ModelConfig>>& presets() {
  static const std::vector<std::pair<std::string, ModelConfig>> p = [] {
    std::vector<std::pair<std::string, ModelConfig>> all;
    for (const auto* f : modelFamilies())
      for (auto& named : f->presets()) all.push_back(std::move(named));
    return all;
  }();
  return p;
}

}  // namespace

std::string_view toString(ActivationModel m) {
  return m == ActivationModel::PyTorch ? "pytorch" : "engine";
}

std::optional<ActivationModel> activationModelFromString(std::string_view s) {
  auto l = lower(s);
  if (l == "engine") return ActivationModel::Engine;
  if (l == "pytorch") return ActivationModel::PyTorch;
  return std::nullopt;
}

std::optional<ModelConfig> modelPreset(std::string_view name) {
  std::string n = lower(name);
  static const std::map<std::string, std::string> aliases = [] {
    std::map<std::string, std::string> all;
    for (const auto* f : modelFamilies())
      for (auto& [alias, name] : f->presetAliases()) all.emplace(alias, name);
    return all;
  }();
  if (auto it = aliases.find(n); it != aliases.end()) n = it->second;
  for (const auto& [k, m] : presets()) {
    if (k == n) return m;
  }
  return std::nullopt;
}

std::vector<std::string> modelPresetNames() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.push_back(p.first);
  return names;
}

ParameterCounts countParameters(const ModelConfig& model, int64_t vocab,
                                const FinetuneConfig& finetune) {
  ParameterCounts c;
  for (const auto& t : modelTensors(archSpecOf(model, vocab), finetune)) {
    const int64_t n = t.numel();
    c.total += n;
    if (t.trainable)
      c.trainable += n;
    else
      c.frozen += n;
    if (isLora(t)) c.lora += n;
    if (t.role == TensorRole::TokenEmbedding || t.role == TensorRole::PositionEmbedding)
      c.embedding += n;
    if (t.block == 0 && !isLora(t)) c.per_layer += n;
    c.largest_layer = std::max(c.largest_layer, n);
  }
  return c;
}

int64_t loraParameters(const ModelConfig& model, const LoraConfig& lora) {
  if (lora.r <= 0) return 0;
  FinetuneConfig ft;
  ft.lora = lora;
  int64_t n = 0;
  for (const auto& t : modelTensors(archSpecOf(model, 0), ft))
    if (isLora(t)) n += t.numel();
  return n;
}

double zeroModelStateBytes(double psi, int ranks, int stage, double k) {
  const double nd = std::max(1, ranks);
  switch (stage) {
    case 0:
      return (2 + 2 + k) * psi;
    case 1:
      return 4 * psi + k * psi / nd;
    case 2:
      return 2 * psi + (2 + k) * psi / nd;
    default:
      return (2 + 2 + k) * psi / nd;
  }
}

DeepSpeedEstimate deepspeedZero2Estimate(double totalParams, int gpusPerNode, int nodes,
                                         bool cpuOffload, double bufferFactor) {
  const double totalGpus = static_cast<double>(std::max(1, nodes)) * std::max(1, gpusPerNode);
  DeepSpeedEstimate e;
  if (cpuOffload) {
    e.gpu_bytes = 2 * totalParams;
    e.cpu_bytes = totalParams * std::max(4 * totalGpus, 16.0) * bufferFactor;
  } else {
    // Current DeepSpeed: 2 = 16-bit params; 18 = 16-bit + fp32 grads, fp32 params, Adam m, v.
    // (Releases before 0.9 used 4Ψ + 16Ψ/total_gpus here.)
    e.gpu_bytes = 2 * totalParams + std::floor(18 * totalParams / totalGpus);
    e.cpu_bytes = totalParams * 4 * std::max(1, gpusPerNode) * bufferFactor;
  }
  e.cpu_bytes = std::floor(e.cpu_bytes);
  return e;
}

DeepSpeedEstimate deepspeedZero3Estimate(double totalParams, double largestLayerParams,
                                         int gpusPerNode, int nodes, bool cpuOffload,
                                         bool cpuOffloadParams, bool zeroInit,
                                         double bufferFactor) {
  const double n = std::max(1, nodes), g = std::max(1, gpusPerNode);
  const double totalGpus = n * g, gpusFactor = 1.0 / n;
  const double largest = 4 * largestLayerParams;
  DeepSpeedEstimate e;
  if (cpuOffload) {
    if (cpuOffloadParams) {
      e.gpu_bytes = largest;
      e.cpu_bytes = totalParams * (zeroInit ? 18 * gpusFactor : std::max(4 * g, 18 * gpusFactor)) *
                    bufferFactor;
    } else {
      e.gpu_bytes = largest + std::floor(2 * totalParams / totalGpus);
      e.cpu_bytes = totalParams * (zeroInit ? 16 * gpusFactor : std::max(4 * g, 16 * gpusFactor)) *
                    bufferFactor;
    }
  } else {
    e.gpu_bytes = largest + std::floor(18 * totalParams / totalGpus);
    e.cpu_bytes = (zeroInit ? largestLayerParams : totalParams) * 4 * g * bufferFactor;
  }
  e.cpu_bytes = std::floor(e.cpu_bytes);
  return e;
}

double korthikantiLayerBytes(double s, double b, double h, double a, bool fullRecompute,
                             bool flash) {
  if (fullRecompute) return 2 * s * b * h;
  double bytes = s * b * h * 34;
  bytes += flash ? 4 * a * s * b : 5 * a * s * s * b;
  return bytes;
}

double trainingFlopsPerToken(double psi, int layers, int hidden, int seq, bool fullRecompute) {
  const double attn = static_cast<double>(layers) * hidden * seq;
  double f = 6 * psi + 12 * attn;
  if (fullRecompute) f += 2 * psi + 4 * attn;
  return f;
}

double blockwiseQuantBytes(double n, int bits, int block, bool doubleQuant) {
  const double blocks = std::ceil(n / std::max(1, block));
  double bytes = std::ceil(n * bits / 8.0);  // an odd count pads its last byte
  if (doubleQuant) {
    // 8-bit absmax per block, fp32 per 256 of them, and the fp32 offset (their mean).
    bytes += blocks * 1.0 + std::ceil(blocks / 256.0) * 4.0 + 4.0;
  } else {
    bytes += blocks * 4.0;
  }
  return bytes;
}

int64_t adam8bitStateBytes(int64_t n) {
  if (n < 4096) return 8 * n;
  return 2 * n + 2 * 4 * ceilDiv(n, 256);
}

namespace estimator {
namespace {

// One rank's table: its model state (under the engine's ZeRO layout, or replicated / in
// textbook shards), the teacher, the activations and the workspace.
RankMemory rankMemory(const RankInputs& ri, int r) {
  RankMemory rm;
  rm.rank = r;
  WorkspaceBytes ws;
  if (ri.pl.zeroEngine) {
    ws = zeroRankMemory(ri, r, rm);
  } else {
    replicatedParameters(ri, r, rm);
    replicatedGradients(ri, r, rm);
    replicatedOptimizerState(ri, r, rm);
    ws = replicatedWorkspace(ri);
    hostStaging(ri, rm);
  }
  if (ri.teacher.params > 0) setEntry(rm, Tier::Device, Cat::Parameters, ri.teacher.params, 0);
  // Per micro-batch; accumulation adds nothing.
  setEntry(rm, Tier::Device, Cat::Activations, ri.act.steady + ri.teacher.actSteady,
           ri.act.peak + ri.teacher.actPeak);
  setEntry(rm, Tier::Device, Cat::Workspace, ws.steady, ws.peak);
  return rm;
}

// FLOPs: matrices only (embedding lookups are free; a tied head counts once). Frozen weights
// skip their weight gradient: 4 instead of 6 FLOPs per weight per token.
void setFlops(const EstimateInputs& in, MemoryEstimate& est) {
  const Shape& s = in.s;
  double trainM = 0, frozenM = 0;
  for (const auto& t : in.tensors) {
    if (t.role == TensorRole::PositionEmbedding ||
        (t.role == TensorRole::TokenEmbedding && !s.tied))
      continue;
    (t.trainable ? trainM : frozenM) += static_cast<double>(t.numel());
  }
  const double attn = static_cast<double>(s.L) * s.C * s.T;
  const double perToken = 6 * trainM + 4 * frozenM + 12 * attn;
  const std::string ck = lower(in.cfg.memory.checkpointing);
  const double recomputePerToken = ck == "none" ? 0.0 : 2 * (trainM + frozenM) + 4 * attn;
  double teacherPerToken = 0;
  if (est.params.teacher > 0) {
    const Shape ts =
        shapeOf(in.opt.teacher_model ? *in.opt.teacher_model : in.cfg.model, est.vocab);
    teacherPerToken =
        2 * static_cast<double>(est.params.teacher - (ts.learnedPos ? ts.T * ts.C : 0) -
                                (ts.tied ? 0 : ts.V * ts.C)) +
        4.0 * ts.L * ts.C * ts.T;
  }
  const double tokens = static_cast<double>(est.tokens_per_step);
  est.recompute_flops = recomputePerToken * tokens;
  est.flops_per_step = (perToken + recomputePerToken + teacherPerToken) * tokens;
}

// Communication per rank per step (textbook ZeRO volumes: 2Ψ for stages 0-2, 3Ψ for 3), and
// the host/NVMe traffic offloading adds.
void setTraffic(const EstimateInputs& in, const ModelStateBytes& ms, const Placement& pl,
                int64_t accum, MemoryEstimate& est) {
  const PrecisionBytes& pb = in.pb;
  const double trainable = static_cast<double>(est.params.trainable);
  if (in.ranks > 1) {
    if (in.stage < 3) {
      est.comm_bytes_per_step = 2 * trainable * pb.grad;
    } else {
      est.comm_bytes_per_step =
          static_cast<double>(accum) * (trainable * (2 * pb.param + pb.grad) + 2 * ms.frozen);
    }
  }
  if (pl.optTier != Tier::Device) {
    const double shard = in.stage >= 1 ? trainable / in.ranks : trainable;
    est.offload_bytes_per_step += shard * (pb.grad + pb.param);  // grads out, weights back
  }
  if (pl.paramTier != Tier::Device) {
    est.offload_bytes_per_step +=
        2.0 * accum * (ms.trainParam + ms.frozen) / in.ranks;  // fetched for fwd and bwd
  }
}

// Model states (params + grads + optimizer) per trainable parameter, on rank 0.
double bytesPerParam(const Placement& pl, const RankMemory& r0, double trainable) {
  const Tier paramTier = pl.paramTier, optTier = pl.optTier;
  const double states = static_cast<double>(r0.at(Tier::Device, Cat::Parameters).peak +
                                            r0.at(Tier::Host, Cat::Parameters).peak +
                                            r0.at(Tier::Nvme, Cat::Parameters).peak) +
                        static_cast<double>(r0.at(paramTier, Cat::Gradients).peak +
                                            r0.at(optTier, Cat::Gradients).peak) *
                            (paramTier == optTier ? 0.5 : 1.0) +
                        static_cast<double>(r0.at(optTier, Cat::OptimizerState).peak);
  return pl.trainable > 0 ? states / trainable : 0;
}

}  // namespace
}  // namespace estimator

MemoryEstimate estimateMemory(const RunConfig& cfg, const EstimateOptions& opt) {
  using namespace estimator;
  MemoryEstimate est;
  est.activation_model = opt.activation_model;
  est.device_memory = opt.device_memory;
  const EstimateInputs in = estimateInputsOf(cfg, opt, est);
  const ModelStateBytes ms = modelStateBytes(in);
  const ActBytes act = studentActivations(in);
  const TeacherBytes teacher = teacherBytes(in, est);
  const Placement pl = placementOf(in, ms, est);
  // The engine's ZeRO layout counts its own compute copies.
  const WorkspaceBytes copies =
      in.engine16 && !pl.zeroEngine ? computeCopyWorkspace(in, ms, est.params) : WorkspaceBytes{};
  const RankInputs ri{in, ms, act, teacher, pl, est.params, copies};
  const int reported = opt.rank0_only ? 1 : in.ranks;
  for (int r = 0; r < reported; ++r) est.report.ranks.push_back(rankMemory(ri, r));

  const RankMemory& r0 = est.report.ranks.front();
  est.peak_device = r0.totalPeak(Tier::Device);
  est.peak_host = r0.totalPeak(Tier::Host);
  est.peak_nvme = r0.totalPeak(Tier::Nvme);
  est.fits = opt.device_memory <= 0 || est.peak_device <= opt.device_memory;

  const int64_t accum = std::max(1, cfg.train.grad_accum);
  est.effective_batch = in.batch * accum * in.ranks;
  est.tokens_per_step = est.effective_batch * in.s.T;
  setFlops(in, est);
  setTraffic(in, ms, pl, accum, est);
  est.bytes_per_param = bytesPerParam(pl, r0, static_cast<double>(est.params.trainable));
  return est;
}

MemoryReport predictMemoryReport(const RunConfig& config) {
  return estimateMemory(config).report;
}

nlohmann::json toJson(const MemoryEstimate& e) {
  nlohmann::json j = toJson(e.report);
  j["activation_model"] = std::string(toString(e.activation_model));
  j["parameters"] = {{"total", e.params.total},
                     {"trainable", e.params.trainable},
                     {"frozen", e.params.frozen},
                     {"lora", e.params.lora},
                     {"embedding", e.params.embedding},
                     {"per_layer", e.params.per_layer},
                     {"largest_layer", e.params.largest_layer},
                     {"teacher", e.params.teacher}};
  j["vocab"] = e.vocab;
  j["device_memory"] = e.device_memory;
  j["fits"] = e.fits;
  j["peak"] = {{"device", e.peak_device}, {"host", e.peak_host}, {"nvme", e.peak_nvme}};
  j["effective_batch"] = e.effective_batch;
  j["tokens_per_step"] = e.tokens_per_step;
  j["flops_per_step"] = e.flops_per_step;
  j["recompute_flops"] = e.recompute_flops;
  j["comm_bytes_per_step"] = e.comm_bytes_per_step;
  j["offload_bytes_per_step"] = e.offload_bytes_per_step;
  j["bytes_per_param"] = e.bytes_per_param;
  j["notes"] = e.notes;
  return j;
}

nlohmann::json memoryPlanJson(const RunConfig& config) {
  return toJson(estimateMemory(config));
}
nlohmann::json memoryPlanJson(const RunConfig& config, const EstimateOptions& options) {
  return toJson(estimateMemory(config, options));
}

std::string formatBytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  while (std::abs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

std::optional<int64_t> parseByteSize(std::string_view text) {
  std::string t;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) t.push_back(c);
  }
  if (t.empty()) return std::nullopt;
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(t, &pos);
  } catch (...) {
    return std::nullopt;
  }
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  const std::string unit = lower(t.substr(pos));
  static const std::map<std::string, double> units = {{"", 1},
                                                      {"b", 1},
                                                      {"k", 1e3},
                                                      {"kb", 1e3},
                                                      {"m", 1e6},
                                                      {"mb", 1e6},
                                                      {"g", 1e9},
                                                      {"gb", 1e9},
                                                      {"t", 1e12},
                                                      {"tb", 1e12},
                                                      {"kib", 1024.0},
                                                      {"mib", 1048576.0},
                                                      {"gib", 1073741824.0},
                                                      {"tib", 1099511627776.0}};
  auto it = units.find(unit);
  if (it == units.end()) return std::nullopt;
  const double bytes = value * it->second;
  if (bytes > 9.0e18) return std::nullopt;
  return static_cast<int64_t>(std::llround(bytes));
}

std::string formatMemoryTable(const MemoryEstimate& e) {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line,
                "parameters: %lld total, %lld trainable, %lld frozen (activation model: %s, "
                "vocab %lld)\n",
                static_cast<long long>(e.params.total), static_cast<long long>(e.params.trainable),
                static_cast<long long>(e.params.frozen),
                std::string(toString(e.activation_model)).c_str(), static_cast<long long>(e.vocab));
  out << line;
  // Ranks with identical tables are printed once.
  size_t i = 0;
  const auto& ranks = e.report.ranks;
  while (i < ranks.size()) {
    size_t j = i + 1;
    while (j < ranks.size()) {
      RankMemory a = ranks[i], b = ranks[j];
      a.rank = b.rank = 0;
      if (!(a == b)) break;
      ++j;
    }
    if (j - i == 1)
      out << "rank " << ranks[i].rank << "\n";
    else
      out << "ranks " << ranks[i].rank << "-" << ranks[j - 1].rank << "\n";
    std::snprintf(line, sizeof line, "  %-8s %-16s %14s %14s\n", "tier", "category", "steady",
                  "peak");
    out << line;
    for (int t = 0; t < kMemoryTierCount; ++t) {
      const auto tier = static_cast<Tier>(t);
      if (ranks[i].totalPeak(tier) == 0) continue;
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        const auto& en = ranks[i].at(tier, static_cast<Cat>(c));
        if (en.peak == 0 && en.current == 0) continue;
        std::snprintf(line, sizeof line, "  %-8s %-16s %14s %14s\n",
                      std::string(toString(tier)).c_str(),
                      std::string(toString(static_cast<Cat>(c))).c_str(),
                      formatBytes(static_cast<double>(en.current)).c_str(),
                      formatBytes(static_cast<double>(en.peak)).c_str());
        out << line;
      }
      std::snprintf(line, sizeof line, "  %-8s %-16s %14s %14s\n",
                    std::string(toString(tier)).c_str(), "total", "",
                    formatBytes(static_cast<double>(ranks[i].totalPeak(tier))).c_str());
      out << line;
    }
    i = j;
  }
  std::snprintf(line, sizeof line,
                "effective batch %lld sequences, %lld tokens/step, %.3g FLOPs/step "
                "(recompute %.3g)\n",
                static_cast<long long>(e.effective_batch),
                static_cast<long long>(e.tokens_per_step), e.flops_per_step, e.recompute_flops);
  out << line;
  if (e.device_memory > 0) {
    out << "device memory " << formatBytes(static_cast<double>(e.device_memory)) << ": "
        << (e.fits ? "fits" : "does NOT fit") << " (peak "
        << formatBytes(static_cast<double>(e.peak_device)) << ")\n";
  }
  for (const auto& n : e.notes) out << "note: " << n << "\n";
  return out.str();
}

}  // namespace ts::core
