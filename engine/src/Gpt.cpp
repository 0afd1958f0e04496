#include "trainscope/engine/Gpt.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

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

int checkpointSegment(const std::string& mode, int every, int layers) {
  if (mode == "all") return 1;
  if (mode != "every_k") return 0;
  int k = every > 0 ? every : static_cast<int>(std::lround(std::sqrt(static_cast<double>(layers))));
  return std::clamp(k, 1, std::max(1, layers));
}

Gpt::Gpt(const GptConfig& config, kernels::Backend* backend, MemoryTracker* tracker)
    : config_(config), backend_(backend), tracker_(tracker) {
  const int64_t C = config.d_model, V = config.vocab, T = config.seq_len;
  if (config.layers < 1 || config.heads < 1 || C < 1 || V < 1 || T < 1 || C % config.heads != 0)
    throw std::invalid_argument("invalid GPT shape (layers, heads, d_model, seq_len, vocab)");
  if (config.checkpointEvery < 0 || config.checkpointEvery > config.layers)
    throw std::invalid_argument("checkpoint segment must be 0 (off) or 1..layers");
  if (config.compression == GptConfig::Compression::Sparse && !config.relu)
    throw std::invalid_argument("sparse activation compression needs the relu activation");
  // Packing runs on host pointers (CPU only, docs/memory.md), so it needs host-addressable memory.
  if (config.compression != GptConfig::Compression::None && !backend->hostAccessible())
    throw std::invalid_argument(std::string("activation compression runs on the cpu backend ") +
                                "only (it packs on the host; " + backend->name() +
                                " memory is not host memory)");
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.numel = 1;
    for (auto d : shape) p.numel *= d;
    p.decay = shape.size() == 2;
    p.shape = std::move(shape);
    p.offset = offset;
    offset += p.numel;
    params_.push_back(std::move(p));
  };
  add("wte", {V, C});
  add("wpe", {T, C});
  for (int l = 0; l < config.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {3 * C, C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {4 * C, C});
    add(h + "mlp.c_fc.bias", {4 * C});
    add(h + "mlp.c_proj.weight", {C, 4 * C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  numParams_ = offset;
  // Pointers into params_ are stable from here on (no more push_back).
  wte_ = &params_[0];
  wpe_ = &params_[1];
  for (int l = 0; l < config.layers; ++l) {
    const ParamInfo* b = &params_[2 + 12 * l];
    blockParams_.push_back(
        {b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11});
  }
  lnfw_ = &params_[params_.size() - 2];
  lnfb_ = &params_[params_.size() - 1];
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
  if (fp8()) {
    if (config_.working != DType::BF16)
      throw std::invalid_argument("fp8 GEMMs need bf16 working weights");
    using kernels::Fp8Format;
    const Fp8Format gf = config_.fp8GradE4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
    const bool block = config_.fp8 == GptConfig::Fp8Recipe::Blockwise;
    int64_t off = 0, scales = 0;
    for (const auto& bp : blockParams_) {
      for (const ParamInfo* w : {bp.qkvw, bp.attprojw, bp.fcw, bp.fcprojw}) {
        Fp8Site site;
        site.w = w;
        site.w8Offset = off;
        off += w->numel;
        // Dequantization scales of the fp8 weight: one per 128x128 block, or one per tensor.
        site.scaleOffset = scales;
        site.scaleCount =
            block ? kernels::cpu::fp8TileCount(w->shape[0], w->shape[1], 128, 128) : 1;
        scales += site.scaleCount;
        site.x = kernels::Fp8DelayedScale(config_.fp8History, config_.fp8Margin, Fp8Format::E4M3);
        site.wt = kernels::Fp8DelayedScale(config_.fp8History, config_.fp8Margin, Fp8Format::E4M3);
        site.g = kernels::Fp8DelayedScale(config_.fp8History, config_.fp8Margin, gf);
        fp8Sites_.push_back(std::move(site));
      }
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
  uint8_t* w8 = static_cast<uint8_t*>(w8_.data());
  for (auto& s : fp8Sites_) {
    const float* w = paramBuf_.f32() + s.w->offset;
    const int64_t OC = s.w->shape[0], IC = s.w->shape[1];
    if (config_.fp8 == GptConfig::Fp8Recipe::Blockwise) {
      backend_->quantizeFp8Tiles(w, w8 + s.w8Offset, nullptr, wScaleInv(s), OC, IC, 128, 128,
                                 kernels::Fp8Format::E4M3, config_.fp8Margin);
    } else {
      // Delayed: this update's weights use the scale from the previous weights' amaxes.
      quantizeFp8WeightDelayed(s, s.wt.scale());
      s.wt.record(backend_->amax(w, OC * IC));
    }
  }
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
  for (const auto& s : fp8Sites_)
    sites.push_back({{"weight", s.w->name},
                     {"x", delayedState(s.x)},
                     {"w", delayedState(s.wt)},
                     {"g", delayedState(s.g)},
                     {"x_used", floatBits(s.xUsed)},
                     {"g_used", floatBits(s.gUsed)},
                     {"w_used", floatBits(s.wUsed)}});
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
  if (sites.size() != fp8Sites_.size())
    throw std::invalid_argument("fp8 state has " + std::to_string(sites.size()) +
                                " GEMM sites, the model has " + std::to_string(fp8Sites_.size()));
  // Validate every site into copies first: a bad entry leaves the model untouched.
  std::vector<Fp8Site> next = fp8Sites_;
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
  fp8Sites_ = std::move(next);
  if (config_.fp8 != GptConfig::Fp8Recipe::Delayed) return;  // blockwise: weights are current
  // setWeightsFrom() quantized with (and recorded into) the fresh histories; redo it with the
  // scales the saved fp8 weights had.
  for (auto& s : fp8Sites_) quantizeFp8WeightDelayed(s, s.wUsed);
}

void Gpt::quantizeFp8WeightDelayed(Fp8Site& s, float scale) {
  backend_->floatToFp8(param(*s.w), static_cast<uint8_t*>(w8_.data()) + s.w8Offset, s.w->numel,
                       kernels::Fp8Format::E4M3, scale, true);
  s.wUsed = scale;
  const float inv = 1.f / scale;
  backend_->copyToDevice(wScaleInv(s), &inv, sizeof inv);
}

void Gpt::dequantizeFp8Weight(const Fp8Site& s, float* dst) {
  const int64_t OC = s.w->shape[0], IC = s.w->shape[1];
  const uint8_t* q = static_cast<const uint8_t*>(w8_.data()) + s.w8Offset;
  if (config_.fp8 == GptConfig::Fp8Recipe::Blockwise)
    backend_->dequantizeFp8Tiles(q, wScaleInv(s), dst, OC, IC, 128, 128, kernels::Fp8Format::E4M3);
  else
    backend_->fp8ToFloat(q, dst, OC * IC, kernels::Fp8Format::E4M3, 1.f / s.wUsed);
}

void Gpt::linearForwardFp8(int site, float* out, const float* inp, const ParamInfo& b, int N,
                           int OC, int IC, bool recompute) {
  ScopedRange r("linear_fwd_fp8", SpanCategory::Gemm, 2.0 * N * OC * IC);
  Fp8Site& s = fp8Sites_[site];
  float* X = fp8X_.f32();
  float* W = fp8W_.f32();
  const int64_t n = int64_t(N) * IC;
  if (config_.fp8 == GptConfig::Fp8Recipe::Blockwise) {
    // Current scaling is a pure function of the values: recomputation quantizes identically.
    backend_->quantizeFp8Tiles(inp, nullptr, X, fp8TileScales_.f32(), N, IC, 1, 128,
                               kernels::Fp8Format::E4M3, config_.fp8Margin);
  } else {
    if (!recompute) s.xUsed = s.x.scale();
    backend_->fakeQuantizeFp8(inp, X, n, kernels::Fp8Format::E4M3, s.xUsed);
    if (!recompute) s.x.record(backend_->amax(inp, n));
  }
  dequantizeFp8Weight(s, W);
  backend_->matmul(out, ws_.ones.f32(), param(b), N, OC, 1, false, false, 1.f, 0.f);
  backend_->matmul(out, X, W, N, OC, IC, false, true, 1.f, 1.f);
}

void Gpt::linearBackwardFp8(int site, float* dinp, const float* dout, const float* inp,
                            const ParamInfo& b, int N, int OC, int IC) {
  ScopedRange r("linear_bwd_fp8", SpanCategory::Gemm, 4.0 * N * OC * IC);
  Fp8Site& s = fp8Sites_[site];
  const ParamInfo& w = *s.w;
  float* X = fp8X_.f32();
  float* G = fp8G_.f32();
  float* W = fp8W_.f32();
  const kernels::Fp8Format gf = s.g.format();
  // The bias gradient comes from the unquantized output gradient (as Transformer Engine).
  backend_->matmul(grad(b), ws_.ones.f32(), dout, 1, OC, N, false, false, 1.f, 1.f);
  dequantizeFp8Weight(s, W);
  if (config_.fp8 == GptConfig::Fp8Recipe::Blockwise) {
    // dgrad (reduction over OC): 1x128 tiles of dout along OC; weights in their 128x128 blocks.
    backend_->quantizeFp8Tiles(dout, nullptr, G, fp8TileScales_.f32(), N, OC, 1, 128, gf,
                               config_.fp8Margin);
    if (dinp) backend_->matmul(dinp, G, W, N, IC, OC, false, false, 1.f, 0.f);
    // wgrad (reduction over the N tokens): both operands re-tiled 128x1 (DeepSeek-V3).
    backend_->quantizeFp8Tiles(dout, nullptr, G, fp8TileScales_.f32(), N, OC, 128, 1, gf,
                               config_.fp8Margin);
    backend_->quantizeFp8Tiles(inp, nullptr, X, fp8TileScales_.f32(), N, IC, 128, 1,
                               kernels::Fp8Format::E4M3, config_.fp8Margin);
  } else {
    const int64_t n = int64_t(N) * OC;
    s.gUsed = s.g.scale();
    backend_->fakeQuantizeFp8(dout, G, n, gf, s.gUsed);
    s.g.record(backend_->amax(dout, n));
    if (dinp) backend_->matmul(dinp, G, W, N, IC, OC, false, false, 1.f, 0.f);
    // The input exactly as the forward GEMM saw it (same scale, same values).
    backend_->fakeQuantizeFp8(inp, X, int64_t(N) * IC, kernels::Fp8Format::E4M3, s.xUsed);
  }
  backend_->matmul(grad(w), G, X, OC, IC, N, true, false, 1.f, 1.f);
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
  for (const auto& p : params_) {
    float* dst = host.data() + p.offset;
    const bool isNorm = p.name.find("ln_") != std::string::npos;
    const bool isBias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (isNorm) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = isBias ? 0.f : 1.f;
    } else if (isBias) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 0.f;
    } else {
      const bool resid = p.name.find("c_proj.weight") != std::string::npos;
      const double s = resid ? stdResid : std0;
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = static_cast<float>(rng.normal() * s);
    }
  }
  backend_->copyToDevice(paramBuf_.data(), host.data(), host.size() * sizeof(float));
  if (mixed()) setWeightsFrom(paramBuf_.f32());
}

void Gpt::zeroGrad() {
  gradBuf_.zero();
}

void Gpt::allocate(int B) {
  if (B < 1) throw std::invalid_argument("micro-batch must be >= 1");
  const int64_t T = config_.seq_len, C = config_.d_model, V = config_.vocab, NH = config_.heads;
  const int64_t N = B * T;
  auto act = [&](DType d, std::vector<int64_t> shape) {
    return Tensor(backend_, tracker_, MemoryCategory::Activations, d, std::move(shape));
  };
  auto wsT = [&](std::vector<int64_t> shape) {
    return Tensor(backend_, tracker_, MemoryCategory::Workspace, DType::F32, std::move(shape));
  };
  acts_ = Activations{};
  ws_ = Workspace{};
  acts_.B = B;
  acts_.T = static_cast<int>(T);
  acts_.tokens = act(DType::I32, {B, T});
  acts_.targets = act(DType::I32, {B, T});
  using Comp = GptConfig::Compression;
  const Comp comp = config_.compression;
  const int k = config_.checkpointEvery;
  // Plain: every layer keeps a full set. Checkpointing: k scratch sets + one input per segment.
  const int sets = k > 0 ? k : config_.layers;
  for (int l = 0; l < sets; ++l) {
    BlockActivations a;
    if (k == 0 || l > 0) a.input = act(DType::F32, {B, T, C});
    a.ln1Mean = act(DType::F32, {B, T});
    a.ln1Rstd = act(DType::F32, {B, T});
    a.qkv = act(DType::F32, {B, T, 3 * C});
    a.att = config_.flash ? act(DType::F32, {B, NH, T}) : act(DType::F32, {B, NH, T, T});
    a.resid2 = act(DType::F32, {B, T, C});
    a.ln2Mean = act(DType::F32, {B, T});
    a.ln2Rstd = act(DType::F32, {B, T});
    a.fcPre = act(DType::F32, {B, T, 4 * C});
    if (comp == Comp::Int8) {
      a.ln1Q = act(DType::I8, {B, T, C});
      a.ln1Scale = act(DType::F32, {B, T});
      a.attOutQ = act(DType::I8, {B, T, C});
      a.attOutScale = act(DType::F32, {B, T});
      a.ln2Q = act(DType::I8, {B, T, C});
      a.ln2Scale = act(DType::F32, {B, T});
      a.fcActQ = act(DType::I8, {B, T, 4 * C});
      a.fcActScale = act(DType::F32, {B, T});
    } else {
      a.ln1 = act(DType::F32, {B, T, C});
      a.attOut = act(DType::F32, {B, T, C});
      a.ln2 = act(DType::F32, {B, T, C});
      if (comp == Comp::Sparse) {
        a.fcMask = act(DType::I8, {(N * 4 * C + 7) / 8});
        a.fcVals = act(DType::F32, {0});
      } else {
        a.fcAct = act(DType::F32, {B, T, 4 * C});
      }
    }
    acts_.blocks.push_back(std::move(a));
  }
  if (k > 0)
    for (int s = 0; s < (config_.layers + k - 1) / k; ++s)
      acts_.checkpoints.push_back(act(DType::F32, {B, T, C}));
  acts_.residOut = act(DType::F32, {B, T, C});
  acts_.lnf = act(DType::F32, {B, T, C});
  acts_.lnfMean = act(DType::F32, {B, T});
  acts_.lnfRstd = act(DType::F32, {B, T});
  acts_.logits = act(DType::F32, {B, T, V});
  acts_.losses = act(DType::F32, {B, T});

  ws_.ones = wsT({N});
  {
    std::vector<float> ones(static_cast<size_t>(N), 1.f);
    backend_->copyToDevice(ws_.ones.data(), ones.data(), ones.size() * sizeof(float));
  }
  ws_.dres = wsT({B, T, C});
  ws_.dtmp = wsT({B, T, C});
  ws_.dqkv = wsT({B, T, 3 * C});
  if (!config_.flash) ws_.datt = wsT({B, NH, T, T});
  ws_.dfc = wsT({B, T, 4 * C});
  ws_.dfc2 = wsT({B, T, 4 * C});
  if (config_.bf16Gemm) {
    auto ws16 = [&](int64_t n) {
      return Tensor(backend_, tracker_, MemoryCategory::Workspace, DType::BF16, {n});
    };
    x16_ = ws16(N * 4 * C);
    g16_ = ws16(N * 4 * C);
  }
  if (fp8()) {
    fp8X_ = wsT({N * 4 * C});
    fp8G_ = wsT({N * 4 * C});
    fp8W_ = wsT({4 * C * C});
    if (config_.fp8 == GptConfig::Fp8Recipe::Blockwise)  // the most tiles of any one operand:
      fp8TileScales_ = wsT({std::max(kernels::cpu::fp8TileCount(N, 4 * C, 1, 128),     // 1x128
                                     kernels::cpu::fp8TileCount(N, 4 * C, 128, 1))});  // 128x1
  }
  haveLoss_ = false;
}

void Gpt::linearForward(float* out, const float* inp, const ParamInfo& w, const ParamInfo& b, int N,
                        int OC, int IC) {
  ScopedRange r(config_.bf16Gemm ? "linear_fwd_bf16" : "linear_fwd", SpanCategory::Gemm,
                2.0 * N * OC * IC);
  // out = 1 * b (broadcast as a rank-1 GEMM), then out += inp W^T.
  backend_->matmul(out, ws_.ones.f32(), param(b), N, OC, 1, false, false, 1.f, 0.f);
  if (config_.bf16Gemm) {
    uint16_t* X = static_cast<uint16_t*>(x16_.data());
    backend_->floatToBf16(inp, X, int64_t(N) * IC);
    backend_->matmulBf16(out, X, weight16(w), N, OC, IC, false, true, 1.f, 1.f);
    return;
  }
  backend_->matmul(out, inp, param(w), N, OC, IC, false, true, 1.f, 1.f);
}

void Gpt::linearBackward(float* dinp, const float* dout, const float* inp, const ParamInfo& w,
                         const ParamInfo& b, int N, int OC, int IC) {
  ScopedRange r(config_.bf16Gemm ? "linear_bwd_bf16" : "linear_bwd", SpanCategory::Gemm,
                4.0 * N * OC * IC);
  // dW += dout^T inp; db += 1^T dout; dinp = dout W.
  backend_->matmul(grad(b), ws_.ones.f32(), dout, 1, OC, N, false, false, 1.f, 1.f);
  if (config_.bf16Gemm) {
    // The bias gradient above sums the fp32 dout; the GEMMs see it rounded to bf16.
    uint16_t* G = static_cast<uint16_t*>(g16_.data());
    uint16_t* X = static_cast<uint16_t*>(x16_.data());
    backend_->floatToBf16(dout, G, int64_t(N) * OC);
    backend_->floatToBf16(inp, X, int64_t(N) * IC);
    backend_->matmulBf16(grad(w), G, X, OC, IC, N, true, false, 1.f, 1.f);
    if (dinp) backend_->matmulBf16(dinp, G, weight16(w), N, IC, OC, false, false, 1.f, 0.f);
    return;
  }
  backend_->matmul(grad(w), dout, inp, OC, IC, N, true, false, 1.f, 1.f);
  if (dinp) backend_->matmul(dinp, dout, param(w), N, IC, OC, false, false, 1.f, 0.f);
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

void Gpt::blockForward(int l, BlockActivations& a, const float* in, float* out, bool recompute) {
  using Comp = GptConfig::Compression;
  ScopedRange br(recompute ? "block_recompute" : "block_fwd", SpanCategory::Block);
  const int B = curB_, T = curT_, C = config_.d_model, NH = config_.heads;
  const int N = B * T;
  const auto& p = blockParams_[l];
  const Comp comp = config_.compression;
  const bool q8 = comp == Comp::Int8;
  const bool countStats = !recompute;
  // int8: each matmul input is computed in fp32 into dfc2 (free during forward), used, then
  // quantized. Sparse: the ReLU output likewise, then packed.
  float* tmp = ws_.dfc2.f32();
  auto linearForward = [&](int j, float* o, const float* i, const ParamInfo& w, const ParamInfo& b,
                           int n, int oc, int ic) {
    if (fp8())
      linearForwardFp8(4 * l + j, o, i, b, n, oc, ic, recompute);
    else
      this->linearForward(o, i, w, b, n, oc, ic);
  };
  float* ln1 = q8 ? tmp : a.ln1.f32();
  {
    ScopedRange r("layernorm_fwd", SpanCategory::Norm);
    backend_->layernormForward(ln1, a.ln1Mean.f32(), a.ln1Rstd.f32(), in, param(*p.ln1w),
                               param(*p.ln1b), N, C, 1e-5f);
  }
  linearForward(0, a.qkv.f32(), ln1, *p.qkvw, *p.qkvb, N, 3 * C, C);
  if (q8) {
    quantizeRows(a.ln1Q, a.ln1Scale, ln1, N, C, countStats);
  }
  float* attOut = q8 ? tmp : a.attOut.f32();
  {
    ScopedRange r("attention_fwd", SpanCategory::Attention, 4.0 * B * T * T * C);
    if (config_.flash)
      backend_->flashAttentionForward(attOut, a.att.f32(), a.qkv.f32(), B, T, C, NH);
    else
      backend_->attentionForward(attOut, a.att.f32(), a.qkv.f32(), B, T, C, NH);
  }
  linearForward(1, ws_.dtmp.f32(), attOut, *p.attprojw, *p.attprojb, N, C, C);
  if (q8) {
    quantizeRows(a.attOutQ, a.attOutScale, attOut, N, C, countStats);
  }
  {
    ScopedRange r("residual_fwd", SpanCategory::Elementwise);
    backend_->residualForward(a.resid2.f32(), in, ws_.dtmp.f32(), int64_t(N) * C);
  }
  float* ln2 = q8 ? tmp : a.ln2.f32();
  {
    ScopedRange r("layernorm_fwd", SpanCategory::Norm);
    backend_->layernormForward(ln2, a.ln2Mean.f32(), a.ln2Rstd.f32(), a.resid2.f32(),
                               param(*p.ln2w), param(*p.ln2b), N, C, 1e-5f);
  }
  linearForward(2, a.fcPre.f32(), ln2, *p.fcw, *p.fcb, N, 4 * C, C);
  if (q8) {
    quantizeRows(a.ln2Q, a.ln2Scale, ln2, N, C, countStats);
  }
  float* fcAct = comp == Comp::None ? a.fcAct.f32() : tmp;
  {
    ScopedRange r(config_.relu ? "relu_fwd" : "gelu_fwd", SpanCategory::Elementwise);
    if (config_.relu)
      backend_->reluForward(fcAct, a.fcPre.f32(), int64_t(N) * 4 * C);
    else
      backend_->geluForward(fcAct, a.fcPre.f32(), int64_t(N) * 4 * C);
  }
  if (out) linearForward(3, ws_.dtmp.f32(), fcAct, *p.fcprojw, *p.fcprojb, N, C, 4 * C);
  if (q8) {
    quantizeRows(a.fcActQ, a.fcActScale, fcAct, N, 4 * C, countStats);
  } else if (comp == Comp::Sparse) {
    packSparse(a, fcAct, int64_t(N) * 4 * C, countStats);
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
    backend_->embeddingForward(inputOf(0), acts_.tokens.i32(), param(*wte_), param(*wpe_), B, T, C);
  }
  for (int l = 0; l < L; ++l) {
    auto& a = acts_.blocks[k == 0 ? l : l % k];
    float* out = l + 1 < L ? inputOf(l + 1) : acts_.residOut.f32();
    blockForward(l, a, inputOf(l), out, false);
  }
  {
    ScopedRange r("layernorm_fwd", SpanCategory::Norm);
    backend_->layernormForward(acts_.lnf.f32(), acts_.lnfMean.f32(), acts_.lnfRstd.f32(),
                               acts_.residOut.f32(), param(*lnfw_), param(*lnfb_), N, C, 1e-5f);
  }
  {
    ScopedRange r("lm_head_fwd", SpanCategory::Gemm, 2.0 * N * V * C);
    backend_->matmul(acts_.logits.f32(), acts_.lnf.f32(), param(*wte_), N, V, C, false, true, 1.f,
                     0.f);
  }
  haveLoss_ = false;
  if (!targets) return 0.0;
  backend_->copyToDevice(acts_.targets.data(), targets, sizeof(int32_t) * N);
  {
    ScopedRange r("cross_entropy", SpanCategory::Elementwise);
    backend_->crossEntropyForwardBackward(acts_.losses.f32(), acts_.logits.f32(),
                                          acts_.logits.f32(), acts_.targets.i32(), N, V, dloss);
  }
  std::vector<float> losses(static_cast<size_t>(N));
  backend_->copyToHost(losses.data(), acts_.losses.f32(), sizeof(float) * N);
  double sum = 0.0;
  int64_t n = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) {
      sum += losses[i];
      ++n;
    }
  }
  if (count) *count = n;
  haveLoss_ = true;
  return sum;
}

void Gpt::blockBackward(int l, BlockActivations& a, const float* in) {
  using Comp = GptConfig::Compression;
  ScopedRange blr("block_bwd", SpanCategory::Block);
  const int B = curB_, T = curT_, C = config_.d_model, NH = config_.heads;
  const int N = B * T;
  const auto& p = blockParams_[l];
  const Comp comp = config_.compression;
  const bool q8 = comp == Comp::Int8;
  float* dres = ws_.dres.f32();
  float* dtmp = ws_.dtmp.f32();
  auto linearBackward = [&](int j, float* di, const float* d, const float* i, const ParamInfo& w,
                            const ParamInfo& b, int n, int oc, int ic) {
    if (fp8())
      linearBackwardFp8(4 * l + j, di, d, i, b, n, oc, ic);
    else
      this->linearBackward(di, d, i, w, b, n, oc, ic);
  };
  // Compressed inputs are expanded into whichever of dfc / dfc2 is free at that point.
  const float* fcAct = a.fcAct.empty() ? nullptr : a.fcAct.f32();
  if (q8) {
    dequantizeRows(ws_.dfc2.f32(), a.fcActQ, a.fcActScale, N, 4 * C);
    fcAct = ws_.dfc2.f32();
  } else if (comp == Comp::Sparse) {
    unpackSparse(ws_.dfc2.f32(), a, int64_t(N) * 4 * C);
    fcAct = ws_.dfc2.f32();
  }
  // MLP branch: out = resid2 + c_proj(act(c_fc(ln_2(resid2)))).
  linearBackward(3, ws_.dfc.f32(), dres, fcAct, *p.fcprojw, *p.fcprojb, N, C, 4 * C);
  {
    ScopedRange r(config_.relu ? "relu_bwd" : "gelu_bwd", SpanCategory::Elementwise);
    // relu(x) > 0 exactly when x > 0, so the pre-activation gives the same mask.
    if (config_.relu)
      backend_->reluBackward(ws_.dfc2.f32(), comp == Comp::None ? fcAct : a.fcPre.f32(),
                             ws_.dfc.f32(), int64_t(N) * 4 * C);
    else
      backend_->geluBackward(ws_.dfc2.f32(), a.fcPre.f32(), ws_.dfc.f32(), int64_t(N) * 4 * C);
  }
  const float* ln2 = q8 ? ws_.dfc.f32() : a.ln2.f32();
  if (q8) dequantizeRows(ws_.dfc.f32(), a.ln2Q, a.ln2Scale, N, C);
  linearBackward(2, dtmp, ws_.dfc2.f32(), ln2, *p.fcw, *p.fcb, N, 4 * C, C);
  {
    ScopedRange r("layernorm_bwd", SpanCategory::Norm);
    backend_->layernormBackward(dres, grad(*p.ln2w), grad(*p.ln2b), dtmp, a.resid2.f32(),
                                param(*p.ln2w), a.ln2Mean.f32(), a.ln2Rstd.f32(), N, C);
  }
  // Attention branch: resid2 = input + c_proj(attn(c_attn(ln_1(input)))).
  const float* attOut = q8 ? ws_.dfc.f32() : a.attOut.f32();
  if (q8) dequantizeRows(ws_.dfc.f32(), a.attOutQ, a.attOutScale, N, C);
  linearBackward(1, dtmp, dres, attOut, *p.attprojw, *p.attprojb, N, C, C);
  {
    ScopedRange r("attention_bwd", SpanCategory::Attention, 8.0 * B * T * T * C);
    if (config_.flash)
      backend_->flashAttentionBackward(ws_.dqkv.f32(), dtmp, attOut, a.att.f32(), a.qkv.f32(), B, T,
                                       C, NH);
    else
      backend_->attentionBackward(ws_.dqkv.f32(), ws_.datt.f32(), dtmp, a.qkv.f32(), a.att.f32(), B,
                                  T, C, NH);
  }
  const float* ln1 = q8 ? ws_.dfc.f32() : a.ln1.f32();
  if (q8) dequantizeRows(ws_.dfc.f32(), a.ln1Q, a.ln1Scale, N, C);
  linearBackward(0, dtmp, ws_.dqkv.f32(), ln1, *p.qkvw, *p.qkvb, N, 3 * C, C);
  {
    ScopedRange r("layernorm_bwd", SpanCategory::Norm);
    backend_->layernormBackward(dres, grad(*p.ln1w), grad(*p.ln1b), dtmp, in, param(*p.ln1w),
                                a.ln1Mean.f32(), a.ln1Rstd.f32(), N, C);
  }
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
    // dlnf = dlogits wte; dwte += dlogits^T lnf.
    backend_->matmul(dtmp, acts_.logits.f32(), param(*wte_), N, C, V, false, false, 1.f, 0.f);
    backend_->matmul(grad(*wte_), acts_.logits.f32(), acts_.lnf.f32(), V, C, N, true, false, 1.f,
                     1.f);
  }
  {
    ScopedRange r("layernorm_bwd", SpanCategory::Norm);
    ws_.dres.zero();
    backend_->layernormBackward(dres, grad(*lnfw_), grad(*lnfb_), dtmp, acts_.residOut.f32(),
                                param(*lnfw_), acts_.lnfMean.f32(), acts_.lnfRstd.f32(), N, C);
  }
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
    backend_->embeddingBackward(grad(*wte_), grad(*wpe_), dres, acts_.tokens.i32(), B, T, C);
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
