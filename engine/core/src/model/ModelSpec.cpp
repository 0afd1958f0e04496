#include "trainscope/core/model/ModelSpec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/RotaryTable.h"
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
  // The keys a family reads (ModelFamily::modelKeys); the others keep their defaults.
  auto reads = [&](const char* k) { return family->readsModelKey(k); };
  if (reads("head_dim")) a.headDimSet = std::max(0, m.head_dim);
  if (reads("norm_eps")) a.normEps = m.norm_eps;
  if (reads("rope_scaling")) a.rope = m.rope_scaling;
  if (reads("partial_rotary_factor")) a.partialRotary = m.partial_rotary_factor;
  if (reads("max_positions")) a.maxPositions = std::max(0, m.max_positions);
  if (reads("sliding_window")) a.slidingWindow = std::max(0, m.sliding_window);
  if (reads("sliding_window_pattern")) a.slidingPattern = std::max(0, m.sliding_window_pattern);
  if (reads("rope_local_theta")) a.ropeLocalTheta = m.rope_local_theta;
  if (reads("query_pre_attn_scalar")) a.queryPreAttnScalar = m.query_pre_attn_scalar;
  if (reads("attn_softcap")) a.attnSoftcap = m.attn_softcap;
  if (reads("final_softcap")) a.finalSoftcap = m.final_softcap;
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

TensorSpec* TensorListBuilder::add(std::string name, std::vector<int64_t> shape, TensorRole role,
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
  if (s.numel() <= 0) return nullptr;
  tensors_.push_back(std::move(s));
  return &tensors_.back();
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

namespace {

// The buffers savedState lists for one micro-batch, in the order the engine allocates them
// (the order is part of the contract: it fixes their addresses and alignment).
class SavedStateList {
 public:
  SavedStateList(const ArchSpec& a, const SavedStateOptions& o);

  void inputs();
  void blockSet(int s);
  void checkpoints();
  void outsideBlocks();
  void forwardWorkspace();
  void backwardWorkspace();
  void kernelScratch();
  int sets() const { return o_.forwardOnly ? 1 : k_ > 0 ? k_ : static_cast<int>(a_.layers); }
  std::vector<BufferSpec> take() { return std::move(v_); }

 private:
  using Cat = MemoryCategory;
  using E = ElementType;

  void add(std::string name, std::vector<int64_t> shape, E type = E::F32,
           Cat cat = Cat::Activations, int set = -1, int index = 0) {
    v_.push_back({std::move(name), std::move(shape), type, cat, set, index, false});
  }
  // A saved activation backward can take approximately: int8 rows (last dim) with an fp32
  // scale per row, else fp32 or 16-bit. The norms' inputs (the residual stream, `residual`)
  // stay fp32 under the 16-bit policies, as under autocast, and are bf16 under int8: a row's
  // absmax is set by a few outlier channels, int8 would round the rest coarsely, and the
  // norm's backward scales that error by rstd (measured: docs/memory.md).
  void saved(const std::string& name, std::vector<int64_t> shape, int set) {
    if (int8_) {
      std::vector<int64_t> rows(shape.begin(), shape.end() - 1);
      add(name, std::move(shape), E::I8, Cat::Activations, set);
      add(name + "Scale", std::move(rows), E::F32, Cat::Activations, set);
    } else {
      add(name, std::move(shape), half_, Cat::Activations, set);
    }
  }
  void residual(const std::string& name, std::vector<int64_t> shape, int set) {
    add(name, std::move(shape),
        !packedResidual_  ? E::F32
        : half_ == E::F16 ? E::F16
                          : E::BF16,
        Cat::Activations, set);
  }
  // The largest block weight (an NF4 or fp8 weight dequantized for its GEMM).
  int64_t largestWeight() const { return std::max({qkv_ * C_, fcPre_ * C_, C_ * F_}); }

  const ArchSpec& a_;
  const SavedStateOptions& o_;
  const int64_t B_, T_, C_, V_, NH_, N_, F_, fcPre_, qkv_, Q_;
  const int64_t widest_;  // the widest GEMM operand row
  const bool int8_, sparse_;
  const int k_;  // checkpoint segment length; 0 none
  // Stored (packed) saved activations: int8 rows, or the 16-bit working dtype.
  const ElementType half_;
  const bool stored_;
  const bool packedResidual_;  // the blocks then run on an fp32 stream
  const bool sixteenBit_;      // 16-bit storage (not int8)
  // 16-bit storage keeps the norms' inputs exact, so backward recomputes the norms' outputs
  // from them and their statistics (bit for bit what forward computed) instead of keeping a
  // rounded 16-bit copy: 2·N·C bytes per norm less, and the linears' weight gradients see the
  // exact values.
  const bool normOutKept_;
  // The same storage keeps no MLP activation output either: backward recomputes it from the
  // stored 16-bit pre-activation (one elementwise op; it then reads act(round(pre)) where a
  // stored copy would give round(act(pre)): the same order of rounding error, and 2·N·F bytes
  // less per block).
  const bool actKept_;
  const std::vector<LoraSite> sites_;
  std::vector<BufferSpec> v_;
};

SavedStateList::SavedStateList(const ArchSpec& a, const SavedStateOptions& o)
    : a_(a),
      o_(o),
      B_(o.batch),
      T_(a.seqLen),
      C_(a.dModel),
      V_(a.vocab),
      NH_(a.heads),
      N_(B_ * T_),
      F_(a.dFf),
      fcPre_(a.swiglu ? 2 * F_ : F_),
      qkv_(a.qkvDim()),
      Q_(a.qDim()),
      widest_(std::max({fcPre_, qkv_, C_, Q_})),
      int8_(o.compression == "int8" && !o.forwardOnly),
      sparse_(o.compression == "sparse"),
      k_(o.forwardOnly ? 0 : o.checkpointEvery),
      half_(o.forwardOnly ? ElementType::F32 : o.saved),
      stored_(int8_ || half_ != ElementType::F32),
      packedResidual_(int8_),
      sixteenBit_(half_ != E::F32 && !int8_),
      normOutKept_(!sixteenBit_),
      actKept_(!sixteenBit_),
      sites_(loraSites(a, o.lora)) {}

void SavedStateList::inputs() {
  add("tokens", {B_, T_}, E::I32);
  add("targets", {B_, T_}, E::I32);
}

// Set s of the blocks' saved activations. Plain: every layer keeps a full set. Checkpointing:
// k scratch sets (+ one input per segment, checkpoints()).
void SavedStateList::blockSet(int s) {
  // A packed residual: set 0 keeps its input as well, so backward reads the same rounded
  // values with checkpointing on or off.
  if (k_ == 0 || s > 0 || packedResidual_) residual("input", {B_, T_, C_}, s);
  if (!a_.rmsNorm) add("ln1Mean", {B_, T_}, E::F32, Cat::Activations, s);
  add("ln1Rstd", {B_, T_}, E::F32, Cat::Activations, s);
  saved("qkv", {B_, T_, qkv_}, s);
  // q/k norms: the projections before them (exact) and their statistics.
  if (a_.qkNorm != ArchSpec::QkNorm::None) {
    add("qkPre", {B_, T_, qkv_}, E::F32, Cat::Activations, s);
    const int64_t groups = a_.qkNorm == ArchSpec::QkNorm::PerHead ? NH_ + a_.kvHeads : 2;
    add("qkRstd", {B_, T_, groups}, E::F32, Cat::Activations, s);
  }
  if (o_.flash)
    add("att", {B_, NH_, T_}, E::F32, Cat::Activations, s);  // log-sum-exp: exact
  else
    saved("att", {B_, NH_, T_, T_}, s);
  residual("resid2", {B_, T_, C_}, s);
  if (!a_.rmsNorm) add("ln2Mean", {B_, T_}, E::F32, Cat::Activations, s);
  add("ln2Rstd", {B_, T_}, E::F32, Cat::Activations, s);
  // int8 with ReLU: backward's mask comes from the activation, packed so that no nonzero
  // becomes zero (exact mask); the pre-activation is not kept.
  if (!(int8_ && a_.relu && !a_.swiglu)) saved("fcPre", {B_, T_, fcPre_}, s);
  // LoRA: each adapter keeps its down-projected input u = x A^T for dB.
  for (size_t i = 0; i < sites_.size(); ++i)
    add("loraU", {B_, T_, o_.lora.r}, E::F32, Cat::Activations, s, static_cast<int>(i));
  if (normOutKept_) saved("ln1", {B_, T_, C_}, s);
  saved("attOut", {B_, T_, Q_}, s);
  // Norms on the branches' outputs: each branch's output before its norm (exact), and rstd.
  if (a_.postNorm)
    for (const char* b : {"attnBranch", "mlpBranch"}) {
      add(b, {B_, T_, C_}, E::F32, Cat::Activations, s);
      add(std::string(b) + "Rstd", {B_, T_}, E::F32, Cat::Activations, s);
    }
  if (normOutKept_) saved("ln2", {B_, T_, C_}, s);
  if (sparse_) {
    // A bitmap of the ReLU output (1 bit per value) and its nonzeros, counted per forward.
    add("fcMask", {ceilDiv(N_ * F_, 8)}, E::I8, Cat::Activations, s);
    v_.push_back({"fcVals", {B_, T_, F_}, E::F32, Cat::Activations, s, 0, true});
  } else if (actKept_) {
    saved("fcAct", {B_, T_, F_}, s);
  }
}

// Checkpointing: each segment's input.
void SavedStateList::checkpoints() {
  if (k_ > 0)
    for (int64_t seg = 0; seg < ceilDiv(a_.layers, k_); ++seg)
      add("checkpoint", {B_, T_, C_}, E::F32, Cat::Activations, -1, static_cast<int>(seg));
}

// After the blocks: the residual stream's end, the final norm, logits and losses.
void SavedStateList::outsideBlocks() {
  residual("residOut", {B_, T_, C_}, -1);
  if (normOutKept_) saved("lnf", {B_, T_, C_}, -1);
  if (!a_.rmsNorm) add("lnfMean", {B_, T_});
  add("lnfRstd", {B_, T_});
  add("logits", {B_, T_, V_});
  add("losses", {B_, T_});
  if (a_.finalSoftcap > 0) add("softcapGrad", {B_, T_, V_});  // the cap's derivative
  // The rotary tables (positions x rotated dims), the sliding layers' own where they differ.
  if (a_.rotaryDim() > 0) {
    add("ropeTable", {T_, a_.rotaryDim()}, E::F32, Cat::Workspace);
    if (separateLocalRotary(a_))
      add("ropeTableLocal", {T_, a_.rotaryDim()}, E::F32, Cat::Workspace);
  }
}

// A forward-only model (a distillation teacher): a branch's output before its residual add
// and the bf16 GEMMs' operands.
void SavedStateList::forwardWorkspace() {
  const Cat ws = Cat::Workspace;
  add("ones", {N_}, E::F32, ws);
  add("dtmp", {B_, T_, std::max(C_, Q_)}, E::F32, ws);
  if (o_.bf16Gemm || o_.nf4) add("x16", {N_ * widest_}, E::BF16, ws);
  if (o_.nf4) add("nf4W", {largestWeight()}, E::BF16, ws);
}

// Backward scratch, reused by every block (forward uses ones and dtmp, and the bf16 operands).
void SavedStateList::backwardWorkspace() {
  const Cat ws = Cat::Workspace;
  add("ones", {N_}, E::F32, ws);
  add("dres", {B_, T_, C_}, E::F32, ws);
  add("dtmp", {B_, T_, std::max(C_, Q_)}, E::F32, ws);  // also the merged heads' gradient
  add("dqkv", {B_, T_, qkv_}, E::F32, ws);
  if (!o_.flash) add("datt", {B_, NH_, T_, T_}, E::F32, ws);
  // Stored tensors are computed and expanded in dfc / dfc2: wide enough for qkv and C too.
  const int64_t fcWide = stored_ ? widest_ : fcPre_;
  add("dfc", {B_, T_, fcWide}, E::F32, ws);
  add("dfc2", {B_, T_, fcWide}, E::F32, ws);
  if (packedResidual_) add("stream", {B_, T_, C_}, E::F32, ws);  // forward's fp32 residual stream
  if (stored_ && !o_.flash) add("attUnpack", {B_, NH_, T_, T_}, E::F32, ws);
  if (o_.dropout) add("ddrop", {B_, T_, C_}, E::F32, ws);   // a branch's gradient through its mask
  if (a_.postNorm) add("dpost", {B_, T_, C_}, E::F32, ws);  // a branch's gradient before its norm
  if (!sites_.empty()) {
    add("loraDU", {N_, o_.lora.r}, E::F32, ws);  // an adapter's gradient of u
    int64_t in = 0;
    for (const auto& st : sites_) in = std::max(in, st.in);
    if (o_.lora.dropout > 0) add("loraX", {N_, in}, E::F32, ws);  // the dropped adapter input
  }
  if (o_.bf16Gemm || o_.nf4) {  // bf16 inputs / output gradients of the block GEMMs
    add("x16", {N_ * widest_}, E::BF16, ws);
    // Also the LM head's logit gradient, a block of rows at a time: at least one row of V.
    add("g16", {std::max(N_ * widest_, V_)}, E::BF16, ws);
  }
  if (o_.nf4)  // an NF4 base weight dequantized for its GEMM (the largest one)
    add("nf4W", {largestWeight()}, E::BF16, ws);
  if (!o_.fp8.empty()) {  // the emulated fp8 GEMM's dequantized operands
    add("fp8X", {N_ * widest_}, E::F32, ws);
    add("fp8G", {N_ * widest_}, E::F32, ws);
    add("fp8W", {largestWeight()}, E::F32, ws);  // the largest weight
    if (o_.fp8 == "blockwise")  // per-tile scales of the operand with the most tiles
      add("fp8TileScales", {std::max(N_ * ceilDiv(widest_, 128), ceilDiv(N_, 128) * widest_)},
          E::F32, ws);
  }
}

// Last, so that the other buffers keep the addresses (and alignment) they had without it.
void SavedStateList::kernelScratch() {
  if (o_.kernelThreads > 0)
    if (const int64_t per = kernelScratchPerThread(a_, o_); per > 0)
      add("kernelScratch", {o_.kernelThreads, per}, E::F32, Cat::Workspace);
}

}  // namespace

std::vector<BufferSpec> savedState(const ArchSpec& a, const SavedStateOptions& o) {
  SavedStateList list(a, o);
  list.inputs();
  for (int s = 0; s < list.sets(); ++s) list.blockSet(s);
  list.checkpoints();
  list.outsideBlocks();
  if (o.forwardOnly)
    list.forwardWorkspace();
  else
    list.backwardWorkspace();
  list.kernelScratch();
  return list.take();
}

}  // namespace ts::core
