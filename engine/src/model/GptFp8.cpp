// The model's fp8 GEMM state (GptConfig::fp8): the fp8 copies of the block linear weights and
// their scales, per-block copies under ZeRO-3 (fp8PerBlock), the amax reduction over ranks and
// the scaling state checkpoints save and restore.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "trainscope/engine/model/Gpt.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

void Gpt::buildFp8Weights() {
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
}  // namespace ts::engine
