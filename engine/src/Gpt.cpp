#include "trainscope/engine/Gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "trainscope/engine/CrossEntropyLoss.h"
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
  if (!backend || backend->kind() != kernels::DeviceKind::Cpu ||  // bf16 policies: CPU only
      !backend->supports(kernels::Op::MatmulBF16) || backend->emulates(kernels::Op::MatmulBF16))
    return false;
  const auto f = backend->device().features;
  return std::find(f.begin(), f.end(), "amx_bf16") != f.end();
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
  g.masterWeights = pol != "pure_bf16";
  g.bf16Gemm = useBf16Gemm(config, backend);
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
  if (config.architecture != "gpt2" && config.architecture != "llama")
    throw std::invalid_argument("unknown architecture '" + config.architecture +
                                "' (gpt2 or llama)");
  const core::ArchSpec& arch = arch_;
  if (config.heads % arch.kvHeads != 0)
    throw std::invalid_argument("kv_heads " + std::to_string(arch.kvHeads) + " must divide heads " +
                                std::to_string(config.heads));
  if (config.architecture == "llama" && arch.headDim() % 2 != 0)
    throw std::invalid_argument("rotary embeddings need an even head dimension (d_model " +
                                std::to_string(C) + " / heads " + std::to_string(config.heads) +
                                " = " + std::to_string(arch.headDim()) + ")");
  if (config.checkpointEvery < 0 || config.checkpointEvery > config.layers)
    throw std::invalid_argument("checkpoint segment must be 0 (off) or 1..layers");
  if (config.compression == GptConfig::Compression::Sparse && !config.relu)
    throw std::invalid_argument("sparse activation compression needs the relu activation");
  // Packing runs on host pointers (CPU only, docs/memory.md), so it needs host-addressable memory.
  if (config.compression != GptConfig::Compression::None && !backend->hostAccessible())
    throw std::invalid_argument(std::string("activation compression runs on the cpu backend ") +
                                "only (it packs on the host; " + backend->name() +
                                " memory is not host memory)");
  // The parameter table comes from the shared description: names, shapes, storage order.
  int64_t offset = 0;
  for (auto& t : core::modelTensors(arch_)) {
    ParamInfo p;
    p.name = t.name;
    p.shape = t.shape;
    p.numel = t.numel();
    p.decay = t.decay();
    p.offset = offset;
    p.spec = std::move(t);
    offset += p.numel;
    params_.push_back(std::move(p));
  }
  numParams_ = offset;
  // Pointers into params_ are stable from here on (no more push_back).
  auto tensor = [&](int block, const std::string& module, core::TensorRole role) {
    for (const auto& p : params_)
      if (p.spec.block == block && p.spec.module == module && p.spec.role == role) return &p;
    throw std::logic_error("model description has no " + module + " tensor for block " +
                           std::to_string(block));
  };
  using R = core::TensorRole;
  for (const auto& p : params_) {
    if (p.spec.role == R::TokenEmbedding) wte_ = &p;
    if (p.spec.role == R::PositionEmbedding) wpe_ = &p;
  }
  // One GEMM multiplies adjacent tensors that share an input (llama's q|k|v and gate|up): a
  // view over them, whose rows are the concatenated weights.
  auto fuse = [&](std::vector<const ParamInfo*> parts, const std::string& name) {
    ParamInfo f = *parts.front();
    f.name = name;
    f.shape = {0, parts.front()->shape[1]};
    f.numel = 0;
    for (const ParamInfo* p : parts) {
      if (p->offset != f.offset + f.numel || p->shape[1] != f.shape[1])
        throw std::logic_error("model description: " + p->name + " does not follow " +
                               parts.front()->name);
      f.shape[0] += p->shape[0];
      f.numel += p->numel;
    }
    fused_.push_back(std::move(f));
    return &fused_.back();
  };
  std::vector<std::pair<const ParamInfo*, const ParamInfo*>> projections;  // weight, bias
  const bool llama = config.architecture == "llama";
  for (int l = 0; l < config.layers; ++l) {
    if (llama) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      blockParams_.push_back({tensor(l, "input_layernorm", R::NormWeight), nullptr,
                              tensor(l, "post_attention_layernorm", R::NormWeight), nullptr});
      projections.push_back(
          {fuse({tensor(l, "q_proj", R::LinearWeight), tensor(l, "k_proj", R::LinearWeight),
                 tensor(l, "v_proj", R::LinearWeight)},
                h + "self_attn.qkv_proj.weight"),
           nullptr});
      projections.push_back({tensor(l, "o_proj", R::LinearWeight), nullptr});
      projections.push_back(
          {fuse({tensor(l, "gate_proj", R::LinearWeight), tensor(l, "up_proj", R::LinearWeight)},
                h + "mlp.gate_up_proj.weight"),
           nullptr});
      projections.push_back({tensor(l, "down_proj", R::LinearWeight), nullptr});
    } else {
      blockParams_.push_back({tensor(l, "ln_1", R::NormWeight), tensor(l, "ln_1", R::NormBias),
                              tensor(l, "ln_2", R::NormWeight), tensor(l, "ln_2", R::NormBias)});
      for (const char* m : {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"})
        projections.push_back({tensor(l, m, R::LinearWeight), tensor(l, m, R::LinearBias)});
    }
  }
  lnfw_ = tensor(-1, llama ? "norm" : "ln_f", R::NormWeight);
  lnfb_ = llama ? nullptr : tensor(-1, "ln_f", R::NormBias);
  head_ = wte_;
  for (const auto& p : params_)
    if (p.spec.role == R::Head) head_ = &p;
  if (mixed()) {
    if (config_.working != DType::BF16 && config_.working != DType::F16)
      throw std::invalid_argument("working precision must be fp32, bf16 or fp16");
    if (backend_->kind() != kernels::DeviceKind::Cpu)
      throw std::invalid_argument("bf16/fp16 working precision runs on the cpu backend only");
    param16_ =
        Tensor(backend_, tracker_, MemoryCategory::Parameters, config_.working, {numParams_});
    grad16_ = Tensor(backend_, tracker_, MemoryCategory::Gradients, config_.working, {numParams_});
    param16_.zero();
    grad16_.zero();
  }
  if (config_.bf16Gemm && (config_.working != DType::BF16 || fp8()))
    throw std::invalid_argument("bf16 GEMMs need bf16 working weights (policy bf16 or pure_bf16)");
  if (config_.bf16Gemm && !backend_->supports(kernels::Op::MatmulBF16))
    throw std::invalid_argument("the " + backend_->name() + " backend has no bf16 GEMM");
  // In 16-bit mode these are the fp32 compute copies (workspace), see GptConfig::working.
  const auto pc = mixed() ? MemoryCategory::Workspace : MemoryCategory::Parameters;
  const auto gc = mixed() ? MemoryCategory::Workspace : MemoryCategory::Gradients;
  paramBuf_ = Tensor(backend_, tracker_, pc, DType::F32, {numParams_});
  gradBuf_ = Tensor(backend_, tracker_, gc, DType::F32, {numParams_});
  paramBuf_.zero();
  gradBuf_.zero();
  if (fp8() && config_.working != DType::BF16)
    throw std::invalid_argument("fp8 GEMMs need bf16 working weights");
  storage_ = ParamStorage{&paramBuf_, &gradBuf_, &param16_, &w8_, &w8Scales_};
  const Linear::Format format = config_.fp8 == GptConfig::Fp8Recipe::Blockwise
                                    ? Linear::Format::Fp8Blockwise
                                : fp8()            ? Linear::Format::Fp8Delayed
                                : config_.bf16Gemm ? Linear::Format::Bf16Gemm
                                                   : Linear::Format::F32;
  for (auto [w, b] : projections) linears_.emplace_back(backend_, &storage_, w, b, format);
  if (fp8()) {
    // Each linear's fp8 weight and its dequantization scales (one per 128x128 block, or one
    // per tensor) in two shared buffers.
    int64_t off = 0, scales = 0;
    for (auto& lin : linears_) {
      lin.initFp8(off, scales, config_.fp8History, config_.fp8Margin, config_.fp8GradE4M3);
      off += lin.weight().numel;
      scales += lin.fp8ScaleCount();
    }
    w8_ = Tensor(backend_, tracker_, MemoryCategory::Parameters, DType::I8, {off});
    w8_.zero();
    w8Scales_ = Tensor(backend_, tracker_, MemoryCategory::Parameters, DType::F32, {scales});
    w8Scales_.zero();
  }
}

namespace {
void roundTrip(kernels::Backend& be, DType dt, float* f32, uint16_t* h, int64_t n) {
  if (dt == DType::BF16) {
    be.floatToBf16(f32, h, n);
    be.bf16ToFloat(h, f32, n);
  } else {
    be.floatToFp16(f32, h, n);
    be.fp16ToFloat(h, f32, n);
  }
}
}  // namespace

void Gpt::setWeightsFrom(const float* master) {
  if (master != paramBuf_.f32())
    backend_->copyOnDevice(paramBuf_.data(), master, numParams_ * int64_t(sizeof(float)));
  if (!mixed()) return;
  roundTrip(*backend_, config_.working, paramBuf_.f32(), static_cast<uint16_t*>(param16_.data()),
            numParams_);
  if (fp8()) quantizeFp8Weights();
}

void Gpt::quantizeFp8Weights() {
  ScopedRange r("fp8_quantize_weights", SpanCategory::Elementwise);
  for (auto& lin : linears_) lin.quantizeFp8Weight();
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
  for (auto& lin : linears_) lin.quantizeFp8WeightDelayed(lin.fp8Site().wUsed);
}

void Gpt::roundGrads() {
  if (!mixed()) return;
  roundTrip(*backend_, config_.working, gradBuf_.f32(), static_cast<uint16_t*>(grad16_.data()),
            numParams_);
}

const ParamInfo* Gpt::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void Gpt::initWeights(uint64_t seed) {
  Rng rng(seed);
  std::vector<float> host(static_cast<size_t>(numParams_));
  const double std0 = 0.02;
  const double stdResid = 0.02 / std::sqrt(2.0 * config_.layers);
  using R = core::TensorRole;
  for (const auto& p : params_) {
    float* dst = host.data() + p.offset;
    const R role = p.spec.role;
    if (role == R::NormWeight) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 1.f;
    } else if (role == R::NormBias || role == R::LinearBias) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 0.f;
    } else {
      const double s = p.spec.residualProjection ? stdResid : std0;
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = static_cast<float>(rng.normal() * s);
    }
  }
  backend_->copyToDevice(paramBuf_.data(), host.data(), host.size() * sizeof(float));
  if (mixed()) setWeightsFrom(paramBuf_.f32());
}

void Gpt::zeroGrad() {
  gradBuf_.zero();
}

namespace {
// Where each buffer of the description lives in the engine's structs.
const std::map<std::string, Tensor BlockActivations::*>& blockFields() {
  static const std::map<std::string, Tensor BlockActivations::*> m = {
      {"input", &BlockActivations::input},
      {"ln1", &BlockActivations::ln1},
      {"ln1Mean", &BlockActivations::ln1Mean},
      {"ln1Rstd", &BlockActivations::ln1Rstd},
      {"qkv", &BlockActivations::qkv},
      {"att", &BlockActivations::att},
      {"attOut", &BlockActivations::attOut},
      {"resid2", &BlockActivations::resid2},
      {"ln2", &BlockActivations::ln2},
      {"ln2Mean", &BlockActivations::ln2Mean},
      {"ln2Rstd", &BlockActivations::ln2Rstd},
      {"fcPre", &BlockActivations::fcPre},
      {"fcAct", &BlockActivations::fcAct},
      {"ln1Q", &BlockActivations::ln1Q},
      {"attOutQ", &BlockActivations::attOutQ},
      {"ln2Q", &BlockActivations::ln2Q},
      {"fcActQ", &BlockActivations::fcActQ},
      {"ln1Scale", &BlockActivations::ln1Scale},
      {"attOutScale", &BlockActivations::attOutScale},
      {"ln2Scale", &BlockActivations::ln2Scale},
      {"fcActScale", &BlockActivations::fcActScale},
      {"fcMask", &BlockActivations::fcMask},
      {"fcVals", &BlockActivations::fcVals}};
  return m;
}
const std::map<std::string, Tensor Activations::*>& globalFields() {
  static const std::map<std::string, Tensor Activations::*> m = {
      {"tokens", &Activations::tokens},     {"targets", &Activations::targets},
      {"residOut", &Activations::residOut}, {"lnf", &Activations::lnf},
      {"lnfMean", &Activations::lnfMean},   {"lnfRstd", &Activations::lnfRstd},
      {"logits", &Activations::logits},     {"losses", &Activations::losses}};
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
    default:
      return DType::F32;
  }
}
}  // namespace

void Gpt::allocate(int B) {
  if (B < 1) throw std::invalid_argument("micro-batch must be >= 1");
  acts_ = Activations{};
  ws_ = Workspace{};
  for (Tensor* t : {&x16_, &g16_, &fp8X_, &fp8G_, &fp8W_, &fp8TileScales_}) t->reset();
  acts_.B = B;
  acts_.T = config_.seq_len;
  // Every buffer of the shared description, allocated as described (the estimator sums the
  // same list, so the memory plan is exactly what the tracker measures).
  const std::map<std::string, Tensor Workspace::*> wsFields = {
      {"ones", &Workspace::ones}, {"dres", &Workspace::dres}, {"dtmp", &Workspace::dtmp},
      {"dqkv", &Workspace::dqkv}, {"datt", &Workspace::datt}, {"dfc", &Workspace::dfc},
      {"dfc2", &Workspace::dfc2}};
  const std::map<std::string, Tensor*> scratch = {
      {"x16", &x16_},   {"g16", &g16_},   {"fp8X", &fp8X_},
      {"fp8G", &fp8G_}, {"fp8W", &fp8W_}, {"fp8TileScales", &fp8TileScales_}};
  for (const auto& b : core::savedState(arch_, config_.savedState(B))) {
    // Data-dependent buffers (the sparse nonzeros) are sized by each forward.
    Tensor t(backend_, tracker_, b.category, dtypeOf(b.type),
             b.dataDependent ? std::vector<int64_t>{0} : b.shape);
    if (b.set >= 0) {
      if (static_cast<int>(acts_.blocks.size()) <= b.set) acts_.blocks.resize(b.set + 1);
      acts_.blocks[b.set].*blockFields().at(b.name) = std::move(t);
    } else if (b.name == "checkpoint") {
      acts_.checkpoints.push_back(std::move(t));
    } else if (auto g = globalFields().find(b.name); g != globalFields().end()) {
      acts_.*(g->second) = std::move(t);
    } else if (auto w = wsFields.find(b.name); w != wsFields.end()) {
      ws_.*(w->second) = std::move(t);
    } else {
      *scratch.at(b.name) = std::move(t);
    }
  }
  scratch_ = LinearScratch{&ws_.ones, &x16_, &g16_, &fp8X_, &fp8G_, &fp8W_, &fp8TileScales_};
  {
    const int64_t N = int64_t(B) * config_.seq_len;
    std::vector<float> ones(static_cast<size_t>(N), 1.f);
    backend_->copyToDevice(ws_.ones.data(), ones.data(), ones.size() * sizeof(float));
  }
  haveLoss_ = false;
}

void Gpt::quantizeRows(Tensor& q, Tensor& scale, const float* x, int64_t rows, int64_t cols,
                       bool count) {
  ScopedRange r("int8_pack", SpanCategory::Elementwise);
  int8_t* qd = static_cast<int8_t*>(q.data());
  float* sd = scale.f32();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    float amax = 0.f;
    for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(xr[j]));
    const float s = amax / 127.f;
    sd[i] = s;
    const float inv = s > 0.f ? 1.f / s : 0.f;
    for (int64_t j = 0; j < cols; ++j)
      qd[i * cols + j] =
          static_cast<int8_t>(std::clamp(std::nearbyint(xr[j] * inv), -127.f, 127.f));
  }
  if (count) {
    stats_.rawBytes += 4 * rows * cols;
    stats_.storedBytes += rows * cols + 4 * rows;
  }
}

void Gpt::dequantizeRows(float* x, const Tensor& q, const Tensor& scale, int64_t rows,
                         int64_t cols) {
  ScopedRange r("int8_unpack", SpanCategory::Elementwise);
  const int8_t* qd = static_cast<const int8_t*>(q.data());
  const float* sd = scale.f32();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = qd[i * cols + j] * sd[i];
}

void Gpt::packSparse(BlockActivations& a, const float* x, int64_t n, bool count) {
  ScopedRange r("sparse_pack", SpanCategory::Elementwise);
  uint8_t* mask = static_cast<uint8_t*>(a.fcMask.data());
  int64_t nnz = 0;
  for (int64_t byte = 0; byte * 8 < n; ++byte) {
    uint8_t m = 0;
    for (int b = 0; b < 8 && byte * 8 + b < n; ++b)
      if (x[byte * 8 + b] != 0.f) {
        m |= static_cast<uint8_t>(1u << b);
        ++nnz;
      }
    mask[byte] = m;
  }
  // Exactly nnz values are kept, so the tracker shows what the storage really costs (the old
  // values go first so old and new never count together).
  a.fcVals.reset();
  a.fcVals = Tensor(backend_, tracker_, MemoryCategory::Activations, DType::F32, {nnz});
  float* v = a.fcVals.f32();
  for (int64_t i = 0; i < n; ++i)
    if (x[i] != 0.f) *v++ = x[i];
  if (count) {
    stats_.rawBytes += 4 * n;
    stats_.storedBytes += (n + 7) / 8 + 4 * nnz;
    stats_.reluValues += n;
    stats_.reluZeros += n - nnz;
  }
}

void Gpt::unpackSparse(float* x, const BlockActivations& a, int64_t n) {
  ScopedRange r("sparse_unpack", SpanCategory::Elementwise);
  const uint8_t* mask = static_cast<const uint8_t*>(a.fcMask.data());
  const float* v = a.fcVals.f32();
  for (int64_t i = 0; i < n; ++i) x[i] = (mask[i >> 3] >> (i & 7)) & 1u ? *v++ : 0.f;
}

void Gpt::normForward(float* out, float* mean, float* rstd, const float* in, const ParamInfo* w,
                      const ParamInfo* b, int N) {
  const int C = config_.d_model;
  if (!b) {  // RMSNorm (llama): no mean, no bias
    ScopedRange r("rmsnorm_fwd", SpanCategory::Norm);
    backend_->rmsnormForward(out, rstd, in, param(*w), N, C, 1e-5f);
    return;
  }
  ScopedRange r("layernorm_fwd", SpanCategory::Norm);
  backend_->layernormForward(out, mean, rstd, in, param(*w), param(*b), N, C, 1e-5f);
}

void Gpt::normBackward(float* dinp, const float* dout, const float* in, const ParamInfo* w,
                       const ParamInfo* b, const float* mean, const float* rstd, int N) {
  const int C = config_.d_model;
  if (!b) {
    ScopedRange r("rmsnorm_bwd", SpanCategory::Norm);
    backend_->rmsnormBackward(dinp, grad(*w), dout, in, param(*w), rstd, N, C);
    return;
  }
  ScopedRange r("layernorm_bwd", SpanCategory::Norm);
  backend_->layernormBackward(dinp, grad(*w), grad(*b), dout, in, param(*w), mean, rstd, N, C);
}

void Gpt::rope(float* qkv, bool backward) {
  const core::ArchSpec& arch = arch_;
  const int NH = config_.heads, KVH = static_cast<int>(arch.kvHeads);
  const int HD = static_cast<int>(arch.headDim()), QKV = static_cast<int>(arch.qkvDim());
  const float theta = static_cast<float>(arch.ropeTheta);
  ScopedRange r(backward ? "rope_bwd" : "rope_fwd", SpanCategory::Elementwise);
  for (auto [p, heads] : {std::pair{qkv, NH}, std::pair{qkv + config_.d_model, KVH}}) {
    if (backward)
      backend_->ropeBackward(p, p, curB_, curT_, heads, HD, QKV, QKV, theta);
    else
      backend_->ropeForward(p, p, curB_, curT_, heads, HD, QKV, QKV, theta);
  }
}

void Gpt::blockForward(int l, BlockActivations& a, const float* in, float* out, bool recompute) {
  if (hooks_.beforeBlockForward) hooks_.beforeBlockForward(l, recompute);
  using Comp = GptConfig::Compression;
  ScopedRange br(recompute ? "block_recompute" : "block_fwd", SpanCategory::Block);
  const int B = curB_, T = curT_, C = config_.d_model, NH = config_.heads;
  const int N = B * T;
  const core::ArchSpec& arch = arch_;
  const int KVH = static_cast<int>(arch.kvHeads);
  const int64_t F = arch.dFf;
  const auto& p = blockParams_[l];
  const Comp comp = config_.compression;
  const bool q8 = comp == Comp::Int8;
  const bool countStats = !recompute;
  // int8: each matmul input is computed in fp32 into dfc2 (free during forward), used, then
  // quantized. Sparse: the ReLU output likewise, then packed.
  float* tmp = ws_.dfc2.f32();
  auto linearForward = [&](int j, float* o, const float* i) {
    linears_[4 * l + j].forward(o, i, N, scratch_, recompute);
  };
  float* ln1 = q8 ? tmp : a.ln1.f32();
  normForward(ln1, a.ln1Mean.f32(), a.ln1Rstd.f32(), in, p.ln1w, p.ln1b, N);
  linearForward(0, a.qkv.f32(), ln1);
  if (q8) {
    quantizeRows(a.ln1Q, a.ln1Scale, ln1, N, C, countStats);
  }
  // Rotary positions on the q and k heads of the packed qkv, in place (saved rotated).
  if (arch.arch == "llama") rope(a.qkv.f32(), false);
  float* attOut = q8 ? tmp : a.attOut.f32();
  {
    ScopedRange r("attention_fwd", SpanCategory::Attention, 4.0 * B * T * T * C);
    if (config_.flash)
      backend_->flashAttentionGqaForward(attOut, a.att.f32(), a.qkv.f32(), B, T, C, NH, KVH);
    else
      backend_->attentionGqaForward(attOut, a.att.f32(), a.qkv.f32(), B, T, C, NH, KVH);
  }
  linearForward(1, ws_.dtmp.f32(), attOut);
  if (q8) {
    quantizeRows(a.attOutQ, a.attOutScale, attOut, N, C, countStats);
  }
  {
    ScopedRange r("residual_fwd", SpanCategory::Elementwise);
    backend_->residualForward(a.resid2.f32(), in, ws_.dtmp.f32(), int64_t(N) * C);
  }
  float* ln2 = q8 ? tmp : a.ln2.f32();
  normForward(ln2, a.ln2Mean.f32(), a.ln2Rstd.f32(), a.resid2.f32(), p.ln2w, p.ln2b, N);
  linearForward(2, a.fcPre.f32(), ln2);
  if (q8) {
    quantizeRows(a.ln2Q, a.ln2Scale, ln2, N, C, countStats);
  }
  float* fcAct = comp == Comp::None ? a.fcAct.f32() : tmp;
  {
    const char* name = arch.swiglu ? "swiglu_fwd" : config_.relu ? "relu_fwd" : "gelu_fwd";
    ScopedRange r(name, SpanCategory::Elementwise);
    if (arch.swiglu)
      backend_->swigluForward(fcAct, a.fcPre.f32(), N, static_cast<int>(F));
    else if (config_.relu)
      backend_->reluForward(fcAct, a.fcPre.f32(), int64_t(N) * F);
    else
      backend_->geluForward(fcAct, a.fcPre.f32(), int64_t(N) * F);
  }
  if (out) linearForward(3, ws_.dtmp.f32(), fcAct);
  if (q8) {
    quantizeRows(a.fcActQ, a.fcActScale, fcAct, N, F, countStats);
  } else if (comp == Comp::Sparse) {
    packSparse(a, fcAct, int64_t(N) * F, countStats);
  }
  if (out) {
    ScopedRange r("residual_fwd", SpanCategory::Elementwise);
    backend_->residualForward(out, a.resid2.f32(), ws_.dtmp.f32(), int64_t(N) * C);
  }
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss,
                    int64_t* count) {
  if (B < 1 || B > acts_.B || T < 1 || T > config_.seq_len)
    throw std::invalid_argument("forward: batch shape exceeds the allocated activations");
  ScopedRange fr("forward", SpanCategory::Block);
  const int C = config_.d_model, V = config_.vocab, L = config_.layers;
  const int N = B * T;
  const int k = config_.checkpointEvery;
  curB_ = B;
  curT_ = T;
  stats_ = CompressionStats{};
  backend_->copyToDevice(acts_.tokens.data(), tokens, sizeof(int32_t) * N);
  // Block l reads `inputOf(l)`: its own set's input (plain), or with segments of k blocks the
  // segment's checkpoint (first block) / the scratch slot's input (the others).
  auto inputOf = [&](int l) -> float* {
    if (k == 0) return acts_.blocks[l].input.f32();
    return l % k == 0 ? acts_.checkpoints[l / k].f32() : acts_.blocks[l % k].input.f32();
  };
  {
    ScopedRange r("embedding_fwd", SpanCategory::Elementwise);
    backend_->embeddingForward(inputOf(0), acts_.tokens.i32(), param(*wte_),
                               wpe_ ? param(*wpe_) : nullptr, B, T, C);
  }
  for (int l = 0; l < L; ++l) {
    auto& a = acts_.blocks[k == 0 ? l : l % k];
    float* out = l + 1 < L ? inputOf(l + 1) : acts_.residOut.f32();
    blockForward(l, a, inputOf(l), out, false);
  }
  normForward(acts_.lnf.f32(), acts_.lnfMean.f32(), acts_.lnfRstd.f32(), acts_.residOut.f32(),
              lnfw_, lnfb_, N);
  {
    ScopedRange r("lm_head_fwd", SpanCategory::Gemm, 2.0 * N * V * C);
    backend_->matmul(acts_.logits.f32(), acts_.lnf.f32(), param(*head_), N, V, C, false, true, 1.f,
                     0.f);
  }
  haveLoss_ = false;
  if (!targets) return 0.0;
  // The loss is not part of the model: cross-entropy over the logits just computed.
  const double sum = CrossEntropyLoss(backend_).forwardBackward(
      acts_.logits, acts_.targets, acts_.losses, targets, N, V, dloss, count);
  haveLoss_ = true;
  return sum;
}

void Gpt::blockBackward(int l, BlockActivations& a, const float* in) {
  using Comp = GptConfig::Compression;
  ScopedRange blr("block_bwd", SpanCategory::Block);
  const int B = curB_, T = curT_, C = config_.d_model, NH = config_.heads;
  const int N = B * T;
  const core::ArchSpec& arch = arch_;
  const int KVH = static_cast<int>(arch.kvHeads);
  const int64_t F = arch.dFf;
  const auto& p = blockParams_[l];
  const Comp comp = config_.compression;
  const bool q8 = comp == Comp::Int8;
  float* dres = ws_.dres.f32();
  float* dtmp = ws_.dtmp.f32();
  auto linearBackward = [&](int j, float* di, const float* d, const float* i) {
    linears_[4 * l + j].backward(di, d, i, N, scratch_);
  };
  // Compressed inputs are expanded into whichever of dfc / dfc2 is free at that point.
  const float* fcAct = a.fcAct.empty() ? nullptr : a.fcAct.f32();
  if (q8) {
    dequantizeRows(ws_.dfc2.f32(), a.fcActQ, a.fcActScale, N, F);
    fcAct = ws_.dfc2.f32();
  } else if (comp == Comp::Sparse) {
    unpackSparse(ws_.dfc2.f32(), a, int64_t(N) * F);
    fcAct = ws_.dfc2.f32();
  }
  // MLP branch: out = resid2 + proj(act(fc(norm_2(resid2)))).
  linearBackward(3, ws_.dfc.f32(), dres, fcAct);
  {
    const char* name = arch.swiglu ? "swiglu_bwd" : config_.relu ? "relu_bwd" : "gelu_bwd";
    ScopedRange r(name, SpanCategory::Elementwise);
    // relu(x) > 0 exactly when x > 0, so the pre-activation gives the same mask.
    if (arch.swiglu)
      backend_->swigluBackward(ws_.dfc2.f32(), a.fcPre.f32(), ws_.dfc.f32(), N,
                               static_cast<int>(F));
    else if (config_.relu)
      backend_->reluBackward(ws_.dfc2.f32(), comp == Comp::None ? fcAct : a.fcPre.f32(),
                             ws_.dfc.f32(), int64_t(N) * F);
    else
      backend_->geluBackward(ws_.dfc2.f32(), a.fcPre.f32(), ws_.dfc.f32(), int64_t(N) * F);
  }
  const float* ln2 = q8 ? ws_.dfc.f32() : a.ln2.f32();
  if (q8) dequantizeRows(ws_.dfc.f32(), a.ln2Q, a.ln2Scale, N, C);
  linearBackward(2, dtmp, ws_.dfc2.f32(), ln2);
  normBackward(dres, dtmp, a.resid2.f32(), p.ln2w, p.ln2b, a.ln2Mean.f32(), a.ln2Rstd.f32(), N);
  // Attention branch: resid2 = input + o(attn(qkv(norm_1(input)))).
  const float* attOut = q8 ? ws_.dfc.f32() : a.attOut.f32();
  if (q8) dequantizeRows(ws_.dfc.f32(), a.attOutQ, a.attOutScale, N, C);
  linearBackward(1, dtmp, dres, attOut);
  {
    ScopedRange r("attention_bwd", SpanCategory::Attention, 8.0 * B * T * T * C);
    if (config_.flash)
      backend_->flashAttentionGqaBackward(ws_.dqkv.f32(), dtmp, attOut, a.att.f32(), a.qkv.f32(), B,
                                          T, C, NH, KVH);
    else
      backend_->attentionGqaBackward(ws_.dqkv.f32(), ws_.datt.f32(), dtmp, a.qkv.f32(), a.att.f32(),
                                     B, T, C, NH, KVH);
  }
  // Back through the rotation: dq, dk of the unrotated projections, in place.
  if (arch.arch == "llama") rope(ws_.dqkv.f32(), true);
  const float* ln1 = q8 ? ws_.dfc.f32() : a.ln1.f32();
  if (q8) dequantizeRows(ws_.dfc.f32(), a.ln1Q, a.ln1Scale, N, C);
  linearBackward(0, dtmp, ws_.dqkv.f32(), ln1);
  normBackward(dres, dtmp, in, p.ln1w, p.ln1b, a.ln1Mean.f32(), a.ln1Rstd.f32(), N);
  if (hooks_.blockGradientsReady) hooks_.blockGradientsReady(l);
}

void Gpt::backward() {
  if (!haveLoss_) throw std::logic_error("backward() needs a forward with targets first");
  ScopedRange br("backward", SpanCategory::Block);
  const int B = curB_, T = curT_, C = config_.d_model, V = config_.vocab, L = config_.layers;
  const int N = B * T;
  const int k = config_.checkpointEvery;
  float* dres = ws_.dres.f32();
  float* dtmp = ws_.dtmp.f32();
  {
    ScopedRange r("lm_head_bwd", SpanCategory::Gemm, 4.0 * N * V * C);
    // dlnf = dlogits W_head; dW_head += dlogits^T lnf (W_head is wte when tied).
    backend_->matmul(dtmp, acts_.logits.f32(), param(*head_), N, C, V, false, false, 1.f, 0.f);
    backend_->matmul(grad(*head_), acts_.logits.f32(), acts_.lnf.f32(), V, C, N, true, false, 1.f,
                     1.f);
  }
  ws_.dres.zero();
  normBackward(dres, dtmp, acts_.residOut.f32(), lnfw_, lnfb_, acts_.lnfMean.f32(),
               acts_.lnfRstd.f32(), N);
  if (k == 0) {
    for (int l = L - 1; l >= 0; --l) blockBackward(l, acts_.blocks[l], acts_.blocks[l].input.f32());
  } else {
    const int segments = (L + k - 1) / k;
    for (int s = segments - 1; s >= 0; --s) {
      const int first = s * k, last = std::min(L, first + k) - 1;
      auto in = [&](int l) {
        return l == first ? acts_.checkpoints[s].f32() : acts_.blocks[l - first].input.f32();
      };
      // The last segment is still in the scratch sets from forward; the others are recomputed
      // from their checkpoint with the same kernels, hence bitwise the same values. The final
      // residual add of the segment is skipped: the next checkpoint already holds it.
      if (s != segments - 1) {
        ScopedRange r("recompute", SpanCategory::Block);
        for (int l = first; l <= last; ++l)
          blockForward(l, acts_.blocks[l - first], in(l),
                       l < last ? acts_.blocks[l - first + 1].input.f32() : nullptr, true);
      }
      for (int l = last; l >= first; --l) blockBackward(l, acts_.blocks[l - first], in(l));
    }
  }
  {
    ScopedRange r("embedding_bwd", SpanCategory::Elementwise);
    backend_->embeddingBackward(grad(*wte_), wpe_ ? grad(*wpe_) : nullptr, dres, acts_.tokens.i32(),
                                B, T, C);
  }
  haveLoss_ = false;
}

void Gpt::logitsRow(int b, int t, float* dst) const {
  const int64_t V = config_.vocab;
  const int64_t row = static_cast<int64_t>(b) * curT_ + t;
  backend_->copyToHost(dst, acts_.logits.f32() + row * V, sizeof(float) * V);
}

double Gpt::flopsPerToken(int T) const {
  return 6.0 * static_cast<double>(numParams_) +
         12.0 * config_.layers * static_cast<double>(config_.d_model) * T;
}

}  // namespace ts::engine
