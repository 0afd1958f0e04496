#include "trainscope/core/plan/Estimator.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/core/plan/ZeroLayout.h"

namespace ts::core {
namespace {

using Cat = MemoryCategory;
using Tier = MemoryTier;

int64_t ceilDiv(int64_t a, int64_t b) {
  return b <= 0 ? 0 : (a + b - 1) / b;
}
int64_t roundBytes(double b) {
  return b <= 0 ? 0 : static_cast<int64_t>(std::llround(b));
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// The dimensions the formulas below use, from the shared model description (ModelSpec.h).
struct Shape {
  int64_t L = 0, H = 0, KV = 0, C = 0, F = 0, T = 0, V = 0;
  bool bias = true, learnedPos = true, tied = true, swiglu = false, rms = false;
  int64_t headDim() const { return H > 0 ? C / H : C; }
  int64_t kvDim() const { return KV * headDim(); }
};

Shape shapeOf(const ArchSpec& a) {
  Shape s;
  s.L = a.layers;
  s.H = a.heads;
  s.KV = a.kvHeads;
  s.C = a.dModel;
  s.F = a.dFf;
  s.T = a.seqLen;
  s.V = a.vocab;
  s.bias = a.bias;
  s.learnedPos = a.learnedPos;
  s.tied = a.tiedHead;
  s.swiglu = a.swiglu;
  s.rms = a.rmsNorm;
  return s;
}
Shape shapeOf(const ModelConfig& m, int64_t vocab) {
  return shapeOf(archSpecOf(m, vocab));
}

bool isLora(const TensorSpec& t) {
  return t.role == TensorRole::LoraA || t.role == TensorRole::LoraB;
}

// Bytes per element of each model-state buffer for a precision policy.
struct PrecisionBytes {
  double param = 4;   // working weights (trainable)
  double frozen = 4;  // frozen base weights (not NF4)
  double grad = 4;
  double master = 0;   // fp32 master copy (optimizer_state)
  double state = 4;    // one optimizer state element (m, v or momentum) at 32-bit
  double act = 4;      // saved activations
  double fp8Copy = 0;  // fp8 weight copy kept next to the bf16 weights
};

PrecisionBytes precisionBytes(const std::string& policy) {
  PrecisionBytes p;
  if (policy == "bf16" || policy == "fp16") {
    p = {2, 2, 2, 4, 4, 2, 0};
  } else if (policy == "pure_bf16") {
    p = {2, 2, 2, 0, 2, 2, 0};
  } else if (policy == "fp8") {
    // Our choice (Transformer-Engine style): bf16 weights + an fp8 copy for the GEMMs, bf16
    // grads, fp32 master + Adam state, activations saved in bf16.
    p = {2, 2, 2, 4, 4, 2, 1};
  }
  return p;
}

// The engine allocates SGD's momentum buffer even at momentum 0 (docs/memory.md); PyTorch
// allocates none.
int optimizerStates(const OptimizerConfig& o, bool engine) {
  if (lower(o.type) == "sgd") return o.momentum != 0.0 || engine ? 1 : 0;
  return 2;
}

// Optimizer bytes for one trainable tensor (unsharded).
double optimizerTensorBytes(int64_t n, const OptimizerConfig& o, const PrecisionBytes& p,
                            bool engine) {
  const int states = optimizerStates(o, engine);
  double bytes = p.master * static_cast<double>(n);
  if (o.state_bits == 8 && n >= 4096) {
    bytes += states * (static_cast<double>(n) + 4.0 * static_cast<double>(ceilDiv(n, 256)));
  } else {
    // Small tensors keep 32-bit state under bitsandbytes; pure_bf16 keeps bf16 state.
    bytes += states * static_cast<double>(n) * (o.state_bits == 8 ? 4.0 : p.state);
  }
  return bytes;
}

// Elements of a flat buffer of n elements that rank r owns (first n % N ranks get one more).
int64_t shardOf(int64_t n, int ranks, int r) {
  if (ranks <= 1) return n;
  int64_t base = n / ranks, rem = n % ranks;
  return base + (r < rem ? 1 : 0);
}

Tier tierOf(const std::string& where) {
  if (where == "cpu") return Tier::Host;
  if (where == "nvme") return Tier::Nvme;
  return Tier::Device;
}

// ---- Activation models ----------------------------------------------------------------------
struct ActBytes {
  double steady = 0;  // allocated between steps
  double peak = 0;
  double wsSteady = 0;
  double wsPeak = 0;
};

// "engine": the buffers the engine allocates for B sequences (ModelSpec.h savedState), once,
// so steady state equals peak. Sparse compression's nonzeros are assumed 50% (the engine counts
// them per forward; the memory event reports the real number).
ActBytes engineActivations(const ArchSpec& arch, const SavedStateOptions& o) {
  ActBytes a;
  for (const auto& b : savedState(arch, o))
    (b.category == MemoryCategory::Workspace ? a.wsPeak : a.peak) += b.bytes();
  a.steady = a.peak;
  a.wsSteady = a.wsPeak;
  return a;
}

// "pytorch": Korthikanti et al. Table 2 generalised to GQA and SwiGLU; nothing persists between
// steps. Dropout masks only when dropout > 0.
ActBytes pytorchActivations(const Shape& s, int64_t B, const RunConfig& cfg, double ab) {
  const double sb = static_cast<double>(B * s.T), h = s.C, F = s.F, V = s.V;
  const double a = s.H, T = s.T;
  const double g = static_cast<double>(s.kvDim()) / std::max<double>(1, h);
  const bool drop = cfg.model.dropout > 0;
  const bool flash = lower(cfg.attention.impl) == "flash";
  const double u = ab / 2.0;  // Korthikanti counts 16-bit values; scale for fp32
  double attn = sb * h * (2 + 2 + 4 * g + 2) * u + (drop ? sb * h : 0);
  if (flash) {
    attn += a * sb * 4.0;  // logsumexp per row and head
  } else {
    attn += a * T * sb * (2 * u + (drop ? 1 + 2 * u : 0));
  }
  double mlp = s.swiglu ? (2 * sb * h + 6 * sb * F) * u : (2 * sb * h + 4 * sb * F) * u;
  if (drop) mlp += sb * h;
  const double norms = 4 * sb * h * u;
  double layer = attn + mlp + norms;
  const std::string comp = lower(cfg.memory.activation_compression);
  if (comp == "int8") layer = layer / (2 * u);  // one byte per saved value
  const double input = 2 * sb * h * u;
  const std::string ck = lower(cfg.memory.checkpointing);
  double blocks;
  if (ck == "all") {
    blocks = s.L * input + layer;
  } else if (ck == "every_k") {
    int64_t k = cfg.memory.checkpoint_every > 0
                    ? cfg.memory.checkpoint_every
                    : std::max<int64_t>(1, std::llround(std::sqrt(static_cast<double>(s.L))));
    k = std::min<int64_t>(k, std::max<int64_t>(1, s.L));
    blocks = ceilDiv(s.L, k) * input + k * layer;
  } else {
    blocks = s.L * layer;
  }
  ActBytes r;
  // Final norm input, 16-bit logits and the fp32 log-softmax cross-entropy keeps.
  r.peak = blocks + 2 * sb * h * u + sb * V * (2 * u + 4.0);
  r.wsPeak = sb * V * 4.0;  // dlogits
  return r;
}

void setEntry(RankMemory& rm, Tier t, Cat c, double steady, double peak) {
  auto& e = rm.at(t, c);
  e.current += roundBytes(steady);
  e.peak += roundBytes(std::max(steady, peak));
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

namespace {
// The cores this process may run on (OpenMP's omp_get_num_procs, which the CPU backend uses
// for device.threads 0, counts the same affinity mask).
int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}
}  // namespace

MemoryEstimate estimateMemory(const RunConfig& cfg, const EstimateOptions& opt) {
  MemoryEstimate est;
  est.activation_model = opt.activation_model;
  est.device_memory = opt.device_memory;
  // model.vocab 0 = the data's vocabulary (docs/memory.md): addition 14, byte-level text 256.
  const std::string source = lower(cfg.data.source);
  if (cfg.model.vocab > 0) {
    est.vocab = cfg.model.vocab;
  } else if (source == "synthetic" && lower(cfg.data.task) == "addition") {
    est.vocab = 14;
  } else if ((source == "text" || source == "jsonl") &&
             (cfg.data.tokenizer.empty() || lower(cfg.data.tokenizer) == "bytes") &&
             cfg.finetune.base_checkpoint.empty()) {
    est.vocab = 256;
  } else {
    est.vocab = std::max<int64_t>(1, opt.default_vocab);
    est.notes.push_back("vocab comes from the data: assumed " + std::to_string(est.vocab) +
                        " (set model.vocab for an exact estimate)");
  }
  const Shape s = shapeOf(cfg.model, est.vocab);
  const std::string policy = lower(cfg.precision.policy);
  PrecisionBytes pb = precisionBytes(policy);
  // The trainscope CPU engine stores bf16/fp16 weights and gradients (2 B each, fp32 master +
  // Adam state in optimizer_state) but computes on fp32 copies upcast from them (workspace,
  // 4 B + 4 B per parameter) and keeps its saved activations in fp32 (docs/memory.md).
  // The same holds for fp8 (bf16 weights + fp8 copies of the block linear weights) and
  // pure_bf16; fp8 adds the emulated GEMM's dequantized operands (fp32 workspace: input and
  // output gradient up to B*T x 4C each, one weight up to 4C x C).
  const bool engine16 =
      opt.activation_model == ActivationModel::Engine &&
      (policy == "bf16" || policy == "fp16" || policy == "fp8" || policy == "pure_bf16");
  if (engine16) pb.act = 4;
  // precision.gemm: bf16 GEMMs (the engine's "auto" picks them where its GEMM calibration
  // measured the bf16 kernel faster; the caller states that in opt.native_bf16_gemm).
  const std::string gemm = lower(cfg.precision.gemm);
  const bool bf16Gemm = (policy == "bf16" || policy == "pure_bf16") &&
                        (gemm == "bf16" || (gemm == "auto" && opt.native_bf16_gemm));
  if (bf16Gemm)
    est.notes.push_back(
        "bf16 GEMMs: the block linear layers multiply the bf16 weights with "
        "bf16-rounded inputs (two bf16 scratch operands in workspace)");
  // One rank, optimizer on the device: the engine's fp32 copies exist a block at a time.
  const std::string offOpt = lower(cfg.parallel.offload_optimizer),
                    offPar = lower(cfg.parallel.offload_params);
  const bool gradWindow =
      engine16 && gradWindowOf(policy, std::max(1, cfg.parallel.ranks), offOpt, offPar);
  const bool valueWindow =
      engine16 && valueWindowOf(policy, std::max(1, cfg.parallel.ranks), offOpt, offPar);
  if (gradWindow)
    est.notes.push_back(
        policy == "fp8"
            ? "one rank: the fp32 gradients exist one block at a time (rounded into the bf16 "
              "gradients as each block's backward ends); fp8 keeps the whole fp32 weight copy"
            : "one rank: the fp32 compute copies of a block's weights and gradients exist only "
              "while the block runs (the 16-bit weights and gradients are the lasting copies)");
  if (policy == "fp8" && opt.activation_model == ActivationModel::Engine) {
    est.notes.push_back(
        "fp8 (engine): bf16 weights + fp8 copies of the block linear weights (3 B/param), bf16 "
        "grads, fp32 master + state; GEMMs emulated on fp32 copies, activations saved in fp32");
  } else if (policy == "fp8") {
    est.notes.push_back(
        "fp8: bf16 weights + fp8 weight copy (3 B/param), bf16 grads, fp32 master + state; "
        "activations saved in bf16");
  }
  const int ranks = std::max(1, cfg.parallel.ranks);
  const int stage = std::clamp(cfg.parallel.zero_stage, 0, 3);
  const bool nf4 = lower(cfg.finetune.base_quant) == "nf4";
  const ArchSpec arch = archSpecOf(cfg.model, est.vocab);
  const auto tensors = modelTensors(arch, cfg.finetune);
  est.params = countParameters(cfg.model, est.vocab, cfg.finetune);

  // Model-state bytes before sharding.
  double trainParamBytes = 0, frozenBytes = 0, gradBytes = 0, optBytes = 0;
  double largestBlockLinear = 0, nf4Elements = 0;
  double fp8Extra = 0;  // fp8 copies of every block linear weight (and, below, their scales)
  double fp8Copies = 0, fp8BlockPages = 0;  // the copies alone; one block's on whole pages
  std::map<int, double> fp8PerBlock;
  for (const auto& t : tensors) {
    const double n = static_cast<double>(t.numel());
    if (t.role == TensorRole::LinearWeight && !(nf4 && !t.trainable)) {
      fp8Extra += n * pb.fp8Copy;
      fp8Copies += n * pb.fp8Copy;
      fp8PerBlock[t.block] += n * pb.fp8Copy;
    }
    if (t.trainable) {
      trainParamBytes += n * (pb.param + (t.role == TensorRole::LinearWeight ? pb.fp8Copy : 0));
      gradBytes += n * pb.grad;
      optBytes += optimizerTensorBytes(t.numel(), cfg.optimizer, pb,
                                       opt.activation_model == ActivationModel::Engine);
    } else if (nf4 && t.role == TensorRole::LinearWeight) {
      // The engine always double-quantizes (QLoRA's setting); the PyTorch model follows the
      // option (bnb_4bit_use_double_quant).
      frozenBytes += blockwiseQuantBytes(
          n, 4, 64, opt.nf4_double_quant || opt.activation_model == ActivationModel::Engine);
      nf4Elements += n;
    } else {
      // A frozen base linear has its fp8 copy too (the GEMM reads it).
      frozenBytes += n * (pb.frozen + (t.role == TensorRole::LinearWeight ? pb.fp8Copy : 0));
    }
    if (t.role == TensorRole::LinearWeight) largestBlockLinear = std::max(largestBlockLinear, n);
  }
  const double trainable = static_cast<double>(est.params.trainable);
  // The engine's fp8 weights keep fp32 dequantization scales next to their bytes: one per
  // tensor (delayed) or per 128x128 block (blockwise) of the four block linear weights.
  const bool fp8Block = lower(cfg.precision.fp8.recipe) == "blockwise";
  if (policy == "fp8" && opt.activation_model == ActivationModel::Engine) {
    const int64_t c = ceilDiv(s.C, 128), f = ceilDiv(s.F, 128);
    const int64_t perLayer = fp8Block ? ceilDiv(3 * s.C, 128) * c + c * c + 2 * f * c : 4;
    trainParamBytes += 4.0 * static_cast<double>(s.L * perLayer);
    fp8Extra += 4.0 * static_cast<double>(s.L * perLayer);
  }

  // Activations for one micro-batch.
  const int64_t B = std::max(1, cfg.train.micro_batch);
  const int kernelThreads = opt.cpu_kernel_threads >= 0           ? opt.cpu_kernel_threads
                            : lower(cfg.device.backend) == "cuda" ? 0
                            : cfg.device.threads > 0              ? cfg.device.threads
                                                                  : usableCores();
  ActBytes act =
      opt.activation_model == ActivationModel::PyTorch
          ? pytorchActivations(s, B, cfg, pb.act)
          : engineActivations(arch, savedStateOptionsOf(cfg, arch.layers, bf16Gemm, kernelThreads));

  // Distillation teacher: same shape as the student unless told otherwise; frozen weights at
  // the working precision, its logits kept for the KL term, one block's forward transient.
  double teacherParams = 0, teacherActPeak = 0, teacherActSteady = 0, teacherWs = 0;
  if (!cfg.distill.teacher_checkpoint.empty() && opt.activation_model == ActivationModel::Engine) {
    // The engine's teacher exactly: its tensors as distill.teacher_dtype stores them (bf16
    // keeps fp32 compute copies, NF4 only its block linears quantized) and its forward-only
    // saved state (one block set reused in place, the logits; core::SavedStateOptions).
    ModelConfig tm = opt.teacher_model ? *opt.teacher_model : cfg.model;
    est.params.teacher = countParameters(tm, est.vocab, {}).total;
    std::string td = lower(cfg.distill.teacher_dtype);
    if (td == "auto") td = engine16 ? "bf16" : "fp32";
    const ArchSpec ta = archSpecOf(tm, est.vocab);
    for (const auto& t : modelTensors(ta, {})) {
      const double n = static_cast<double>(t.numel());
      if (td == "nf4" && t.role == TensorRole::LinearWeight && t.block >= 0) {
        teacherParams += blockwiseQuantBytes(n, 4, 64, true);
      } else if (td == "bf16") {
        teacherParams += 2 * n;
        teacherWs += 4 * n;
      } else {
        teacherParams += 4 * n;
      }
    }
    SavedStateOptions so;
    so.batch = B;
    so.flash = lower(cfg.attention.impl) == "flash";
    so.forwardOnly = true;
    so.nf4 = td == "nf4";
    so.bf16Gemm = td == "bf16" && bf16Gemm;
    so.kernelThreads = kernelThreads;
    const ActBytes ta2 = engineActivations(ta, so);
    teacherActPeak = teacherActSteady = ta2.peak;
    teacherWs += ta2.wsPeak;
  } else if (!cfg.distill.teacher_checkpoint.empty()) {
    ModelConfig tm = opt.teacher_model ? *opt.teacher_model : cfg.model;
    ParameterCounts tc = countParameters(tm, est.vocab, {});
    est.params.teacher = tc.total;
    teacherParams = static_cast<double>(tc.total) * pb.frozen;
    const Shape ts = shapeOf(tm, est.vocab);
    const double BT = static_cast<double>(B * ts.T);
    const double logits = BT * ts.V * 4.0;
    const double transient = BT * (4 * ts.C + ts.F) * pb.act +
                             (lower(cfg.attention.impl) == "flash"
                                  ? 0.0
                                  : static_cast<double>(B) * ts.H * ts.T * ts.T * pb.act);
    teacherActPeak = logits + transient;
    teacherActSteady = opt.activation_model == ActivationModel::Engine ? teacherActPeak : 0;
  }

  const Tier optTier = tierOf(lower(cfg.parallel.offload_optimizer));
  Tier paramTier = tierOf(lower(cfg.parallel.offload_params));
  if (paramTier != Tier::Device && stage < 3) {
    est.notes.push_back("offload_params needs ZeRO stage 3: parameters stay on the device");
    paramTier = Tier::Device;
  }
  const int64_t P = est.params.trainable;
  const int64_t accum = std::max(1, cfg.train.grad_accum);

  const int reported = opt.rank0_only ? 1 : ranks;
  // The engine's ZeRO layout (stage >= 1 over several ranks, every tensor trainable).
  // A frozen base (LoRA) too, unless it is NF4 (which stays whole on every rank).
  const bool frozenBase = P != est.params.total;
  const bool zeroEngine = opt.activation_model == ActivationModel::Engine && ranks > 1 &&
                          stage >= 1 && !(frozenBase && nf4) &&
                          (optTier == Tier::Device || lower(cfg.optimizer.type) == "adamw");
  const bool paramsOff = paramTier != Tier::Device;  // ZeRO-3 parameter offload
  // ZeRO-3: a block's fp8 weights exist while it is gathered (one block at a time), each
  // block's on pages of its own (Gpt's fp8PerBlock).
  for (const auto& [block, bytes] : fp8PerBlock)
    fp8BlockPages = std::max(fp8BlockPages, std::ceil(bytes / 4096) * 4096);
  const bool fp8Transient = zeroEngine && stage >= 3 && fp8Copies > 0;
  // The engine's checkpoint segment (Gpt.cpp's checkpointSegment): 0 none, 1 every block.
  const int ckSegment = [&] {
    const std::string m = lower(cfg.memory.checkpointing);
    if (m == "all") return 1;
    if (m != "every_k") return 0;
    const int L = std::max(1, cfg.model.layers);
    const int k = cfg.memory.checkpoint_every > 0
                      ? cfg.memory.checkpoint_every
                      : static_cast<int>(std::lround(std::sqrt(static_cast<double>(L))));
    return std::clamp(k, 1, L);
  }();
  const ZeroLayout zlayout = zeroLayoutOf(ranks, stage, cfg.optimizer.state_bits);
  const std::vector<ZeroGroup> zgroups =
      zeroEngine ? zeroGroups(tensors, zlayout) : std::vector<ZeroGroup>{};
  // Value space (the weights, frozen ones included): the same as gradient space when every
  // tensor trains.
  const std::vector<ZeroGroup> vgroups =
      zeroEngine ? zeroGroups(tensors, zlayout, true) : std::vector<ZeroGroup>{};
  const int64_t valueTotal = vgroups.empty() ? 0 : vgroups.back().offset + vgroups.back().numel;
  // 8-bit AdamW over a shard: each tensor's piece keeps its blocks' state (compact), the
  // master the whole shard (Optimizer.cpp's AdamW8).
  const std::vector<int64_t> zoffs =
      zeroEngine ? zeroTensorOffsets(tensors, zlayout) : std::vector<int64_t>{};
  auto adam8Shard = [&](int64_t lo, int64_t hi) {
    const auto& offs = zoffs;
    double bytes = pb.master * double(hi - lo);
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (offs[i] < 0) continue;
      const int64_t n = tensors[i].numel();
      const int64_t k = std::max<int64_t>(0, std::min(offs[i] + n, hi) - std::max(offs[i], lo));
      bytes += n >= 4096 ? double(2 * k + 8 * ceilDiv(k, 256)) : double(8 * k);
    }
    return bytes;
  };
  const int64_t zeroTotal = zgroups.empty() ? 0 : zgroups.back().offset + zgroups.back().numel;
  for (int r = 0; r < reported; ++r) {
    RankMemory rm;
    rm.rank = r;
    const double frac =
        P > 0 ? static_cast<double>(shardOf(P, ranks, r)) / static_cast<double>(P) : 0.0;
    const double fracFrozen = 1.0 / ranks;
    // Parameters.
    const double pTrain = stage >= 3 ? trainParamBytes * frac : trainParamBytes;
    const double pFrozen = stage >= 3 ? frozenBytes * fracFrozen : frozenBytes;
    if (!zeroEngine) setEntry(rm, paramTier, Cat::Parameters, pTrain + pFrozen, pTrain + pFrozen);
    if (teacherParams > 0) setEntry(rm, Tier::Device, Cat::Parameters, teacherParams, 0);
    // Gradients: with the optimizer offloaded they go where the optimizer runs (ZeRO-Offload).
    const double g = stage >= 2 ? gradBytes * frac : gradBytes;
    if (!zeroEngine) setEntry(rm, optTier, Cat::Gradients, g, g);
    // Optimizer state.
    const double o = stage >= 1 ? optBytes * frac : optBytes;
    if (!zeroEngine) setEntry(rm, optTier, Cat::OptimizerState, o, o);
    // Activations and workspace (per micro-batch; accumulation adds nothing).
    setEntry(rm, Tier::Device, Cat::Activations, act.steady + teacherActSteady,
             act.peak + teacherActPeak);
    double wsPeak = act.wsPeak + teacherWs;
    double wsSteady = act.wsSteady + teacherWs;
    if (engine16) {
      // fp32 compute copies: of every weight (frozen ones too), of the trainable gradients.
      // (NF4 weights have none: they are dequantized per GEMM.) On one rank with the optimizer
      // on the device both exist only in part (core::gradWindowOf / valueWindowOf).
      const double values = 4.0 * (static_cast<double>(est.params.total) - nf4Elements);
      const double grads32 = 4.0 * static_cast<double>(P);
      // The fp32 gradients under the window (ParamArena's gradWindow): a block's while its
      // backward runs; the final norm's and head's (after the last block) for their backward;
      // the embeddings' (before the first block) for theirs, or from the start when the head is
      // tied (it writes the token table's gradient first).
      double gradFirst = 0, gradLast = 0;
      bool seenBlock = false;
      for (const auto& t : tensors) {
        if (t.block >= 0) seenBlock = true;
        if (!t.trainable || t.block >= 0) continue;
        (seenBlock ? gradLast : gradFirst) += static_cast<double>(t.numel());
      }
      const double tiedFirst = s.tied ? gradFirst : 0.0;
      const double headMoment = std::max(gradLast + tiedFirst, gradFirst);
      // A block's linear weights have windows of their own (ParamArena::openWeight*), open
      // one GEMM at a time: its gradient around the GEMM that accumulates it, its fp32 values
      // around each GEMM that reads them (not under bf16 GEMMs, nor for NF4 weights). A fused
      // weight (llama's q|k|v, gate|up) opens whole; the optimizer opens tensor by tensor. The
      // rest of a block (norms, biases, adapters) opens with its group.
      std::map<int, double> smallV, smallG, gemmMax, gradGemmMax, tensorMax;
      std::map<std::pair<int, int>, double> gemmV, gemmG;
      std::map<int, bool> trains;
      double firstV = 0, lastV = 0;  // the values before the first block and after the last
      double headW = 0;              // an untied LM head (its own windows; in lastV too)
      bool headTrains = false, pastBlocks = false;
      for (const auto& t : tensors) {
        const double n = static_cast<double>(t.numel());
        const bool nf4Weight =
            nf4 && !t.trainable && t.block >= 0 && t.role == TensorRole::LinearWeight;
        if (t.block >= 0) pastBlocks = true;
        if (t.block < 0) {
          (pastBlocks ? lastV : firstV) += n;
          if (t.role == TensorRole::Head) {
            headW = n;
            headTrains = t.trainable;
          }
          continue;
        }
        if (t.trainable) trains[t.block] = true;
        if (t.role == TensorRole::LinearWeight) {
          const std::pair<int, int> key{t.block, static_cast<int>(t.slot)};
          if (!bf16Gemm && !nf4Weight) gemmV[key] += n;
          if (t.trainable) {
            gemmG[key] += n;
            tensorMax[t.block] = std::max(tensorMax[t.block], n);
          }
          continue;
        }
        smallV[t.block] += n;
        if (t.trainable) smallG[t.block] += n;
      }
      for (const auto& [key, n] : gemmV) gemmMax[key.first] = std::max(gemmMax[key.first], n);
      for (const auto& [key, n] : gemmG) {
        gemmMax[key.first] = std::max(gemmMax[key.first], n);
        gradGemmMax[key.first] = std::max(gradGemmMax[key.first], n);
      }
      std::set<int> blocks;
      for (const auto& t : tensors)
        if (t.block >= 0) blocks.insert(t.block);
      if (valueWindow) {
        // The embeddings' fp32 values around their forward (fp32 GEMMs; a bf16 embedding reads
        // the bf16 tables); the final norm's (and the token table's when a tied head reads it
        // in fp32) around its and the head's forward and backward, with their gradients, and
        // an untied head's own window (its gradient, or its fp32 values, not read by a bf16
        // head); at block l's backward its group's values and gradients and one linear
        // weight's window; pure_bf16's optimizer updates a group in place and then each
        // own-window weight with its values and gradient open. Between steps none.
        const double lastSmallV = lastV - headW;
        const double lastSmallG = gradLast - (headTrains ? headW : 0.0);
        // The head and embedding read the bf16 tables under bf16 GEMMs and with a bf16 NF4 base.
        const bool bf16Tables = bf16Gemm || (nf4 && (policy == "bf16" || policy == "pure_bf16"));
        const double headOwn = (headTrains || !bf16Tables) ? headW : 0.0;
        const double headV = lastSmallV + (s.tied && !bf16Tables ? firstV : 0.0);
        double moment = std::max(
            {lastSmallG + tiedFirst + headV + headOwn, gradFirst, bf16Tables ? 0.0 : firstV});
        if (policy == "pure_bf16")
          moment = std::max({moment, firstV + gradFirst,
                             lastSmallV + lastSmallG + (headTrains ? 2 * headW : 0.0)});
        for (int b : blocks) {
          moment = std::max(moment, smallV[b] + tiedFirst + smallG[b] + gemmMax[b]);
          if (policy == "pure_bf16" && trains[b])
            moment = std::max(moment, smallV[b] + smallG[b] + 2 * tensorMax[b]);
        }
        wsPeak += 4.0 * moment;
      } else if (gradWindow) {
        // Gradients only (fp8 quantizes from the whole fp32 weights after every step).
        double moment = headMoment;
        for (int b : blocks) moment = std::max(moment, tiedFirst + smallG[b] + gradGemmMax[b]);
        wsPeak += values + 4.0 * moment;
        wsSteady += values;
      } else {
        wsPeak += values + grads32;
        wsSteady += values + grads32;
      }
      // (fp8 and bf16 GEMM operand scratch are buffers of the saved state.)
    }
    if (stage >= 3 && ranks > 1) {
      // Gathered weights of one block and their full gradients before the reduce-scatter.
      const double blockParams = static_cast<double>(est.params.per_layer);
      wsPeak += blockParams * (pb.param + pb.grad);
    }
    if (optTier != Tier::Device) {
      wsPeak += largestBlockLinear * pb.grad;  // device bucket the gradients leave through
    }
    if (zeroEngine) {
      // The engine's ZeRO exactly (core/ZeroLayout.h): padded, page-aligned shards; what a rank
      // holds at a step boundary (current) and the most it gathers or keeps live (peak).
      // Gradient space (z) and value space (v: the weights, a frozen base's too).
      const ZeroRankShare z = zeroRankShare(zgroups, ranks, r);
      const ZeroRankShare v = zeroRankShare(vgroups, ranks, r);
      const double own = double(z.owned), full = double(zeroTotal);
      const double res = double(z.residentOutside), two = double(z.maxTwoBlocksOutside);
      const double vOwn = double(v.owned), vFull = double(valueTotal),
                   vRes = double(v.residentOutside), vTwo = double(v.maxTwoBlocksOutside);
      // fp8 copies and scales: whole on every rank, or under ZeRO-3 the scales and, at the
      // peak, one gathered block's copies.
      const double extra = fp8Transient ? fp8Extra - fp8Copies : fp8Extra;
      const double extraPeak = extra + (fp8Transient ? fp8BlockPages : 0);
      // Parameter offload: between uses not even the owned part stays; a step gathers the
      // groups outside the blocks whole and two adjacent blocks at a time, and the update
      // brings the blocks' owned parts (DataParallel's fetchOwned / dropOwned).
      const double rw = double(v.residentWhole);
      // Checkpointing in segments of k blocks: stage 3 recomputes a segment's forward (all
      // but the last segment's) and keeps its blocks gathered until their backward.
      const auto& vo = v.blockOutside;
      const auto& vw = v.blockWhole;
      const auto& go = z.blockOutside;
      const int nb = int(vo.size());
      auto segOf = [&](int l) -> std::pair<int, int> {  // l's recomputed segment, or {-1, -1}
        if (stage < 3 || ckSegment <= 0) return {-1, -1};
        const int first = l / ckSegment * ckSegment, last = std::min(nb, first + ckSegment) - 1;
        return last == nb - 1 ? std::pair{-1, -1} : std::pair{first, last};
      };
      auto sum = [](const std::vector<int64_t>& a, int from, int to) {
        double t = 0;
        for (int i = from; i <= to; ++i) t += double(a[size_t(i)]);
        return t;
      };
      double segV = 0, segW = 0, segLen = 0;  // the largest recomputed segment, gathered
      for (int l = 0; l < nb; ++l)
        if (const auto [f, e] = segOf(l); f >= 0 && l == f) {
          segV = std::max(segV, sum(vo, f, e));
          segW = std::max(segW, sum(vw, f, e));
          segLen = std::max(segLen, double(e - f + 1));
        }
      // Values live in backward of block l (beyond the resident ones): l and the prefetched
      // l-1, or in a recomputed segment the blocks from its first up to l.
      auto liveAt = [&](const std::vector<int64_t>& a, int l) {
        const auto [f, e] = segOf(l);
        if (f >= 0 && l > f) return sum(a, f, l);
        return double(a[size_t(l)]) + (l > 0 ? double(a[size_t(l - 1)]) : 0);
      };
      const double pCur = paramsOff    ? 0
                          : stage >= 3 ? vOwn
                                       : vFull,
                   pPeak = paramsOff    ? rw + std::max({double(v.maxTwoBlocksWhole), segW,
                                                         double(v.ownedInBlocks)})
                           : stage >= 3 ? vOwn + vRes + std::max(vTwo, segV)
                                        : vFull;
      // The stored weights at their peak with the fp8 copies of the blocks awaited then: one
      // in forward and backward, a whole segment while it is recomputed.
      const double w8 = fp8Transient ? fp8BlockPages : 0;
      const double pPeakBytes =
          stage < 3 ? pPeak * pb.param + extraPeak
          : paramsOff
              ? extra + rw * pb.param +
                    std::max({double(v.maxTwoBlocksWhole) * pb.param + w8,
                              segW * pb.param + segLen * w8, double(v.ownedInBlocks) * pb.param})
              : extra + (vOwn + vRes) * pb.param +
                    std::max(vTwo * pb.param + w8, segV * pb.param + segLen * w8);
      setEntry(rm, Tier::Device, Cat::Parameters, pCur * pb.param + extra, pPeakBytes);
      double hostWs = 0;  // host staging of the offload files
      if (paramsOff) {
        setEntry(rm, paramTier, Cat::Parameters, vOwn * pb.param, vOwn * pb.param);
        // nvme: each group's part written behind from host memory after the update, until
        // its next read (the whole shard at once).
        if (paramTier == Tier::Nvme) hostWs += vOwn * pb.param;
      }
      // Stage 2/3: a block's gradients live until its reduce-scatter, which runs during the
      // next block's backward, so two adjacent blocks' at most.
      const double gCur = stage >= 2 ? own : full, gPeak = stage >= 2 ? own + res + two : full;
      if (engine16) {
        setEntry(rm, Tier::Device, Cat::Gradients, gCur * 2, gCur * 2);  // 16-bit: the shard
      } else {
        setEntry(rm, Tier::Device, Cat::Gradients, gCur * 4, gPeak * 4);
      }
      // A shard over a frozen base keeps an fp32 master whatever the policy (the caller
      // gathers the new adapters from it).
      const double masterB = frozenBase ? 4 : pb.master;
      if (optTier == Tier::Device) {
        const auto [lo, hi] = zeroShard(zeroTotal, ranks, r);
        const double o = cfg.optimizer.state_bits == 8
                             ? adam8Shard(lo, hi) + (masterB - pb.master) * own
                             : own * (optBytes / double(P) - pb.master + masterB);
        setEntry(rm, Tier::Device, Cat::OptimizerState, o, o);
      } else {
        // Offloaded (OffloadedOptimizer.cpp): m, v and an fp32 master of the shard on the host
        // or in files, the shard's reduced gradients copied to the host each step; nvme streams
        // through two host chunks of the three state buffers (at most 2^20 elements each).
        // 8-bit: the shard's compact 8-bit state and an fp32 master, streamed item by item
        // through two slots of one item of each of its seven buffers.
        const bool eight = cfg.optimizer.state_bits == 8;
        const auto [lo, hi] = zeroShard(zeroTotal, ranks, r);
        const double state = eight ? adam8Shard(lo, hi) - pb.master * own + 4 * own : own * 12;
        setEntry(rm, optTier, Cat::OptimizerState, state, state);
        setEntry(rm, Tier::Host, Cat::Gradients, own * 4, own * 4);
        if (optTier == Tier::Nvme) {
          const double chunk = std::min(double(int64_t(1) << 20), std::max(own, 1.0));
          const double slot =
              eight ? chunk * 6 + 8 * std::ceil(chunk / 256) + 8 * std::min(chunk, 4096.0)
                    : 3 * chunk * 4;
          hostWs += 2 * slot;
          // A frozen base's caller reads the master back after each update.
          if (frozenBase) hostWs += own * 4;
        }
      }
      if (hostWs > 0) setEntry(rm, Tier::Host, Cat::Workspace, hostWs, hostWs);
      double wsC = act.wsSteady + teacherWs, wsP = act.wsPeak + teacherWs;
      // A frozen base: the update gathers the adapters' new values whole (fp32, gradient
      // space) into a buffer of its own.
      const double gatherBuf = frozenBase ? full : 0;
      if (engine16) {  // fp32 compute copies of the weights and of the gradients
        wsC += pCur * 4 + gCur * 4;
        // Backward of block l: values of l and l-1 (prefetched), gradients of l and l+1 (in
        // its reduce-scatter) beyond the resident ones.
        double bwd = 0, bwdWhole = 0;
        for (int l = 0; l < nb && l < int(go.size()); ++l) {
          const double gl =
              double(go[size_t(l)]) + (l + 1 < int(go.size()) ? double(go[size_t(l + 1)]) : 0);
          bwd = std::max(bwd, liveAt(vo, l) + gl);
          bwdWhole = std::max(bwdWhole, liveAt(vw, l) + gl);
        }
        if (paramsOff)  // forward's, backward's or the update's moment
          wsP += 4 * std::max({rw + double(v.maxTwoBlocksWhole) + own, rw + own + res + bwdWhole,
                               rw + double(v.ownedInBlocks) + own + gatherBuf});
        else if (stage >= 3)  // forward's, backward's or the update's moment
          wsP += 4 * std::max({vOwn + vRes + vTwo + own, vOwn + vRes + own + res + bwd,
                               vOwn + vRes + own + gatherBuf});
        else
          wsP += 4 * std::max(pPeak + gPeak, pPeak + gCur + gatherBuf);
      } else {
        wsP += gatherBuf * 4;
      }
      if (stage >= 1) {  // the reduce-scatter's output buffer
        wsC += double(z.maxGroupOwned) * 4;
        wsP += double(z.maxGroupOwned) * 4;
      }
      wsSteady = wsC;
      wsPeak = wsP;
    }
    setEntry(rm, Tier::Device, Cat::Workspace, wsSteady, wsPeak);
    if (!zeroEngine && (optTier == Tier::Nvme || paramTier == Tier::Nvme)) {
      // Pinned host staging buffers, double-buffered, one largest tensor each.
      const double staging = 2 * largestBlockLinear * 4.0;
      setEntry(rm, Tier::Host, Cat::Workspace, staging, staging);
    }
    est.report.ranks.push_back(rm);
  }

  const RankMemory& r0 = est.report.ranks.front();
  est.peak_device = r0.totalPeak(Tier::Device);
  est.peak_host = r0.totalPeak(Tier::Host);
  est.peak_nvme = r0.totalPeak(Tier::Nvme);
  est.fits = opt.device_memory <= 0 || est.peak_device <= opt.device_memory;

  est.effective_batch = static_cast<int64_t>(B) * accum * ranks;
  est.tokens_per_step = est.effective_batch * s.T;
  // FLOPs: matrices only (embedding lookups are free; a tied head counts once). Frozen weights
  // skip their weight gradient: 4 instead of 6 FLOPs per weight per token.
  double trainM = 0, frozenM = 0;
  for (const auto& t : tensors) {
    if (t.role == TensorRole::PositionEmbedding ||
        (t.role == TensorRole::TokenEmbedding && !s.tied))
      continue;
    (t.trainable ? trainM : frozenM) += static_cast<double>(t.numel());
  }
  const double attn = static_cast<double>(s.L) * s.C * s.T;
  const double perToken = 6 * trainM + 4 * frozenM + 12 * attn;
  const std::string ck = lower(cfg.memory.checkpointing);
  const double recomputePerToken = ck == "none" ? 0.0 : 2 * (trainM + frozenM) + 4 * attn;
  double teacherPerToken = 0;
  if (est.params.teacher > 0) {
    const Shape ts = shapeOf(opt.teacher_model ? *opt.teacher_model : cfg.model, est.vocab);
    teacherPerToken =
        2 * static_cast<double>(est.params.teacher - (ts.learnedPos ? ts.T * ts.C : 0) -
                                (ts.tied ? 0 : ts.V * ts.C)) +
        4.0 * ts.L * ts.C * ts.T;
  }
  const double tokens = static_cast<double>(est.tokens_per_step);
  est.recompute_flops = recomputePerToken * tokens;
  est.flops_per_step = (perToken + recomputePerToken + teacherPerToken) * tokens;

  // Communication per rank per step (textbook ZeRO volumes: 2Ψ for stages 0-2, 3Ψ for 3).
  if (ranks > 1) {
    if (stage < 3) {
      est.comm_bytes_per_step = 2 * trainable * pb.grad;
    } else {
      est.comm_bytes_per_step =
          static_cast<double>(accum) * (trainable * (2 * pb.param + pb.grad) + 2 * frozenBytes);
    }
  }
  if (optTier != Tier::Device) {
    const double shard = stage >= 1 ? trainable / ranks : trainable;
    est.offload_bytes_per_step += shard * (pb.grad + pb.param);  // grads out, weights back
  }
  if (paramTier != Tier::Device) {
    est.offload_bytes_per_step +=
        2.0 * accum * (trainParamBytes + frozenBytes) / ranks;  // fetched for fwd and bwd
  }
  const double states = static_cast<double>(r0.at(Tier::Device, Cat::Parameters).peak +
                                            r0.at(Tier::Host, Cat::Parameters).peak +
                                            r0.at(Tier::Nvme, Cat::Parameters).peak) +
                        static_cast<double>(r0.at(paramTier, Cat::Gradients).peak +
                                            r0.at(optTier, Cat::Gradients).peak) *
                            (paramTier == optTier ? 0.5 : 1.0) +
                        static_cast<double>(r0.at(optTier, Cat::OptimizerState).peak);
  est.bytes_per_param = P > 0 ? states / trainable : 0;
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
