// estimateMemory's categories: what the config resolves to (inputs), the model-state bytes,
// the activations (engine and PyTorch models), a distillation teacher, where the state lives,
// and one rank's parameters, gradients, optimizer state and workspace without the engine's
// ZeRO layout (that one is EstimatorZero.cpp).
#include <sched.h>

#include <set>
#include <thread>
#include <utility>

#include "EstimatorInternal.h"

namespace ts::core::estimator {
namespace {

// The cores this process may run on (OpenMP's omp_get_num_procs, which the CPU backend uses
// for device.threads 0, counts the same affinity mask).
int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

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

// model.vocab 0 = the data's vocabulary (docs/memory.md): addition 14, byte-level text 256.
int64_t vocabOf(const RunConfig& cfg, const EstimateOptions& opt, std::vector<std::string>& notes) {
  const std::string source = lower(cfg.data.source);
  if (cfg.model.vocab > 0) return cfg.model.vocab;
  if (source == "synthetic" && lower(cfg.data.task) == "addition") return 14;
  if ((source == "text" || source == "jsonl") &&
      (cfg.data.tokenizer.empty() || lower(cfg.data.tokenizer) == "bytes") &&
      cfg.finetune.base_checkpoint.empty())
    return 256;
  const int64_t vocab = std::max<int64_t>(1, opt.default_vocab);
  notes.push_back("vocab comes from the data: assumed " + std::to_string(vocab) +
                  " (set model.vocab for an exact estimate)");
  return vocab;
}

void addPrecisionNotes(const EstimateInputs& in, std::vector<std::string>& notes) {
  if (in.bf16Gemm)
    notes.push_back(
        "bf16 GEMMs: the block linear layers multiply the bf16 weights with "
        "bf16-rounded inputs (two bf16 scratch operands in workspace)");
  if (in.gradWindow)
    notes.push_back(
        in.policy == "fp8"
            ? "one rank: the fp32 gradients exist one block at a time (rounded into the bf16 "
              "gradients as each block's backward ends); fp8 keeps the whole fp32 weight copy"
            : "one rank: the fp32 compute copies of a block's weights and gradients exist only "
              "while the block runs (the 16-bit weights and gradients are the lasting copies)");
  if (in.policy == "fp8" && in.engineModel) {
    notes.push_back(
        "fp8 (engine): bf16 weights + fp8 copies of the block linear weights (3 B/param), bf16 "
        "grads, fp32 master + state; GEMMs emulated on fp32 copies, activations saved in fp32");
  } else if (in.policy == "fp8") {
    notes.push_back(
        "fp8: bf16 weights + fp8 weight copy (3 B/param), bf16 grads, fp32 master + state; "
        "activations saved in bf16");
  }
}

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

// The engine's teacher exactly: its tensors as distill.teacher_dtype stores them (bf16 keeps
// fp32 compute copies, NF4 only its block linears quantized) and its forward-only saved state
// (one block set reused in place, the logits; core::SavedStateOptions).
TeacherBytes engineTeacher(const EstimateInputs& in, MemoryEstimate& est) {
  TeacherBytes t;
  ModelConfig tm = in.opt.teacher_model ? *in.opt.teacher_model : in.cfg.model;
  est.params.teacher = countParameters(tm, est.vocab, {}).total;
  std::string td = lower(in.cfg.distill.teacher_dtype);
  if (td == "auto") td = in.engine16 ? "bf16" : "fp32";
  const ArchSpec ta = archSpecOf(tm, est.vocab);
  for (const auto& tensor : modelTensors(ta, {})) {
    const double n = static_cast<double>(tensor.numel());
    if (td == "nf4" && tensor.role == TensorRole::LinearWeight && tensor.block >= 0) {
      t.params += blockwiseQuantBytes(n, 4, 64, true);
    } else if (td == "bf16") {
      t.params += 2 * n;
      t.ws += 4 * n;
    } else {
      t.params += 4 * n;
    }
  }
  SavedStateOptions so;
  so.batch = in.batch;
  so.flash = lower(in.cfg.attention.impl) == "flash";
  so.forwardOnly = true;
  so.nf4 = td == "nf4";
  so.bf16Gemm = td == "bf16" && in.bf16Gemm;
  so.kernelThreads = in.kernelThreads;
  const ActBytes ta2 = engineActivations(ta, so);
  t.actPeak = t.actSteady = ta2.peak;
  t.ws += ta2.wsPeak;
  return t;
}

// The PyTorch model's teacher: same shape as the student unless told otherwise; frozen weights
// at the working precision, its logits kept for the KL term, one block's forward transient
// (nothing kept between steps).
TeacherBytes pytorchTeacher(const EstimateInputs& in, MemoryEstimate& est) {
  TeacherBytes t;
  ModelConfig tm = in.opt.teacher_model ? *in.opt.teacher_model : in.cfg.model;
  ParameterCounts tc = countParameters(tm, est.vocab, {});
  est.params.teacher = tc.total;
  t.params = static_cast<double>(tc.total) * in.pb.frozen;
  const Shape ts = shapeOf(tm, est.vocab);
  const int64_t B = in.batch;
  const double BT = static_cast<double>(B * ts.T);
  const double logits = BT * ts.V * 4.0;
  const double transient = BT * (4 * ts.C + ts.F) * in.pb.act +
                           (lower(in.cfg.attention.impl) == "flash"
                                ? 0.0
                                : static_cast<double>(B) * ts.H * ts.T * ts.T * in.pb.act);
  t.actPeak = logits + transient;
  return t;
}

// The engine's checkpoint segment (Gpt.cpp's checkpointSegment): 0 none, 1 every block.
int checkpointSegmentOf(const RunConfig& cfg) {
  const std::string m = lower(cfg.memory.checkpointing);
  if (m == "all") return 1;
  if (m != "every_k") return 0;
  const int L = std::max(1, cfg.model.layers);
  const int k = cfg.memory.checkpoint_every > 0
                    ? cfg.memory.checkpoint_every
                    : static_cast<int>(std::lround(std::sqrt(static_cast<double>(L))));
  return std::clamp(k, 1, L);
}

// Rank r's share of the trainable elements (textbook sharding).
double trainableFraction(const RankInputs& ri, int r) {
  const int64_t P = ri.pl.trainable;
  return P > 0 ? static_cast<double>(shardOf(P, ri.in.ranks, r)) / static_cast<double>(P) : 0.0;
}

}  // namespace

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

EstimateInputs estimateInputsOf(const RunConfig& cfg, const EstimateOptions& opt,
                                MemoryEstimate& est) {
  est.vocab = vocabOf(cfg, opt, est.notes);
  EstimateInputs in(cfg, opt);
  in.engineModel = opt.activation_model == ActivationModel::Engine;
  in.s = shapeOf(cfg.model, est.vocab);
  in.policy = lower(cfg.precision.policy);
  const std::string& policy = in.policy;
  in.pb = precisionBytes(policy);
  // The trainscope CPU engine stores bf16/fp16 weights and gradients (2 B each, fp32 master +
  // Adam state in optimizer_state) but computes on fp32 copies upcast from them (workspace,
  // 4 B + 4 B per parameter) and keeps its saved activations in fp32 (docs/memory.md).
  // The same holds for fp8 (bf16 weights + fp8 copies of the block linear weights) and
  // pure_bf16; fp8 adds the emulated GEMM's dequantized operands (fp32 workspace: input and
  // output gradient up to B*T x 4C each, one weight up to 4C x C).
  in.engine16 = in.engineModel &&
                (policy == "bf16" || policy == "fp16" || policy == "fp8" || policy == "pure_bf16");
  if (in.engine16) in.pb.act = 4;
  // precision.gemm: bf16 GEMMs (the engine's "auto" picks them where its GEMM calibration
  // measured the bf16 kernel faster; the caller states that in opt.native_bf16_gemm).
  const std::string gemm = lower(cfg.precision.gemm);
  in.bf16Gemm = (policy == "bf16" || policy == "pure_bf16") &&
                (gemm == "bf16" || (gemm == "auto" && opt.native_bf16_gemm));
  const std::string offOpt = lower(cfg.parallel.offload_optimizer),
                    offPar = lower(cfg.parallel.offload_params);
  const int ranks = std::max(1, cfg.parallel.ranks);
  in.gradWindow = in.engine16 && gradWindowOf(policy, ranks, offOpt, offPar);
  in.valueWindow = in.engine16 && valueWindowOf(policy, ranks, offOpt, offPar);
  addPrecisionNotes(in, est.notes);
  in.ranks = ranks;
  in.stage = std::clamp(cfg.parallel.zero_stage, 0, 3);
  in.nf4 = lower(cfg.finetune.base_quant) == "nf4";
  in.arch = archSpecOf(cfg.model, est.vocab);
  in.tensors = modelTensors(in.arch, cfg.finetune);
  est.params = countParameters(cfg.model, est.vocab, cfg.finetune);
  in.batch = std::max(1, cfg.train.micro_batch);
  in.kernelThreads = opt.cpu_kernel_threads >= 0           ? opt.cpu_kernel_threads
                     : lower(cfg.device.backend) == "cuda" ? 0
                     : cfg.device.threads > 0              ? cfg.device.threads
                                                           : usableCores();
  return in;
}

ModelStateBytes modelStateBytes(const EstimateInputs& in) {
  ModelStateBytes ms;
  const PrecisionBytes& pb = in.pb;
  for (const auto& t : in.tensors) {
    const double n = static_cast<double>(t.numel());
    if (t.role == TensorRole::LinearWeight && !(in.nf4 && !t.trainable)) {
      ms.fp8Extra += n * pb.fp8Copy;
      ms.fp8Copies += n * pb.fp8Copy;
      ms.fp8PerBlock[t.block] += n * pb.fp8Copy;
    }
    if (t.trainable) {
      ms.trainParam += n * (pb.param + (t.role == TensorRole::LinearWeight ? pb.fp8Copy : 0));
      ms.grad += n * pb.grad;
      ms.opt += optimizerTensorBytes(t.numel(), in.cfg.optimizer, pb, in.engineModel);
    } else if (in.nf4 && t.role == TensorRole::LinearWeight) {
      // The engine always double-quantizes (QLoRA's setting); the PyTorch model follows the
      // option (bnb_4bit_use_double_quant).
      ms.frozen += blockwiseQuantBytes(n, 4, 64, in.opt.nf4_double_quant || in.engineModel);
      ms.nf4Elements += n;
    } else {
      // A frozen base linear has its fp8 copy too (the GEMM reads it).
      ms.frozen += n * (pb.frozen + (t.role == TensorRole::LinearWeight ? pb.fp8Copy : 0));
    }
    if (t.role == TensorRole::LinearWeight)
      ms.largestBlockLinear = std::max(ms.largestBlockLinear, n);
  }
  // The engine's fp8 weights keep fp32 dequantization scales next to their bytes: one per
  // tensor (delayed) or per 128x128 block (blockwise) of the four block linear weights.
  const bool fp8Block = lower(in.cfg.precision.fp8.recipe) == "blockwise";
  if (in.policy == "fp8" && in.engineModel) {
    const Shape& s = in.s;
    const int64_t c = ceilDiv(s.C, 128), f = ceilDiv(s.F, 128);
    const int64_t perLayer = fp8Block ? ceilDiv(3 * s.C, 128) * c + c * c + 2 * f * c : 4;
    ms.trainParam += 4.0 * static_cast<double>(s.L * perLayer);
    ms.fp8Extra += 4.0 * static_cast<double>(s.L * perLayer);
  }
  return ms;
}

ActBytes studentActivations(const EstimateInputs& in) {
  if (in.opt.activation_model == ActivationModel::PyTorch)
    return pytorchActivations(in.s, in.batch, in.cfg, in.pb.act);
  return engineActivations(
      in.arch, savedStateOptionsOf(in.cfg, in.arch.layers, in.bf16Gemm, in.kernelThreads));
}

TeacherBytes teacherBytes(const EstimateInputs& in, MemoryEstimate& est) {
  if (in.cfg.distill.teacher_checkpoint.empty()) return {};
  return in.engineModel ? engineTeacher(in, est) : pytorchTeacher(in, est);
}

Placement placementOf(const EstimateInputs& in, const ModelStateBytes& ms, MemoryEstimate& est) {
  const RunConfig& cfg = in.cfg;
  Placement pl;
  pl.optTier = tierOf(lower(cfg.parallel.offload_optimizer));
  pl.paramTier = tierOf(lower(cfg.parallel.offload_params));
  if (pl.paramTier != Tier::Device && in.stage < 3) {
    est.notes.push_back("offload_params needs ZeRO stage 3: parameters stay on the device");
    pl.paramTier = Tier::Device;
  }
  pl.trainable = est.params.trainable;
  // The engine's ZeRO layout (stage >= 1 over several ranks, every tensor trainable).
  // A frozen base (LoRA) too, unless it is NF4 (which stays whole on every rank).
  pl.frozenBase = pl.trainable != est.params.total;
  pl.zeroEngine = in.engineModel && in.ranks > 1 && in.stage >= 1 && !(pl.frozenBase && in.nf4) &&
                  (pl.optTier == Tier::Device || lower(cfg.optimizer.type) == "adamw");
  pl.paramsOff = pl.paramTier != Tier::Device;
  // ZeRO-3: a block's fp8 weights exist while it is gathered (one block at a time), each
  // block's on pages of its own (Gpt's fp8PerBlock).
  for (const auto& [block, bytes] : ms.fp8PerBlock)
    pl.fp8BlockPages = std::max(pl.fp8BlockPages, std::ceil(bytes / 4096) * 4096);
  pl.fp8Transient = pl.zeroEngine && in.stage >= 3 && ms.fp8Copies > 0;
  pl.ckSegment = checkpointSegmentOf(cfg);
  if (pl.zeroEngine) {
    const ZeroLayout layout = zeroLayoutOf(in.ranks, in.stage, cfg.optimizer.state_bits);
    pl.zgroups = zeroGroups(in.tensors, layout);
    // Value space (the weights, frozen ones included): the same as gradient space when every
    // tensor trains.
    pl.vgroups = zeroGroups(in.tensors, layout, true);
    pl.zoffs = zeroTensorOffsets(in.tensors, layout);
  }
  pl.valueTotal = pl.vgroups.empty() ? 0 : pl.vgroups.back().offset + pl.vgroups.back().numel;
  pl.zeroTotal = pl.zgroups.empty() ? 0 : pl.zgroups.back().offset + pl.zgroups.back().numel;
  return pl;
}

void replicatedParameters(const RankInputs& ri, int r, RankMemory& rm) {
  const double frac = trainableFraction(ri, r);
  const double fracFrozen = 1.0 / ri.in.ranks;
  const bool sharded = ri.in.stage >= 3;
  const double pTrain = sharded ? ri.ms.trainParam * frac : ri.ms.trainParam;
  const double pFrozen = sharded ? ri.ms.frozen * fracFrozen : ri.ms.frozen;
  setEntry(rm, ri.pl.paramTier, Cat::Parameters, pTrain + pFrozen, pTrain + pFrozen);
}

// With the optimizer offloaded the gradients go where the optimizer runs (ZeRO-Offload).
void replicatedGradients(const RankInputs& ri, int r, RankMemory& rm) {
  const double g = ri.in.stage >= 2 ? ri.ms.grad * trainableFraction(ri, r) : ri.ms.grad;
  setEntry(rm, ri.pl.optTier, Cat::Gradients, g, g);
}

void replicatedOptimizerState(const RankInputs& ri, int r, RankMemory& rm) {
  const double o = ri.in.stage >= 1 ? ri.ms.opt * trainableFraction(ri, r) : ri.ms.opt;
  setEntry(rm, ri.pl.optTier, Cat::OptimizerState, o, o);
}

// Per micro-batch (accumulation adds nothing): the activations' workspace, the fp32 compute
// copies, and what ZeRO-3 gathers or offload streams through.
WorkspaceBytes replicatedWorkspace(const RankInputs& ri) {
  const EstimateInputs& in = ri.in;
  WorkspaceBytes ws;
  ws.peak = ri.act.wsPeak + ri.teacher.ws;
  ws.steady = ri.act.wsSteady + ri.teacher.ws;
  if (in.engine16) {
    ws.peak += ri.computeCopies.peak;
    ws.steady += ri.computeCopies.steady;
  }
  if (in.stage >= 3 && in.ranks > 1) {
    // Gathered weights of one block and their full gradients before the reduce-scatter.
    const double blockParams = static_cast<double>(ri.params.per_layer);
    ws.peak += blockParams * (in.pb.param + in.pb.grad);
  }
  if (ri.pl.optTier != Tier::Device) {
    ws.peak += ri.ms.largestBlockLinear * in.pb.grad;  // device bucket the gradients leave through
  }
  return ws;
}

void hostStaging(const RankInputs& ri, RankMemory& rm) {
  if (ri.pl.optTier == Tier::Nvme || ri.pl.paramTier == Tier::Nvme) {
    // Pinned host staging buffers, double-buffered, one largest tensor each.
    const double staging = 2 * ri.ms.largestBlockLinear * 4.0;
    setEntry(rm, Tier::Host, Cat::Workspace, staging, staging);
  }
}

}  // namespace ts::core::estimator
