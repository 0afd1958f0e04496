// The model's construction: validation, the parameter arena from the description, and the
// layers wired from the description's block slots (core::BlockSlot), so no step branches on
// the architecture.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/RotaryTable.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::engine {

using core::MemoryCategory;
using R = core::TensorRole;
using S = core::BlockSlot;

namespace {
// The tensors of one slot of a block in one role (several: adjacent parts one GEMM multiplies).
std::vector<const ParamInfo*> slotTensors(const std::vector<ParamInfo>& params, int block, S slot,
                                          R role) {
  std::vector<const ParamInfo*> out;
  for (const auto& p : params)
    if (p.spec.block == block && p.spec.slot == slot && p.spec.role == role) out.push_back(&p);
  return out;
}
// The one tensor of a slot in a role (null when absent and not required).
const ParamInfo* slotTensor(const std::vector<ParamInfo>& params, int block, S slot, R role,
                            bool required) {
  const auto v = slotTensors(params, block, slot, role);
  if (v.size() > 1 || (required && v.empty()))
    throw std::logic_error("model description: block " + std::to_string(block) + " has " +
                           std::to_string(v.size()) + " tensors for one slot");
  return v.empty() ? nullptr : v.front();
}
// The first tensor in a role (null when the architecture has none).
const ParamInfo* firstOfRole(const std::vector<ParamInfo>& params, R role) {
  for (const auto& p : params)
    if (p.spec.role == role) return &p;
  return nullptr;
}
}  // namespace

Gpt::Gpt(const GptConfig& config, kernels::Backend* backend, MemoryTracker* tracker)
    : config_(config), arch_(config.arch()), backend_(backend), tracker_(tracker) {
  validateConfig();
  buildArena(parameterTensors());
  buildLinears();
  if (fp8()) buildFp8Weights();
  if (config_.lora.r > 0) attachAdapters();
  buildBlocks();
  buildOuterLayers();
  buildContext();
}

void Gpt::validateConfig() const {
  const GptConfig& config = config_;
  const int64_t C = config.d_model, V = config.vocab, T = config.seq_len;
  if (config.layers < 1 || config.heads < 1 || C < 1 || V < 1 || T < 1 ||
      (arch_.headDimSet == 0 && C % config.heads != 0))
    throw std::invalid_argument("invalid GPT shape (layers, heads, d_model, seq_len, vocab)");
  core::modelFamily(config.architecture);  // throws naming the families there are
  const core::ArchSpec& arch = arch_;
  if (config.heads % arch.kvHeads != 0)
    throw std::invalid_argument("kv_heads " + std::to_string(arch.kvHeads) + " must divide heads " +
                                std::to_string(config.heads));
  if (!arch.learnedPos && (arch.headDim() % 2 != 0 || arch.rotaryDim() < 2))  // rotary
    throw std::invalid_argument("rotary embeddings need an even head dimension (" +
                                (arch.headDimSet > 0
                                     ? "head_dim " + std::to_string(arch.headDim())
                                     : "d_model " + std::to_string(C) + " / heads " +
                                           std::to_string(config.heads) + " = " +
                                           std::to_string(arch.headDim())) +
                                ", " + std::to_string(arch.rotaryDim()) + " of them rotated)");

  if (config.checkpointEvery < 0 || config.checkpointEvery > config.layers)
    throw std::invalid_argument("checkpoint segment must be 0 (off) or 1..layers");
  if (config.compression == GptConfig::Compression::Sparse && !config.relu)
    throw std::invalid_argument("sparse activation compression needs the relu activation");
  if (!(config.dropout >= 0.f && config.dropout < 1.f))
    throw std::invalid_argument("dropout must be in [0, 1), got " + std::to_string(config.dropout));
  // Sparse packing runs on host pointers (docs/memory.md), so it needs host-addressable memory;
  // int8 packs with backend ops.
  if (config.compression == GptConfig::Compression::Sparse && !backend_->hostAccessible())
    throw std::invalid_argument(std::string("sparse activation compression runs on the cpu ") +
                                "backend only (it packs on the host; " + backend_->name() +
                                " memory is not host memory); int8 runs on every backend");
  validatePrecision();
}

void Gpt::validatePrecision() const {
  if (config_.bf16Gemm && (config_.working != DType::BF16 || fp8()))
    throw std::invalid_argument("bf16 GEMMs need bf16 working weights (policy bf16 or pure_bf16)");
  if (config_.bf16Gemm && !backend_->supports(kernels::Op::MatmulBF16))
    throw std::invalid_argument("the " + backend_->name() + " backend has no bf16 GEMM");
  if (fp8() && config_.working != DType::BF16)
    throw std::invalid_argument("fp8 GEMMs need bf16 working weights");
  if (config_.nf4Base && config_.lora.r <= 0 && !config_.inferenceOnly)
    throw std::invalid_argument("an NF4 base is frozen: it needs LoRA adapters (finetune.lora.r)");
  if (config_.nf4Base && fp8())
    throw std::invalid_argument("an NF4 base multiplies in bf16: it does not combine with fp8");
  if (config_.nf4Base &&
      !(backend_->supports(kernels::Op::Nf4) && backend_->supports(kernels::Op::MatmulBF16)))
    throw std::invalid_argument("the " + backend_->name() +
                                " backend has no NF4 dequantization or bf16 GEMM");
}

std::vector<core::TensorSpec> Gpt::parameterTensors() const {
  // The parameter arena comes from the shared description: names, shapes, storage order, and
  // which tensors train.
  core::FinetuneConfig ft;
  ft.lora = config_.lora;
  std::vector<core::TensorSpec> tensors = core::modelTensors(arch_, ft);
  for (const auto& f : config_.freeze) {
    bool any = false;
    for (auto& t : tensors) {
      const bool prefix = !f.empty() && f.back() == '.';
      if (t.name == f || (prefix && t.name.rfind(f, 0) == 0)) {
        t.trainable = false;
        any = true;
      }
    }
    if (!any) throw std::invalid_argument("freeze: no parameter is named '" + f + "'");
  }
  if (config_.inferenceOnly)
    for (auto& t : tensors) t.trainable = false;
  return tensors;
}

void Gpt::buildArena(std::vector<core::TensorSpec> tensors) {
  ArenaOptions ao;
  ao.working = config_.working;
  ao.align = std::max<int64_t>(1, config_.arenaAlign);
  ao.padTo = std::max<int64_t>(1, config_.arenaPadTo);
  ao.tensorAlign = std::max<int64_t>(1, config_.arenaTensorAlign);
  ao.partitionRanks = config_.partitionRanks;
  ao.partitionRank = config_.partitionRank;
  ao.partitionValues = config_.partitionValues;
  ao.partitionGrads = config_.partitionGrads;
  ao.masterWeights = config_.masterWeights;
  ao.nf4FrozenLinears = config_.nf4Base;
  ao.gradWindow = config_.gradWindow;
  ao.valueWindow = config_.valueWindow;
  arena_ = ParamArena(std::move(tensors), backend_, tracker_, ao);
  arena_.onWeightsChanged = [this] {
    if (!fp8()) return;
    if (config_.fp8PerBlock)
      std::fill(fp8Stale_.begin(), fp8Stale_.end(), 1);
    else
      quantizeFp8Weights();
  };
}

const ParamInfo* Gpt::projectionWeight(int block, core::BlockSlot slot, core::TensorRole role) {
  // One GEMM multiplies adjacent weights of a slot that share an input (llama's q|k|v and
  // gate|up): a view over them, whose rows are the concatenated weights (adjacent in both
  // buffers).
  // NF4 parts are separate quantized tensors (as bitsandbytes quantizes each module): the view
  // only gives the shape, the linear dequantizes each part into its rows.
  // Biases of fused parts (Qwen2's q|k|v) are adjacent too: one bias of the fused output.
  const auto parts = slotTensors(arena_.params(), block, slot, role);
  if (parts.empty()) {
    if (role == R::LinearBias) return nullptr;
    throw std::logic_error("model description: block " + std::to_string(block) +
                           " has no weight for a projection slot");
  }
  if (parts.size() == 1) return parts.front();
  const bool bias = role == R::LinearBias;
  ParamInfo f = *parts.front();
  f.name = bias ? parts.front()->name + " (fused)" : parts.front()->spec.fusedName;
  f.shape = bias ? std::vector<int64_t>{0} : std::vector<int64_t>{0, parts.front()->shape[1]};
  f.numel = 0;
  for (const ParamInfo* p : parts) {
    if ((!f.quantized() && p->offset != f.offset + f.numel) ||
        (!bias && p->shape[1] != f.shape[1]) || p->quantized() != f.quantized() ||
        p->trainable() != f.trainable() ||
        (f.trainable() && p->gradOffset != f.gradOffset + f.numel))
      throw std::logic_error("model description: " + p->name + " does not follow " +
                             parts.front()->name + " (or trains differently)");
    f.shape[0] += p->shape[0];
    f.numel += p->numel;
  }
  fused_.push_back(std::move(f));
  return &fused_.back();
}

void Gpt::buildLinears() {
  // The four projections of every block, from its slots: q|k|v, the attention output, the
  // MLP's up and down projections.
  struct Projection {
    const ParamInfo *w, *b;
    std::vector<const ParamInfo*> parts;
  };
  const auto& params = arena_.params();
  std::vector<Projection> projections;  // 4 per layer: qkv, o, up, down
  for (int l = 0; l < config_.layers; ++l)
    for (S slot : {S::Qkv, S::AttnOut, S::MlpUp, S::MlpDown})
      projections.push_back({projectionWeight(l, slot, R::LinearWeight),
                             projectionWeight(l, slot, R::LinearBias),
                             slotTensors(params, l, slot, R::LinearWeight)});
  storage_ = ParamStorage{&arena_.values(), &arena_.grads(), &arena_.values16(), &w8_,
                          &w8Scales_,       &arena_};
  const Linear::Format format = config_.fp8 == GptConfig::Fp8Recipe::Blockwise
                                    ? Linear::Format::Fp8Blockwise
                                : fp8()            ? Linear::Format::Fp8Delayed
                                : config_.bf16Gemm ? Linear::Format::Bf16Gemm
                                                   : Linear::Format::F32;
  linears_.reserve(projections.size());  // the layers keep pointers into it
  for (const auto& [w, b, parts] : projections) {
    linears_.emplace_back(backend_, &storage_, w, b, format);
    if (w->quantized()) linears_.back().setNf4Parts(parts);
  }
}

void Gpt::attachAdapters() {
  // LoRA adapters onto their linears: the base weight of the adapted module gives the slot
  // (which linear) and its rows of that linear's output.
  const auto& params = arena_.params();
  // BlockSlot -> linear within a block
  const int slotIndex[] = {-1, 0, 0, 1, -1, 2, 3, -1, -1, -1, -1, -1};
  const float r = static_cast<float>(config_.lora.r),
              alpha = static_cast<float>(config_.lora.alpha);
  const float scaling = config_.lora.use_rslora ? alpha / std::sqrt(r) : alpha / r;
  std::vector<int> count(static_cast<size_t>(config_.layers), 0);
  for (const auto& pa : params) {
    if (pa.spec.role != R::LoraA) continue;
    const int l = pa.spec.block;
    const ParamInfo *pb = nullptr, *base = nullptr;
    for (const auto& q : params)
      if (q.spec.block == l && q.spec.module == pa.spec.module) {
        if (q.spec.role == R::LoraB) pb = &q;
        if (q.spec.role == R::LinearWeight) base = &q;
      }
    if (!pb || !base || slotIndex[static_cast<int>(base->spec.slot)] < 0)
      throw std::logic_error("model description: adapter " + pa.name + " has no base or B");
    Linear& lin = linears_[size_t(4 * l + slotIndex[static_cast<int>(base->spec.slot)])];
    LoraAdapter ad;
    ad.a = &pa;
    ad.b = pb;
    for (const ParamInfo* part : slotTensors(params, l, base->spec.slot, R::LinearWeight)) {
      if (part == base) break;
      ad.outOffset += part->shape[0];  // its rows of the linear's output
    }
    ad.scaling = scaling;
    ad.dropout = static_cast<float>(config_.lora.dropout);
    ad.layer = l;
    ad.index = count[size_t(l)]++;
    lin.adapters.push_back(ad);
  }
}

void Gpt::buildBlocks() {
  // The layers, from the description's shape; each block's norms from its slots.
  const core::ArchSpec& arch = arch_;
  const auto& params = arena_.params();
  const int dm = config_.d_model;
  AttentionShape as;
  as.dModel = dm;
  as.heads = config_.heads;
  as.kvHeads = static_cast<int>(arch.kvHeads);
  as.headDim = static_cast<int>(arch.headDim());
  as.qkvDim = static_cast<int>(arch.qkvDim());
  as.rotaryDim = static_cast<int>(arch.rotaryDim());  // no position table: rotary
  as.flash = config_.flash;
  as.flashBf16 = config_.flash && config_.flashBf16 && (as.headDim == 64 || as.headDim == 128);
  as.options.scale = static_cast<float>(arch.attnScale());
  as.options.softcap = static_cast<float>(arch.attnSoftcap);
  as.qkNormPerHead = arch.qkNorm == core::ArchSpec::QkNorm::PerHead;
  const float eps = static_cast<float>(arch.normEps), offset = arch.normOffset;
  as.normEps = eps;
  as.normOffset = offset;
  const Mlp::Activation act = arch.geglu     ? Mlp::Activation::GeGlu
                              : arch.swiglu  ? Mlp::Activation::SwiGlu
                              : config_.relu ? Mlp::Activation::Relu
                                             : Mlp::Activation::Gelu;
  // A block without norms before its branches (OLMo 2) gets identities there.
  auto norm = [&](int l, S slot) {
    return makeNorm(slotTensor(params, l, slot, R::NormWeight, arch.preNorm),
                    slotTensor(params, l, slot, R::NormBias, false), dm, eps, offset);
  };
  auto postNorm = [&](int l, S slot) -> std::unique_ptr<RMSNorm> {
    const ParamInfo* w = slotTensor(params, l, slot, R::NormWeight, false);
    return w ? std::make_unique<RMSNorm>(w, dm, eps, offset) : nullptr;
  };
  std::vector<Block> blocks;
  for (int l = 0; l < config_.layers; ++l) {
    Linear* lin = &linears_[4 * l];
    AttentionShape layer = as;
    layer.options.window = arch.slidingLayer(l) ? static_cast<int>(arch.slidingWindow) : 0;
    layer.localRope = arch.slidingLayer(l) && core::separateLocalRotary(arch);
    layer.qNorm = slotTensor(params, l, S::QNorm, R::NormWeight, false);
    layer.kNorm = slotTensor(params, l, S::KNorm, R::NormWeight, false);
    blocks.emplace_back(l, dm, norm(l, S::Norm1), Attention(layer, &lin[0], &lin[1]),
                        norm(l, S::Norm2),
                        Mlp(dm, static_cast<int>(arch.dFf), act, &lin[2], &lin[3]),
                        PostNorms{postNorm(l, S::PostAttnNorm), postNorm(l, S::PostMlpNorm)});
  }
  decoder_.emplace(std::move(blocks), config_.checkpointEvery, config_.inferenceOnly);
}

void Gpt::buildOuterLayers() {
  const auto& params = arena_.params();
  const int dm = config_.d_model;
  const ParamInfo* wte = firstOfRole(params, R::TokenEmbedding);
  // The embedding and the head read the bf16 tables wherever the linears multiply in bf16 (bf16
  // GEMMs, or an NF4 base with bf16 weights: QLoRA's bf16 compute).
  const bool bf16Tables = config_.bf16Gemm || (config_.nf4Base && config_.working == DType::BF16);
  embedding_.emplace(wte, firstOfRole(params, R::PositionEmbedding), dm, bf16Tables);
  finalNorm_ = makeNorm(slotTensor(params, -1, S::FinalNorm, R::NormWeight, true),
                        slotTensor(params, -1, S::FinalNorm, R::NormBias, false), dm,
                        static_cast<float>(arch_.normEps), arch_.normOffset);
  // Gemma: sqrt(d_model) in the compute dtype (transformers rounds the normalizer to it).
  if (arch_.embedScale) {
    const float s = std::sqrt(static_cast<float>(dm));
    embedScale_ = config_.working == DType::BF16  ? kernels::bf16ToFloat(kernels::floatToBf16(s))
                  : config_.working == DType::F16 ? kernels::fp16ToFloat(kernels::floatToFp16(s))
                                                  : s;
  }
  const ParamInfo* lmHead = firstOfRole(params, R::Head);
  head_.emplace(lmHead ? lmHead : wte, bf16Tables);  // tied: the token table is the head
  tiedHead_ = lmHead == nullptr;
  const auto outer = arena_.outerGroups();  // the embeddings' group, and the final norm's
  embeddingsGroup_ = outer.front();
  lastGroup_ = outer.back();
}

void Gpt::buildContext() {
  compressor_ = ActivationCompressor(
      backend_, tracker_,
      config_.compression == GptConfig::Compression::Int8     ? ActivationCompressor::Mode::Int8
      : config_.compression == GptConfig::Compression::Sparse ? ActivationCompressor::Mode::Sparse
                                                              : ActivationCompressor::Mode::None);
  ctx_.backend = backend_;
  ctx_.arena = &arena_;
  ctx_.ws = &ws_;
  ctx_.scratch = &scratch_;
  ctx_.compressor = &compressor_;
  ctx_.dropout.p = config_.dropout;
  ctx_.dropout.seed = config_.dropoutSeed;
}

}  // namespace ts::engine
