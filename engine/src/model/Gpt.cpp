#include "trainscope/engine/model/Gpt.h"

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/plan/ZeroLayout.h"

#include "trainscope/engine/platform/GemmCalibration.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "trainscope/engine/loss/CrossEntropyLoss.h"
#include "trainscope/kernels/Numeric.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Rng::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

bool autoPicksBf16Gemm(const kernels::Backend* backend) {
  if (!backend || !backend->supports(kernels::Op::MatmulBF16) ||
      backend->emulates(kernels::Op::MatmulBF16))
    return false;
  // A GPU with bf16 tensor cores (sm_80 and newer) always gains; a CPU only where its kernel
  // measured faster than sgemm here.
  if (backend->kind() == kernels::DeviceKind::Cuda) {
    const auto f = backend->device().features;
    return std::find(f.begin(), f.end(), "bf16") != f.end();
  }
  return gemmCalibration().choice == "bf16";
}

bool useBf16Gemm(const core::RunConfig& config, const kernels::Backend* backend) {
  const auto& p = config.precision;
  if (p.policy != "bf16" && p.policy != "pure_bf16") return false;
  return p.gemm == "bf16" || (p.gemm == "auto" && autoPicksBf16Gemm(backend));
}

GptConfig gptConfigFrom(const core::RunConfig& config, int vocab, const kernels::Backend* backend) {
  GptConfig g;
  g.architecture = config.model.arch;
  g.kvHeads = config.model.kv_heads;
  g.dFf = config.model.d_ff;
  g.ropeTheta = config.model.rope_theta;
  g.layers = config.model.layers;
  g.heads = config.model.heads;
  g.d_model = config.model.d_model;
  g.seq_len = config.model.seq_len;
  g.vocab = vocab;
  g.relu = config.model.activation == "relu";
  g.flash = config.attention.impl == "flash";
  g.checkpointEvery =
      checkpointSegment(config.memory.checkpointing, config.memory.checkpoint_every, g.layers);
  const auto& comp = config.memory.activation_compression;
  g.compression = comp == "int8"     ? GptConfig::Compression::Int8
                  : comp == "sparse" ? GptConfig::Compression::Sparse
                                     : GptConfig::Compression::None;
  const auto& pol = config.precision.policy;
  g.working = pol == "fp16"                                         ? DType::F16
              : pol == "bf16" || pol == "fp8" || pol == "pure_bf16" ? DType::BF16
                                                                    : DType::F32;
  g.saved = g.working;  // bf16 under fp8 too
  g.masterWeights = pol != "pure_bf16";
  g.bf16Gemm = useBf16Gemm(config, backend);
  const int64_t headDim = g.arch().headDim();
  g.flashBf16 = g.flash && g.working == DType::BF16 && (headDim == 64 || headDim == 128) &&
                backend && backend->supports(kernels::Op::FlashAttentionBf16) &&
                !backend->emulates(kernels::Op::FlashAttentionBf16);
  g.dropout = static_cast<float>(config.model.dropout);
  g.dropoutSeed = static_cast<uint64_t>(config.train.seed);
  g.lora = config.finetune.lora;
  g.nf4Base = config.finetune.base_quant == "nf4";
  g.distill = !config.distill.teacher_checkpoint.empty();
  const auto zl = core::zeroLayoutOf(config.parallel.ranks, config.parallel.zero_stage,
                                     config.optimizer.state_bits);
  g.arenaAlign = zl.align;
  g.arenaPadTo = zl.padTo;
  g.arenaTensorAlign = zl.tensorAlign;
  // (The windows need a backend that gives pages back: the CPU's, CUDA's through VMM.)
  g.gradWindow = core::gradWindowOf(pol, config.parallel.ranks, config.parallel.offload_optimizer,
                                    config.parallel.offload_params);
  g.valueWindow = core::valueWindowOf(pol, config.parallel.ranks, config.parallel.offload_optimizer,
                                      config.parallel.offload_params);
  if (pol == "fp8") {
    const auto& f = config.precision.fp8;
    g.fp8 =
        f.recipe == "blockwise" ? GptConfig::Fp8Recipe::Blockwise : GptConfig::Fp8Recipe::Delayed;
    g.fp8History = f.amax_history;
    g.fp8Margin = f.margin;
    g.fp8GradE4M3 = f.format == "e4m3";
  }
  return g;
}

core::ArchSpec GptConfig::arch() const {
  core::ModelConfig m;
  m.arch = architecture;
  m.kv_heads = kvHeads;
  m.d_ff = dFf;
  m.rope_theta = ropeTheta;
  m.layers = layers;
  m.heads = heads;
  m.d_model = d_model;
  m.seq_len = seq_len;
  m.activation = relu ? "relu" : "gelu";
  return core::archSpecOf(m, vocab);
}

core::SavedStateOptions GptConfig::savedState(int B) const {
  core::SavedStateOptions o;
  o.batch = B;
  o.flash = flash;
  o.compression = compression == Compression::Int8     ? "int8"
                  : compression == Compression::Sparse ? "sparse"
                                                       : "none";
  o.checkpointEvery = checkpointEvery;
  o.bf16Gemm = bf16Gemm;
  o.fp8 = fp8 == Fp8Recipe::Blockwise ? "blockwise" : fp8 == Fp8Recipe::Delayed ? "delayed" : "";
  o.dropout = dropout > 0.f;
  o.lora = lora;
  o.nf4 = nf4Base && (lora.r > 0 || inferenceOnly);
  o.forwardOnly = inferenceOnly;
  o.distill = distill;
  o.saved = saved == DType::BF16  ? core::ElementType::BF16
            : saved == DType::F16 ? core::ElementType::F16
                                  : core::ElementType::F32;
  return o;
}

int checkpointSegment(const std::string& mode, int every, int layers) {
  if (mode == "all") return 1;
  if (mode != "every_k") return 0;
  int k = every > 0 ? every : static_cast<int>(std::lround(std::sqrt(static_cast<double>(layers))));
  return std::clamp(k, 1, std::max(1, layers));
}

Gpt::Gpt(const GptConfig& config, kernels::Backend* backend, MemoryTracker* tracker)
    : config_(config), arch_(config.arch()), backend_(backend), tracker_(tracker) {
  const int64_t C = config.d_model, V = config.vocab, T = config.seq_len;
  if (config.layers < 1 || config.heads < 1 || C < 1 || V < 1 || T < 1 || C % config.heads != 0)
    throw std::invalid_argument("invalid GPT shape (layers, heads, d_model, seq_len, vocab)");
  core::modelFamily(config.architecture);  // throws naming the families there are
  const core::ArchSpec& arch = arch_;
  if (config.heads % arch.kvHeads != 0)
    throw std::invalid_argument("kv_heads " + std::to_string(arch.kvHeads) + " must divide heads " +
                                std::to_string(config.heads));
  if (!arch.learnedPos && arch.headDim() % 2 != 0)  // rotary positions
    throw std::invalid_argument("rotary embeddings need an even head dimension (d_model " +
                                std::to_string(C) + " / heads " + std::to_string(config.heads) +
                                " = " + std::to_string(arch.headDim()) + ")");
  if (config.checkpointEvery < 0 || config.checkpointEvery > config.layers)
    throw std::invalid_argument("checkpoint segment must be 0 (off) or 1..layers");
  if (config.compression == GptConfig::Compression::Sparse && !config.relu)
    throw std::invalid_argument("sparse activation compression needs the relu activation");
  if (!(config.dropout >= 0.f && config.dropout < 1.f))
    throw std::invalid_argument("dropout must be in [0, 1), got " + std::to_string(config.dropout));
  // Sparse packing runs on host pointers (docs/memory.md), so it needs host-addressable memory;
  // int8 packs with backend ops.
  if (config.compression == GptConfig::Compression::Sparse && !backend->hostAccessible())
    throw std::invalid_argument(std::string("sparse activation compression runs on the cpu ") +
                                "backend only (it packs on the host; " + backend->name() +
                                " memory is not host memory); int8 runs on every backend");
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

  // The parameter arena comes from the shared description: names, shapes, storage order, and
  // which tensors train.
  core::FinetuneConfig ft;
  ft.lora = config.lora;
  std::vector<core::TensorSpec> tensors = core::modelTensors(arch_, ft);
  for (const auto& f : config.freeze) {
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
  if (config.inferenceOnly)
    for (auto& t : tensors) t.trainable = false;
  ArenaOptions ao;
  ao.working = config.working;
  ao.align = std::max<int64_t>(1, config.arenaAlign);
  ao.padTo = std::max<int64_t>(1, config.arenaPadTo);
  ao.tensorAlign = std::max<int64_t>(1, config.arenaTensorAlign);
  ao.partitionRanks = config.partitionRanks;
  ao.partitionRank = config.partitionRank;
  ao.partitionValues = config.partitionValues;
  ao.partitionGrads = config.partitionGrads;
  ao.masterWeights = config.masterWeights;
  ao.nf4FrozenLinears = config.nf4Base;
  ao.gradWindow = config.gradWindow;
  ao.valueWindow = config.valueWindow;
  arena_ = ParamArena(std::move(tensors), backend_, tracker_, ao);
  arena_.onWeightsChanged = [this] {
    if (!fp8()) return;
    if (config_.fp8PerBlock)
      std::fill(fp8Stale_.begin(), fp8Stale_.end(), 1);
    else
      quantizeFp8Weights();
  };
  // The layers are wired from the description's slots (core::BlockSlot): which tensors are a
  // block's norms, its packed q|k|v, its output projection, its MLP's up and down projections.
  using R = core::TensorRole;
  using S = core::BlockSlot;
  const auto& params = arena_.params();
  auto find = [&](int block, S slot, R role) -> std::vector<const ParamInfo*> {
    std::vector<const ParamInfo*> out;
    for (const auto& p : params)
      if (p.spec.block == block && p.spec.slot == slot && p.spec.role == role) out.push_back(&p);
    return out;
  };
  auto one = [&](int block, S slot, R role, bool required) -> const ParamInfo* {
    const auto v = find(block, slot, role);
    if (v.size() > 1 || (required && v.empty()))
      throw std::logic_error("model description: block " + std::to_string(block) + " has " +
                             std::to_string(v.size()) + " tensors for one slot");
    return v.empty() ? nullptr : v.front();
  };
  auto maybe = [&](R role) -> const ParamInfo* {
    for (const auto& p : params)
      if (p.spec.role == role) return &p;
    return nullptr;
  };
  // One GEMM multiplies adjacent weights of a slot that share an input (llama's q|k|v and
  // gate|up): a view over them, whose rows are the concatenated weights (adjacent in both
  // buffers).
  // NF4 parts are separate quantized tensors (as bitsandbytes quantizes each module): the view
  // only gives the shape, the linear dequantizes each part into its rows.
  auto weightOf = [&](int block, S slot) -> const ParamInfo* {
    const auto parts = find(block, slot, R::LinearWeight);
    if (parts.empty())
      throw std::logic_error("model description: block " + std::to_string(block) +
                             " has no weight for a projection slot");
    if (parts.size() == 1) return parts.front();
    ParamInfo f = *parts.front();
    f.name = parts.front()->spec.fusedName;
    f.shape = {0, parts.front()->shape[1]};
    f.numel = 0;
    for (const ParamInfo* p : parts) {
      if ((!f.quantized() && p->offset != f.offset + f.numel) || p->shape[1] != f.shape[1] ||
          p->quantized() != f.quantized() || p->trainable() != f.trainable() ||
          (f.trainable() && p->gradOffset != f.gradOffset + f.numel))
        throw std::logic_error("model description: " + p->name + " does not follow " +
                               parts.front()->name + " (or trains differently)");
      f.shape[0] += p->shape[0];
      f.numel += p->numel;
    }
    fused_.push_back(std::move(f));
    return &fused_.back();
  };
  struct Projection {
    const ParamInfo *w, *b;
    std::vector<const ParamInfo*> parts;
  };
  std::vector<Projection> projections;  // 4 per layer: qkv, o, up, down
  std::vector<std::pair<const ParamInfo*, const ParamInfo*>> norms;  // 2 per layer
  for (int l = 0; l < config.layers; ++l) {
    for (S slot : {S::Norm1, S::Norm2})
      norms.push_back({one(l, slot, R::NormWeight, true), one(l, slot, R::NormBias, false)});
    for (S slot : {S::Qkv, S::AttnOut, S::MlpUp, S::MlpDown})
      projections.push_back(
          {weightOf(l, slot), one(l, slot, R::LinearBias, false), find(l, slot, R::LinearWeight)});
  }
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
  if (fp8()) {
    // Each linear's fp8 weight and its dequantization scales (one per 128x128 block, or one
    // per tensor) in two shared buffers.
    int64_t off = 0, scales = 0;
    constexpr int64_t kPage = 4096;  // fp8PerBlock: each block's bytes on pages of their own
    for (size_t i = 0; i < linears_.size(); ++i) {
      auto& lin = linears_[i];
      if (config_.fp8PerBlock && i % 4 == 0) {
        off = (off + kPage - 1) / kPage * kPage;
        fp8Pages_.push_back({off, 0});
      }
      lin.initFp8(off, scales, config_.fp8History, config_.fp8Margin, config_.fp8GradE4M3);
      off += lin.weight().numel;
      scales += lin.fp8ScaleCount();
      if (config_.fp8PerBlock && i % 4 == 3)
        fp8Pages_.back().second = (off + kPage - 1) / kPage * kPage - fp8Pages_.back().first;
    }
    if (config_.fp8PerBlock) off = (off + kPage - 1) / kPage * kPage;
    if (config_.fp8PerBlock) {
      // Per block, made when the block is gathered: no page until then, counted per block
      // (fp8BlockGathered / fp8BlockReleased), every block stale (never made).
      w8_ = Tensor(backend_, nullptr, MemoryCategory::Parameters, DType::I8, {off});
      backend_->discard(w8_.data(), size_t(off));
      fp8Stale_.assign(static_cast<size_t>(config_.layers), 1);
      fp8Present_.assign(static_cast<size_t>(config_.layers), 0);
    } else {
      w8_ = Tensor(backend_, tracker_, MemoryCategory::Parameters, DType::I8, {off});
      w8_.zero();
    }
    w8Scales_ = Tensor(backend_, tracker_, MemoryCategory::Parameters, DType::F32, {scales});
    w8Scales_.zero();
  }
  // LoRA adapters onto their linears: the base weight of the adapted module gives the slot
  // (which linear) and its rows of that linear's output.
  if (config.lora.r > 0) {
    const int slotIndex[] = {-1, 0, 0, 1, -1, 2, 3, -1};  // BlockSlot -> linear within a block
    const float r = static_cast<float>(config.lora.r),
                alpha = static_cast<float>(config.lora.alpha);
    const float scaling = config.lora.use_rslora ? alpha / std::sqrt(r) : alpha / r;
    std::vector<int> count(static_cast<size_t>(config.layers), 0);
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
      for (const ParamInfo* part : find(l, base->spec.slot, R::LinearWeight)) {
        if (part == base) break;
        ad.outOffset += part->shape[0];  // its rows of the linear's output
      }
      ad.scaling = scaling;
      ad.dropout = static_cast<float>(config.lora.dropout);
      ad.layer = l;
      ad.index = count[size_t(l)]++;
      lin.adapters.push_back(ad);
    }
  }
  // The layers, from the description's shape.
  const int dm = static_cast<int>(C);
  AttentionShape as;
  as.dModel = dm;
  as.heads = config.heads;
  as.kvHeads = static_cast<int>(arch.kvHeads);
  as.headDim = static_cast<int>(arch.headDim());
  as.qkvDim = static_cast<int>(arch.qkvDim());
  as.ropeTheta = arch.learnedPos ? 0.0 : arch.ropeTheta;  // no position table: rotary
  as.flash = config.flash;
  as.flashBf16 = config.flash && config.flashBf16 && (as.headDim == 64 || as.headDim == 128);
  const Mlp::Activation act = arch.swiglu   ? Mlp::Activation::SwiGlu
                              : config.relu ? Mlp::Activation::Relu
                                            : Mlp::Activation::Gelu;
  std::vector<Block> blocks;
  for (int l = 0; l < config.layers; ++l) {
    Linear* lin = &linears_[4 * l];
    blocks.emplace_back(l, dm, makeNorm(norms[2 * l].first, norms[2 * l].second, dm),
                        Attention(as, &lin[0], &lin[1]),
                        makeNorm(norms[2 * l + 1].first, norms[2 * l + 1].second, dm),
                        Mlp(dm, static_cast<int>(arch.dFf), act, &lin[2], &lin[3]));
  }
  decoder_.emplace(std::move(blocks), config.checkpointEvery, config.inferenceOnly);
  const ParamInfo* wte = maybe(R::TokenEmbedding);
  // The embedding and the head read the bf16 tables wherever the linears multiply in bf16 (bf16
  // GEMMs, or an NF4 base with bf16 weights: QLoRA's bf16 compute).
  const bool bf16Tables = config_.bf16Gemm || (config_.nf4Base && config_.working == DType::BF16);
  embedding_.emplace(wte, maybe(R::PositionEmbedding), dm, bf16Tables);
  finalNorm_ = makeNorm(one(-1, S::FinalNorm, R::NormWeight, true),
                        one(-1, S::FinalNorm, R::NormBias, false), dm);
  const ParamInfo* lmHead = maybe(R::Head);
  head_.emplace(lmHead ? lmHead : wte, bf16Tables);  // tied: the token table is the head
  tiedHead_ = lmHead == nullptr;
  const auto outer = arena_.outerGroups();  // the embeddings' group, and the final norm's
  embeddingsGroup_ = outer.front();
  lastGroup_ = outer.back();
  compressor_ = ActivationCompressor(
      backend_, tracker_,
      config.compression == GptConfig::Compression::Int8     ? ActivationCompressor::Mode::Int8
      : config.compression == GptConfig::Compression::Sparse ? ActivationCompressor::Mode::Sparse
                                                             : ActivationCompressor::Mode::None);
  ctx_.backend = backend_;
  ctx_.arena = &arena_;
  ctx_.ws = &ws_;
  ctx_.scratch = &scratch_;
  ctx_.compressor = &compressor_;
  ctx_.dropout.p = config.dropout;
  ctx_.dropout.seed = config.dropoutSeed;
}

void Gpt::quantizeFp8Weights() {
  ScopedRange r("fp8_quantize_weights", SpanCategory::Elementwise);
  for (auto& lin : linears_) lin.quantizeFp8Weight();
  std::fill(fp8Stale_.begin(), fp8Stale_.end(), 0);
}

void Gpt::reduceFp8Amaxes(bool grads,
                          const std::function<void(std::vector<double>&)>& maxOverRanks) {
  if (config_.fp8 != GptConfig::Fp8Recipe::Delayed) return;  // blockwise: no histories
  std::vector<double> amax;
  amax.reserve(linears_.size());
  for (const auto& lin : linears_) {
    const Fp8Site& s = lin.fp8Site();
    amax.push_back((grads ? s.g : s.x).last());
  }
  maxOverRanks(amax);
  for (size_t i = 0; i < linears_.size(); ++i) {
    Fp8Site& s = linears_[i].fp8Site();
    (grads ? s.g : s.x).replaceLast(static_cast<float>(amax[i]));
  }
}

void Gpt::fp8BlockGathered(int layer) {
  if (!config_.fp8PerBlock || layer < 0 || layer >= config_.layers) return;
  const size_t l = size_t(layer);
  const bool stale = fp8Stale_[l], absent = config_.fp8PerBlock && !fp8Present_[l];
  if (!stale && !absent) return;
  ScopedRange r("fp8_quantize_weights", SpanCategory::Elementwise);
  if (absent) {
    backend_->commit(static_cast<char*>(w8_.data()) + fp8Pages_[l].first,
                     size_t(fp8Pages_[l].second));
    if (tracker_)
      tracker_->add(core::MemoryTier::Device, MemoryCategory::Parameters, fp8Pages_[l].second);
    fp8Present_[l] = 1;
  }
  for (int j = 0; j < 4; ++j) {
    Linear& lin = linears_[size_t(4 * layer + j)];
    // After an update: a new copy, its amax recorded once. Given back since: the same copy
    // again, at the scale it was made with.
    if (stale || config_.fp8 == GptConfig::Fp8Recipe::Blockwise)
      lin.quantizeFp8Weight();
    else
      lin.quantizeFp8WeightDelayed(lin.fp8Site().wUsed);
  }
  fp8Stale_[l] = 0;
}

void Gpt::fp8BlockReleased(int layer) {
  if (!config_.fp8PerBlock || layer < 0 || layer >= config_.layers) return;
  const size_t l = size_t(layer);
  if (!fp8Present_[l]) return;
  backend_->discard(static_cast<char*>(w8_.data()) + fp8Pages_[l].first,
                    size_t(fp8Pages_[l].second));
  if (tracker_)
    tracker_->remove(core::MemoryTier::Device, MemoryCategory::Parameters, fp8Pages_[l].second);
  fp8Present_[l] = 0;
}

namespace {
uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
nlohmann::json delayedState(const kernels::Fp8DelayedScale& d) {
  nlohmann::json h = nlohmann::json::array();
  for (float a : d.history()) h.push_back(floatBits(a));
  return {{"history", h}, {"position", d.position()}, {"scale", floatBits(d.scale())}};
}
void restoreDelayed(kernels::Fp8DelayedScale& d, const nlohmann::json& j) {
  std::vector<float> h;
  for (const auto& v : j.at("history")) h.push_back(bitsFloat(v.get<uint32_t>()));
  d.restore(std::move(h), j.at("position").get<size_t>(), bitsFloat(j.at("scale").get<uint32_t>()));
}
}  // namespace

nlohmann::json Gpt::fp8State() const {
  nlohmann::json sites = nlohmann::json::array();
  for (const auto& lin : linears_) {
    const Fp8Site& s = lin.fp8Site();
    sites.push_back({{"weight", s.w->name},
                     {"x", delayedState(s.x)},
                     {"w", delayedState(s.wt)},
                     {"g", delayedState(s.g)},
                     {"x_used", floatBits(s.xUsed)},
                     {"g_used", floatBits(s.gUsed)},
                     {"w_used", floatBits(s.wUsed)}});
  }
  return {{"recipe", config_.fp8 == GptConfig::Fp8Recipe::Blockwise ? "blockwise" : "delayed"},
          {"sites", sites}};
}

void Gpt::loadFp8State(const nlohmann::json& state) {
  if (!fp8()) throw std::invalid_argument("fp8 state given to a model without fp8 GEMMs");
  const std::string recipe =
      config_.fp8 == GptConfig::Fp8Recipe::Blockwise ? "blockwise" : "delayed";
  if (state.value("recipe", "") != recipe)
    throw std::invalid_argument("fp8 state is for recipe '" + state.value("recipe", "?") +
                                "', the run uses '" + recipe + "'");
  const auto& sites = state.at("sites");
  if (sites.size() != linears_.size())
    throw std::invalid_argument("fp8 state has " + std::to_string(sites.size()) +
                                " GEMM sites, the model has " + std::to_string(linears_.size()));
  // Validate every site into copies first: a bad entry leaves the model untouched.
  std::vector<Fp8Site> next;
  for (const auto& lin : linears_) next.push_back(lin.fp8Site());
  for (size_t i = 0; i < next.size(); ++i) {
    auto& s = next[i];
    const auto& j = sites[i];
    const std::string where = "fp8 state of " + s.w->name;
    if (j.value("weight", "") != s.w->name)
      throw std::invalid_argument(where + ": saved for '" + j.value("weight", "?") + "'");
    for (auto [key, d] : {std::pair{"x", &s.x}, {"w", &s.wt}, {"g", &s.g}}) {
      try {
        restoreDelayed(*d, j.at(key));
      } catch (const std::exception& e) {
        throw std::invalid_argument(where + ", " + key + " (precision.fp8.amax_history " +
                                    std::to_string(d->historyLength()) + "): " + e.what());
      }
    }
    try {
      s.xUsed = bitsFloat(j.at("x_used").get<uint32_t>());
      s.gUsed = bitsFloat(j.at("g_used").get<uint32_t>());
      s.wUsed = bitsFloat(j.at("w_used").get<uint32_t>());
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(where + ": " + e.what());
    }
    if (!(s.wUsed > 0.f) || !std::isfinite(s.wUsed))
      throw std::invalid_argument(where + ": weight scale is not finite and positive");
  }
  for (size_t i = 0; i < next.size(); ++i) linears_[i].fp8Site() = std::move(next[i]);
  if (config_.fp8 != GptConfig::Fp8Recipe::Delayed) return;  // blockwise: weights are current
  // setWeightsFrom() quantized with (and recorded into) the fresh histories; redo it with the
  // scales the saved fp8 weights had.
  std::fill(fp8Stale_.begin(), fp8Stale_.end(), 0);
  if (config_.fp8PerBlock) {  // made at each gather, at the saved scales
    for (int l = 0; l < config_.layers; ++l) fp8BlockReleased(l);
    return;
  }
  for (auto& lin : linears_) lin.quantizeFp8WeightDelayed(lin.fp8Site().wUsed);
}

void Gpt::initWeights(uint64_t seed) {
  Rng rng(seed);
  // ZeRO-partitioned weights: each tensor is drawn whole (the same stream as one rank) into a
  // buffer of its own and only this rank's part is written.
  const bool part = arena_.partitionedValues();
  std::vector<float> host(part ? 0 : static_cast<size_t>(arena_.size()), 0.f);  // padding: 0
  std::vector<float> one;
  const double std0 = 0.02;
  const double stdResid = 0.02 / std::sqrt(2.0 * config_.layers);
  using R = core::TensorRole;
  std::vector<float> quant;  // an NF4 tensor's values, quantized when drawn
  for (const auto& p : arena_.params()) {
    if (p.quantized()) quant.resize(size_t(p.numel));
    if (part && !p.quantized()) one.resize(size_t(p.numel));
    float* dst = p.quantized() ? quant.data() : part ? one.data() : host.data() + p.offset;
    const R role = p.spec.role;
    if (role == R::LoraA || role == R::LoraB) continue;  // initAdapters, from a stream of its own
    if (role == R::NormWeight) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 1.f;
    } else if (role == R::NormBias || role == R::LinearBias) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 0.f;
    } else {
      const double s = p.spec.residualProjection ? stdResid : std0;
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = static_cast<float>(rng.normal() * s);
    }
    if (p.quantized())
      arena_.setQuantized(p, quant.data());
    else if (part)
      arena_.setOwnedValuesFromHost(dst, p.offset, p.numel);
  }
  if (!part) arena_.setValuesFromHost(host.data());
  if (config_.lora.r > 0)
    initAdapters(seed);  // rounds the weights itself
  else if (part || mixed())
    arena_.roundWeights();  // partitioned: the shard's (and onWeightsChanged)
}

void Gpt::initAdapters(uint64_t seed) {
  Rng rng(seed ^ 0x4C6F5241ull);                 // "LoRA": independent of the base's stream
  const bool part = arena_.partitionedValues();  // as initWeights: this rank's part only
  std::vector<float> host(part ? 0 : static_cast<size_t>(arena_.size())), one;
  if (!part) arena_.valuesToHost(host.data());
  for (const auto& p : arena_.params()) {
    const bool a = p.spec.role == core::TensorRole::LoraA;
    if (!a && p.spec.role != core::TensorRole::LoraB) continue;
    if (part) one.resize(size_t(p.numel));
    float* dst = part ? one.data() : host.data() + p.offset;
    if (a) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape[1]));
      for (int64_t i = 0; i < p.numel; ++i)
        dst[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    } else {
      std::fill(dst, dst + p.numel, 0.f);
    }
    if (part) arena_.setOwnedValuesFromHost(dst, p.offset, p.numel);
  }
  if (part) {
    arena_.roundWeights();
    return;
  }
  arena_.setValuesFromHost(host.data());
  if (mixed()) arena_.roundWeights();
}

std::map<std::string, std::vector<float>> Gpt::mergedWeights() const {
  std::map<std::string, std::vector<float>> out;
  std::vector<float> host(static_cast<size_t>(arena_.size()));
  arena_.valuesToHost(host.data());
  for (const auto& lin : linears_)
    for (const auto& ad : lin.adapters) {
      // The adapted module's own base tensor: rows [outOffset, +rows) of the linear's weight.
      const int64_t IC = lin.in(), R = ad.a->shape[0], rows = ad.b->shape[0];
      const ParamInfo* base = nullptr;
      for (const auto& p : arena_.params())
        if (p.spec.role == core::TensorRole::LinearWeight && p.spec.block == ad.layer &&
            p.spec.module == ad.a->spec.module)
          base = &p;
      std::vector<float> w = arena_.hostValues(*base);  // dequantized when NF4
      const float* A = host.data() + ad.a->offset;
      const float* Bm = host.data() + ad.b->offset;
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < IC; ++i) {
          double s = 0;
          for (int64_t k = 0; k < R; ++k) s += double(Bm[o * R + k]) * A[k * IC + i];
          w[size_t(o * IC + i)] += static_cast<float>(ad.scaling * s);
        }
      out[base->name] = std::move(w);
    }
  return out;
}

namespace {
// Where each buffer of the description lives in the layers' saved-state structs.
using BlockField = Tensor& (*)(BlockActivations&);
// A stored tensor's values under its name, its int8 row scales under name + "Scale".
#define TS_SAVED(name, field)                                                  \
  {name, [](BlockActivations& a) -> Tensor& { return a.field.data; }}, {       \
    name "Scale", [](BlockActivations& a) -> Tensor& { return a.field.scale; } \
  }
const std::map<std::string, BlockField>& blockFields() {
  static const std::map<std::string, BlockField> m = {
      TS_SAVED("input", input),
      TS_SAVED("ln1", attn.in),
      {"ln1Mean", [](BlockActivations& a) -> Tensor& { return a.norm1.mean; }},
      {"ln1Rstd", [](BlockActivations& a) -> Tensor& { return a.norm1.rstd; }},
      TS_SAVED("qkv", attn.qkv),
      TS_SAVED("att", attn.att),
      TS_SAVED("attOut", attn.out),
      TS_SAVED("resid2", resid2),
      TS_SAVED("ln2", mlp.in),
      {"ln2Mean", [](BlockActivations& a) -> Tensor& { return a.norm2.mean; }},
      {"ln2Rstd", [](BlockActivations& a) -> Tensor& { return a.norm2.rstd; }},
      TS_SAVED("fcPre", mlp.pre),
      TS_SAVED("fcAct", mlp.act),
      {"fcMask", [](BlockActivations& a) -> Tensor& { return a.mlp.mask; }},
      {"fcVals", [](BlockActivations& a) -> Tensor& { return a.mlp.vals; }}};
  return m;
}
#undef TS_SAVED
using GlobalField = Tensor& (*)(Activations&);
const std::map<std::string, GlobalField>& globalFields() {
  static const std::map<std::string, GlobalField> m = {
      {"tokens", [](Activations& a) -> Tensor& { return a.tokens; }},
      {"targets", [](Activations& a) -> Tensor& { return a.targets; }},
      {"residOut", [](Activations& a) -> Tensor& { return a.residOut.data; }},
      {"residOutScale", [](Activations& a) -> Tensor& { return a.residOut.scale; }},
      {"lnf", [](Activations& a) -> Tensor& { return a.lnf.data; }},
      {"lnfScale", [](Activations& a) -> Tensor& { return a.lnf.scale; }},
      {"lnfMean", [](Activations& a) -> Tensor& { return a.lnfSaved.mean; }},
      {"lnfRstd", [](Activations& a) -> Tensor& { return a.lnfSaved.rstd; }},
      {"logits", [](Activations& a) -> Tensor& { return a.logits; }},
      {"losses", [](Activations& a) -> Tensor& { return a.losses; }}};
  return m;
}
DType dtypeOf(core::ElementType t) {
  switch (t) {
    case core::ElementType::I32:
      return DType::I32;
    case core::ElementType::I8:
      return DType::I8;
    case core::ElementType::BF16:
      return DType::BF16;
    case core::ElementType::F16:
      return DType::F16;
    default:
      return DType::F32;
  }
}
}  // namespace

void Gpt::allocate(int B) {
  if (B < 1) throw std::invalid_argument("micro-batch must be >= 1");
  acts_ = Activations{};
  if (ws_.kernelScratch.data()) backend_->unbindScratch(ws_.kernelScratch.f32());
  ws_ = Workspace{};
  for (Tensor* t : {&x16_, &g16_, &nf4W_, &fp8X_, &fp8G_, &fp8W_, &fp8TileScales_}) t->reset();
  acts_.B = B;
  acts_.T = config_.seq_len;
  // Every buffer of the shared description, allocated as described (the estimator sums the
  // same list, so the memory plan is exactly what the tracker measures).
  const std::map<std::string, Tensor Workspace::*> wsFields = {
      {"ones", &Workspace::ones},
      {"dres", &Workspace::dres},
      {"dtmp", &Workspace::dtmp},
      {"dqkv", &Workspace::dqkv},
      {"datt", &Workspace::datt},
      {"dfc", &Workspace::dfc},
      {"dfc2", &Workspace::dfc2},
      {"ddrop", &Workspace::ddrop},
      {"loraDU", &Workspace::loraDU},
      {"loraX", &Workspace::loraX},
      {"stream", &Workspace::stream},
      {"attUnpack", &Workspace::attUnpack},
      {"kernelScratch", &Workspace::kernelScratch}};
  const std::map<std::string, Tensor*> scratch = {{"x16", &x16_},
                                                  {"g16", &g16_},
                                                  {"nf4W", &nf4W_},
                                                  {"fp8X", &fp8X_},
                                                  {"fp8G", &fp8G_},
                                                  {"fp8W", &fp8W_},
                                                  {"fp8TileScales", &fp8TileScales_}};
  core::SavedStateOptions so = config_.savedState(B);
  so.kernelThreads = backend_->scratchThreads();
  for (const auto& b : core::savedState(arch_, so)) {
    // Data-dependent buffers (the sparse nonzeros) are sized by each forward.
    Tensor t(backend_, tracker_, b.category, dtypeOf(b.type),
             b.dataDependent ? std::vector<int64_t>{0} : b.shape);
    if (b.set >= 0) {
      if (static_cast<int>(acts_.blocks.size()) <= b.set) acts_.blocks.resize(b.set + 1);
      auto& set = acts_.blocks[b.set];
      if (b.name == "loraU") {  // one per adapter of the block, by index
        if (static_cast<int>(set.lora.size()) <= b.index) set.lora.resize(b.index + 1);
        set.lora[b.index] = std::move(t);
      } else {
        blockFields().at(b.name)(set) = std::move(t);
      }
    } else if (b.name == "checkpoint") {
      acts_.checkpoints.push_back(std::move(t));
    } else if (auto g = globalFields().find(b.name); g != globalFields().end()) {
      g->second(acts_) = std::move(t);
    } else if (auto w = wsFields.find(b.name); w != wsFields.end()) {
      ws_.*(w->second) = std::move(t);
    } else {
      *scratch.at(b.name) = std::move(t);
    }
  }
  scratch_ =
      LinearScratch{&ws_.ones, &x16_,           &g16_,       &nf4W_,     &fp8X_,       &fp8G_,
                    &fp8W_,    &fp8TileScales_, &ws_.loraDU, &ws_.loraX, &ctx_.dropout};
  // Each adapter's saved u lives in the block set its layer uses.
  const int k = config_.checkpointEvery;
  for (auto& lin : linears_)
    for (auto& ad : lin.adapters) {
      const int set = k == 0 ? ad.layer : ad.layer % k;
      ad.u = &acts_.blocks[size_t(set)].lora.at(size_t(ad.index));
    }
  {
    const int64_t N = int64_t(B) * config_.seq_len;
    std::vector<float> ones(static_cast<size_t>(N), 1.f);
    backend_->copyToDevice(ws_.ones.data(), ones.data(), ones.size() * sizeof(float));
  }
  haveLoss_ = false;
  bindKernelScratch();
}

Gpt::~Gpt() {
  if (ws_.kernelScratch.data()) backend_->unbindScratch(ws_.kernelScratch.f32());
}

void Gpt::bindKernelScratch() {
  Tensor& s = ws_.kernelScratch;
  if (s.data()) backend_->bindScratch(s.f32(), s.shape()[1], static_cast<int>(s.shape()[0]));
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss,
                    int64_t* count) {
  if (B < 1 || B > acts_.B || T < 1 || T > config_.seq_len)
    throw std::invalid_argument("forward: batch shape exceeds the allocated activations");
  ScopedRange fr("forward", SpanCategory::Block);
  bindKernelScratch();
  const int C = config_.d_model, V = config_.vocab;
  const int N = B * T;
  ctx_.B = B;
  ctx_.T = T;
  compressor_.resetStats();
  backend_->copyToDevice(acts_.tokens.data(), tokens, sizeof(int32_t) * N);
  float* x0 = decoder_->input(ctx_, acts_);
  // valueWindow: the tensors outside the blocks are upcast only around the ops that read them
  // (a bf16 embedding reads the bf16 tables).
  if (!embedding_->bf16()) arena_.openValues(embeddingsGroup_, false);
  embedding_->forward(ctx_, x0, acts_.tokens.i32());
  arena_.closeValues(embeddingsGroup_);
  if (ctx_.dropout.active()) {
    ScopedRange r("dropout", SpanCategory::Elementwise);
    backend_->dropout(x0, x0, int64_t(N) * C, ctx_.dropout.p, ctx_.dropout.seed,
                      ctx_.dropout.stream(-1, 0));
  }
  // Stored (packed) saved activations: the last block's output stays on the fp32 stream and
  // the final norm's output is computed in dfc2, then both are packed.
  float* resid = compressor_.slot(acts_.residOut, ws_.stream.f32());
  decoder_->forward(ctx_, acts_, resid);
  float* lnf = compressor_.slot(acts_.lnf, ws_.dfc2.f32());
  openHeadValues();
  finalNorm_->forward(ctx_, lnf, acts_.lnfSaved, resid);
  head_->forward(ctx_, acts_.logits.f32(), lnf);
  closeHeadValues();
  compressor_.storeNormInput(acts_.residOut, resid,
                             acts_.lnfSaved.mean.empty() ? nullptr : acts_.lnfSaved.mean.f32(), N,
                             C);
  compressor_.store(acts_.lnf, lnf, N, C, true);
  haveLoss_ = false;
  if (!targets) return 0.0;
  // The loss is not part of the model: cross-entropy over the logits just computed.
  const double sum = CrossEntropyLoss(backend_).forwardBackward(
      acts_.logits, acts_.targets, acts_.losses, targets, N, V, dloss, count);
  haveLoss_ = true;
  return sum;
}

void Gpt::backward() {
  if (!haveLoss_) throw std::logic_error("backward() needs a forward with targets first");
  ScopedRange br("backward", SpanCategory::Block);
  bindKernelScratch();
  const int C = config_.d_model;
  const int64_t n = ctx_.rows() * C;
  float* dres = ws_.dres.f32();
  float* dtmp = ws_.dtmp.f32();
  // dlnf = dlogits W_head; dW_head += dlogits^T lnf (W_head is wte when tied).
  const int64_t N = ctx_.rows();
  // gradWindow: the final norm's and an untied head's fp32 gradients are open for their
  // backward, the embeddings' for theirs; a tied head writes the token table's at the start,
  // so then the embeddings' stay open through the whole backward.
  const size_t embeddings = embeddingsGroup_, last = lastGroup_;
  if (tiedHead_) arena_.openGrads(embeddings);
  arena_.openGrads(last);
  openHeadValues();
  // Under 16-bit storage the final norm's output is not kept: recomputed from the exact
  // residual with forward's kernel, so the head reads what forward computed.
  const float* lnf = nullptr;
  if (acts_.lnf.empty()) {
    if (!acts_.residOut.exact())
      throw std::logic_error("the final norm's output recomputed from a packed input");
    ScopedRange r("norm_recompute", SpanCategory::Elementwise);
    finalNorm_->forward(ctx_, ws_.dfc.f32(), acts_.lnfSaved, acts_.residOut.f32());
    lnf = ws_.dfc.f32();
  } else {
    lnf = compressor_.load(acts_.lnf, ws_.dfc.f32(), N, C);
  }
  head_->backward(ctx_, dtmp, acts_.logits.f32(), lnf);
  ws_.dres.zero();
  const float* lnfMean = acts_.lnfSaved.mean.empty() ? nullptr : acts_.lnfSaved.mean.f32();
  finalNorm_->backward(ctx_, dres, dtmp,
                       compressor_.loadNormInput(acts_.residOut, ws_.dfc.f32(), lnfMean, N, C),
                       acts_.lnfSaved);
  closeHeadValues();
  if (last != embeddings) arena_.closeGrads(last, true);
  decoder_->backward(ctx_, acts_);
  if (ctx_.dropout.active()) {  // through the embeddings' mask, in place (dres is done)
    ScopedRange r("dropout", SpanCategory::Elementwise);
    backend_->dropout(dres, dres, n, ctx_.dropout.p, ctx_.dropout.seed, ctx_.dropout.stream(-1, 0));
  }
  arena_.openGrads(embeddings);
  embedding_->backward(ctx_, dres, acts_.tokens.i32());
  arena_.closeGrads(embeddings, true);
  haveLoss_ = false;
}

void Gpt::logitsRow(int b, int t, float* dst) const {
  const int64_t V = config_.vocab;
  const int64_t row = static_cast<int64_t>(b) * ctx_.T + t;
  backend_->copyToHost(dst, acts_.logits.f32() + row * V, sizeof(float) * V);
}

double Gpt::flopsPerToken(int T) const {
  return 6.0 * static_cast<double>(arena_.numParams()) +
         12.0 * config_.layers * static_cast<double>(config_.d_model) * T;
}

}  // namespace ts::engine
