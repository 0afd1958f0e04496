#include "trainscope/core/model/ModelSpec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/kernels/ScratchSizes.h"

namespace ts::core {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t ceilDiv(int64_t a, int64_t b) {
  return b <= 0 ? 0 : (a + b - 1) / b;
}

bool selects(const std::vector<std::string>& targets, const Projection& p) {
  for (const auto& t : targets)
    if (t == p.module || std::find(p.targets.begin(), p.targets.end(), t) != p.targets.end())
      return true;
  return false;
}

}  // namespace

ArchSpec archSpecOf(const ModelConfig& m, int64_t vocab) {
  ArchSpec a;
  // An unknown model.arch (the config validator names it) reads as the first family.
  const std::string arch = lower(m.arch);
  const ModelFamily* family = findModelFamily(arch);
  if (!family) family = modelFamilies().front();
  a.arch = family->name();
  a.layers = std::max(0, m.layers);
  a.heads = std::max(1, m.heads);
  a.kvHeads = m.kv_heads > 0 ? m.kv_heads : a.heads;
  a.dModel = std::max(0, m.d_model);
  a.dFf = m.d_ff > 0 ? m.d_ff : 4 * a.dModel;
  a.seqLen = std::max(0, m.seq_len);
  a.vocab = std::max<int64_t>(0, vocab);
  a.ropeTheta = m.rope_theta;
  a.relu = lower(m.activation) == "relu";
  family->describe(m, a);
  return a;
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool loraTargets(const std::vector<std::string>& targets, const ArchSpec& arch,
                 const std::string& module) {
  for (const auto& p : modelFamily(arch.arch).projections(arch))
    if (p.module == module && selects(targets, p)) return true;
  return false;
}

std::vector<std::string> loraModules(const ArchSpec& arch) {
  std::vector<std::string> out;
  for (const auto& p : modelFamily(arch.arch).projections(arch)) out.push_back(p.module);
  return out;
}

std::vector<LoraSite> loraSites(const ArchSpec& arch, const LoraConfig& lora) {
  std::vector<LoraSite> out;
  if (lora.r <= 0) return out;
  for (const auto& p : modelFamily(arch.arch).projections(arch))
    if (selects(lora.targets, p)) out.push_back({p.module, p.in, p.out});
  return out;
}

std::vector<TensorSpec> modelTensors(const ArchSpec& a, const FinetuneConfig& ft) {
  TensorListBuilder b(a, ft);
  modelFamily(a.arch).tensors(b);
  return b.take();
}

TensorSpec& TensorListBuilder::add(std::string name, std::vector<int64_t> shape, TensorRole role,
                                   int block, std::string module, BlockSlot slot, bool resid) {
  TensorSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.role = role;
  s.block = block;
  s.module = std::move(module);
  s.trainable = finetune_.lora.r <= 0;
  s.residualProjection = resid;
  s.slot = slot;
  static TensorSpec none;
  if (s.numel() <= 0) return none = s;
  tensors_.push_back(std::move(s));
  return tensors_.back();
}

void TensorListBuilder::adapters(const std::string& prefix, int block, const Projection& p) {
  if (finetune_.lora.r <= 0 || !selects(finetune_.lora.targets, p)) return;
  const int64_t r = finetune_.lora.r;
  for (bool isA : {true, false}) {
    TensorSpec s;
    s.name = prefix + p.path + (isA ? ".lora_A.weight" : ".lora_B.weight");
    s.shape = isA ? std::vector<int64_t>{r, p.in} : std::vector<int64_t>{p.out, r};
    s.role = isA ? TensorRole::LoraA : TensorRole::LoraB;
    s.block = block;
    s.module = p.module;
    tensors_.push_back(std::move(s));
  }
}

SavedStateOptions savedStateOptionsOf(const RunConfig& c, int64_t layers, bool bf16Gemm,
                                      int kernelThreads) {
  SavedStateOptions o;
  o.kernelThreads = std::max(0, kernelThreads);
  o.distill = !c.distill.teacher_checkpoint.empty();
  o.batch = std::max(1, c.train.micro_batch);
  o.flash = lower(c.attention.impl) == "flash";
  o.compression = lower(c.memory.activation_compression);
  const std::string ck = lower(c.memory.checkpointing);
  if (ck == "all") {
    o.checkpointEvery = 1;
  } else if (ck == "every_k") {
    int64_t k = c.memory.checkpoint_every > 0 ? c.memory.checkpoint_every
                                              : std::lround(std::sqrt(static_cast<double>(layers)));
    o.checkpointEvery = static_cast<int>(std::clamp<int64_t>(k, 1, std::max<int64_t>(1, layers)));
  }
  o.dropout = c.model.dropout > 0;
  o.lora = c.finetune.lora;
  const std::string policy = lower(c.precision.policy);
  o.bf16Gemm = bf16Gemm && (policy == "bf16" || policy == "pure_bf16");
  o.nf4 = lower(c.finetune.base_quant) == "nf4" && c.finetune.lora.r > 0;
  if (policy == "fp8")
    o.fp8 = lower(c.precision.fp8.recipe) == "blockwise" ? "blockwise" : "delayed";
  o.saved = policy == "fp16"                                               ? ElementType::F16
            : policy == "bf16" || policy == "pure_bf16" || policy == "fp8" ? ElementType::BF16
                                                                           : ElementType::F32;
  return o;
}

int elementBits(ElementType t) {
  switch (t) {
    case ElementType::I8:
      return 8;
    case ElementType::BF16:
    case ElementType::F16:
      return 16;
    default:
      return 32;
  }
}

int64_t BufferSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

double BufferSpec::bytes() const {
  const double full = static_cast<double>(numel()) * elementBits(type) / 8.0;
  return dataDependent ? 0.5 * full : full;
}

int64_t kernelScratchPerThread(const ArchSpec& a, const SavedStateOptions& o) {
  namespace ks = kernels::scratch;
  const int64_t T = a.seqLen, C = a.dModel, hd = a.headDim();
  const int64_t group = a.kvHeads > 0 ? a.heads / a.kvHeads : 1;
  int64_t per = 0;
  if (o.flash) per = std::max(per, ks::flashForward(hd));
  if (o.flash && !o.forwardOnly) per = std::max(per, ks::flashBackward(hd, group, T));
  if (!o.forwardOnly)
    per = std::max(per, a.rmsNorm ? ks::rmsnormBackward(C) : ks::layernormBackward(C));
  if (o.distill && !o.forwardOnly) per = std::max(per, ks::distill(a.vocab));
  if (o.bf16Gemm || o.nf4) {
    // The block GEMMs' largest dimension bounds every M, N and K they run with (the tokens of
    // a micro-batch, or a weight's rows or columns; the vocabulary for the bf16 LM head); one
    // lease on the calling thread may span the region, so each thread carries its share.
    const int64_t F = a.dFf, fcPre = a.swiglu ? 2 * F : F;
    const int64_t d = std::max({o.batch * T, C, a.qkvDim(), fcPre, F, a.vocab});
    const int64_t threads = std::max(1, o.kernelThreads);
    per = std::max(per, (ks::matmulBf16Emulated(d, d, d) + threads - 1) / threads);
  }
  return per;
}

std::vector<BufferSpec> savedState(const ArchSpec& a, const SavedStateOptions& o) {
  const int64_t B = o.batch, T = a.seqLen, C = a.dModel, V = a.vocab, NH = a.heads;
  const int64_t N = B * T;
  const int64_t F = a.dFf, fcPre = a.swiglu ? 2 * F : F, qkv = a.qkvDim();
  const bool int8 = o.compression == "int8" && !o.forwardOnly;
  const bool sparse = o.compression == "sparse";
  const int k = o.forwardOnly ? 0 : o.checkpointEvery;
  // Stored (packed) saved activations: int8 rows, or the 16-bit working dtype.
  const ElementType half = o.forwardOnly ? ElementType::F32 : o.saved;
  const bool stored = int8 || half != ElementType::F32;
  const auto sites = loraSites(a, o.lora);
  using Cat = MemoryCategory;
  std::vector<BufferSpec> v;
  using E = ElementType;
  auto add = [&](std::string name, std::vector<int64_t> shape, E type = E::F32,
                 Cat cat = Cat::Activations, int set = -1, int index = 0) {
    v.push_back({std::move(name), std::move(shape), type, cat, set, index, false});
  };
  // A saved activation backward can take approximately: int8 rows (last dim) with an fp32
  // scale per row, else fp32 or 16-bit. The norms' inputs (the residual stream, `residual`)
  // stay fp32 under the 16-bit policies, as under autocast, and are bf16 under int8: a row's
  // absmax is set by a few outlier channels, int8 would round the rest coarsely, and the
  // norm's backward scales that error by rstd (measured: docs/memory.md).
  auto saved = [&](const std::string& name, std::vector<int64_t> shape, int set) {
    if (int8) {
      std::vector<int64_t> rows(shape.begin(), shape.end() - 1);
      add(name, std::move(shape), E::I8, Cat::Activations, set);
      add(name + "Scale", std::move(rows), E::F32, Cat::Activations, set);
    } else {
      add(name, std::move(shape), half, Cat::Activations, set);
    }
  };
  const bool packedResidual = int8;  // the blocks then run on an fp32 stream
  // 16-bit storage keeps the norms' inputs exact, so backward recomputes the norms' outputs
  // from them and their statistics (bit for bit what forward computed) instead of keeping a
  // rounded 16-bit copy: 2·N·C bytes per norm less, and the linears' weight gradients see the
  // exact values.
  const bool sixteenBit = half != E::F32 && !int8;
  const bool normOutKept = !sixteenBit;
  // The same storage keeps no MLP activation output either: backward recomputes it from the
  // stored 16-bit pre-activation (one elementwise op; it then reads act(round(pre)) where a
  // stored copy would give round(act(pre)): the same order of rounding error, and 2·N·F bytes
  // less per block).
  const bool actKept = !sixteenBit;
  auto residual = [&](const std::string& name, std::vector<int64_t> shape, int set) {
    add(name, std::move(shape),
        !packedResidual  ? E::F32
        : half == E::F16 ? E::F16
                         : E::BF16,
        Cat::Activations, set);
  };
  add("tokens", {B, T}, E::I32);
  add("targets", {B, T}, E::I32);
  // Plain: every layer keeps a full set. Checkpointing: k scratch sets + one input per segment.
  const int sets = o.forwardOnly ? 1 : k > 0 ? k : static_cast<int>(a.layers);
  for (int s = 0; s < sets; ++s) {
    // A packed residual: set 0 keeps its input as well, so backward reads the same rounded
    // values with checkpointing on or off.
    if (k == 0 || s > 0 || packedResidual) residual("input", {B, T, C}, s);
    if (!a.rmsNorm) add("ln1Mean", {B, T}, E::F32, Cat::Activations, s);
    add("ln1Rstd", {B, T}, E::F32, Cat::Activations, s);
    saved("qkv", {B, T, qkv}, s);
    if (o.flash)
      add("att", {B, NH, T}, E::F32, Cat::Activations, s);  // log-sum-exp: exact
    else
      saved("att", {B, NH, T, T}, s);
    residual("resid2", {B, T, C}, s);
    if (!a.rmsNorm) add("ln2Mean", {B, T}, E::F32, Cat::Activations, s);
    add("ln2Rstd", {B, T}, E::F32, Cat::Activations, s);
    // int8 with ReLU: backward's mask comes from the activation, packed so that no nonzero
    // becomes zero (exact mask); the pre-activation is not kept.
    if (!(int8 && a.relu && !a.swiglu)) saved("fcPre", {B, T, fcPre}, s);
    // LoRA: each adapter keeps its down-projected input u = x A^T for dB.
    for (size_t i = 0; i < sites.size(); ++i)
      add("loraU", {B, T, o.lora.r}, E::F32, Cat::Activations, s, static_cast<int>(i));
    if (normOutKept) saved("ln1", {B, T, C}, s);
    saved("attOut", {B, T, C}, s);
    if (normOutKept) saved("ln2", {B, T, C}, s);
    if (sparse) {
      // A bitmap of the ReLU output (1 bit per value) and its nonzeros, counted per forward.
      add("fcMask", {ceilDiv(N * F, 8)}, E::I8, Cat::Activations, s);
      v.push_back({"fcVals", {B, T, F}, E::F32, Cat::Activations, s, 0, true});
    } else if (actKept) {
      saved("fcAct", {B, T, F}, s);
    }
  }
  if (k > 0)
    for (int64_t seg = 0; seg < ceilDiv(a.layers, k); ++seg)
      add("checkpoint", {B, T, C}, E::F32, Cat::Activations, -1, static_cast<int>(seg));
  residual("residOut", {B, T, C}, -1);
  if (normOutKept) saved("lnf", {B, T, C}, -1);
  if (!a.rmsNorm) add("lnfMean", {B, T});
  add("lnfRstd", {B, T});
  add("logits", {B, T, V});
  add("losses", {B, T});
  // Backward scratch, reused by every block (forward uses ones and dtmp, and the bf16 operands).
  const Cat ws = Cat::Workspace;
  add("ones", {N}, E::F32, ws);
  // Last, so that the other buffers keep the addresses (and alignment) they had without it.
  auto kernelScratch = [&] {
    if (o.kernelThreads > 0)
      if (const int64_t per = kernelScratchPerThread(a, o); per > 0)
        add("kernelScratch", {o.kernelThreads, per}, E::F32, ws);
  };
  if (o.forwardOnly) {
    add("dtmp", {B, T, C}, E::F32, ws);  // a branch's output before its residual add
    const int64_t widest = std::max({fcPre, qkv, C});
    if (o.bf16Gemm || o.nf4) add("x16", {N * widest}, E::BF16, ws);
    if (o.nf4) add("nf4W", {std::max({qkv * C, fcPre * C, C * F})}, E::BF16, ws);
    kernelScratch();
    return v;
  }
  add("dres", {B, T, C}, E::F32, ws);
  add("dtmp", {B, T, C}, E::F32, ws);
  add("dqkv", {B, T, qkv}, E::F32, ws);
  if (!o.flash) add("datt", {B, NH, T, T}, E::F32, ws);
  // Stored tensors are computed and expanded in dfc / dfc2: wide enough for qkv and C too.
  const int64_t fcWide = stored ? std::max({fcPre, qkv, C}) : fcPre;
  add("dfc", {B, T, fcWide}, E::F32, ws);
  add("dfc2", {B, T, fcWide}, E::F32, ws);
  if (packedResidual) add("stream", {B, T, C}, E::F32, ws);  // forward's fp32 residual stream
  if (stored && !o.flash) add("attUnpack", {B, NH, T, T}, E::F32, ws);
  if (o.dropout) add("ddrop", {B, T, C}, E::F32, ws);  // a branch's gradient through its mask
  if (!sites.empty()) {
    add("loraDU", {N, o.lora.r}, E::F32, ws);  // an adapter's gradient of u
    int64_t in = 0;
    for (const auto& st : sites) in = std::max(in, st.in);
    if (o.lora.dropout > 0) add("loraX", {N, in}, E::F32, ws);  // the dropped adapter input
  }
  const int64_t widest = std::max({fcPre, qkv, C});  // the widest GEMM operand row
  if (o.bf16Gemm || o.nf4) {  // bf16 inputs / output gradients of the block GEMMs
    add("x16", {N * widest}, E::BF16, ws);
    // Also the LM head's logit gradient, a block of rows at a time: at least one row of V.
    add("g16", {std::max(N * widest, V)}, E::BF16, ws);
  }
  if (o.nf4)  // an NF4 base weight dequantized for its GEMM (the largest one)
    add("nf4W", {std::max({qkv * C, fcPre * C, C * F})}, E::BF16, ws);
  if (!o.fp8.empty()) {  // the emulated fp8 GEMM's dequantized operands
    add("fp8X", {N * widest}, E::F32, ws);
    add("fp8G", {N * widest}, E::F32, ws);
    add("fp8W", {std::max({qkv * C, fcPre * C, C * F})}, E::F32, ws);  // the largest weight
    if (o.fp8 == "blockwise")  // per-tile scales of the operand with the most tiles
      add("fp8TileScales", {std::max(N * ceilDiv(widest, 128), ceilDiv(N, 128) * widest)}, E::F32,
          ws);
  }
  kernelScratch();
  return v;
}

}  // namespace ts::core
