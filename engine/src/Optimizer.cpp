#include "trainscope/engine/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

// Mixed precision (16-bit working weights): the fp32 master copy the update is applied to,
// counted as optimizer_state (ZeRO accounting); empty in fp32.
Tensor makeMaster(Gpt& model, kernels::Backend* backend, MemoryTracker* tracker) {
  if (!model.mixed() || !model.config().masterWeights) return {};
  Tensor t(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {model.numParams()});
  // The fp32 compute copy holds the (16-bit representable) initial weights.
  backend->copyOnDevice(t.data(), model.paramBuffer().data(), t.bytes());
  return t;
}
float* target(Gpt& model, Tensor& master, const ParamInfo& p) {
  return master.empty() ? model.param(p) : master.f32() + p.offset;
}

// pure_bf16 (no master): optimizer state is stored in bf16 as well.
bool pureBf16(const Gpt& model) {
  return model.mixed() && !model.config().masterWeights;
}
DType stateType(const Gpt& model) {
  return pureBf16(model) ? DType::BF16 : DType::F32;
}
// Runs `update(m, v, offset, count)` on fp32 views of bf16 state in chunks of kChunk values: the
// state is upcast, updated by the backend's fp32 kernel, and rounded back (RNE), all on the
// backend. The chunk buffers are the only fp32 state: 2 x 16 KiB, not model-sized.
constexpr int64_t kChunk = 4096;
struct ChunkScratch {
  Tensor m, v;
};
// Device buffers for the chunks, uncounted: a fixed 32 KiB that the estimator leaves out, as it
// left out the stack buffers these replace (a device kernel cannot read host stack memory).
ChunkScratch makeChunkScratch(const Gpt& model, kernels::Backend* backend) {
  if (!pureBf16(model)) return {};
  return {Tensor(backend, nullptr, MemoryCategory::Workspace, DType::F32, {kChunk}),
          Tensor(backend, nullptr, MemoryCategory::Workspace, DType::F32, {kChunk})};
}
template <class Update>
void chunkedBf16(kernels::Backend& be, ChunkScratch& scratch, Tensor* m, Tensor* v, int64_t offset,
                 int64_t n, Update update) {
  float* mf = scratch.m.f32();
  float* vf = scratch.v.f32();
  auto* m16 = m ? static_cast<uint16_t*>(m->data()) + offset : nullptr;
  auto* v16 = v ? static_cast<uint16_t*>(v->data()) + offset : nullptr;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    if (m16) be.bf16ToFloat(m16 + c, mf, len);
    if (v16) be.bf16ToFloat(v16 + c, vf, len);
    update(mf, v16 ? vf : nullptr, c, len);
    if (m16) be.floatToBf16(mf, m16 + c, len);
    if (v16) be.floatToBf16(vf, v16 + c, len);
  }
}

class AdamW final : public Optimizer {
 public:
  AdamW(const core::OptimizerConfig& c, Gpt& model, kernels::Backend* backend,
        MemoryTracker* tracker)
      : config_(c), model_(model), backend_(backend) {
    m_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(model),
                {model.numParams()});
    v_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(model),
                {model.numParams()});
    m_.zero();
    v_.zero();
    master_ = makeMaster(model, backend, tracker);
    scratch_ = makeChunkScratch(model, backend);
  }
  void step(float lr) override {
    ScopedRange r("adamw", SpanCategory::Optimizer);
    ++t_;
    const float b1 = static_cast<float>(config_.betas.size() > 0 ? config_.betas[0] : 0.9);
    const float b2 = static_cast<float>(config_.betas.size() > 1 ? config_.betas[1] : 0.999);
    const float eps = static_cast<float>(config_.eps);
    const bool pure = pureBf16(model_);
    for (const auto& p : model_.params()) {
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      if (pure) {
        // The fp32 compute copy holds the bf16 weights exactly; updated, then rounded below.
        float* w = model_.param(p);
        const float* g = model_.grad(p);
        chunkedBf16(*backend_, scratch_, &m_, &v_, p.offset, p.numel,
                    [&](float* m, float* v, int64_t c, int64_t n) {
                      backend_->adamwUpdate(w + c, g + c, m, v, n, lr, b1, b2, eps, wd, t_);
                    });
      } else {
        backend_->adamwUpdate(target(model_, master_, p), model_.grad(p), m_.f32() + p.offset,
                              v_.f32() + p.offset, p.numel, lr, b1, b2, eps, wd, t_);
      }
    }
    if (!master_.empty()) model_.setWeightsFrom(master_.f32());
    if (pure) model_.roundWeights();
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (!master_.empty()) return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}, {"master", &master_}};
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  }
  std::string name() const override { return "adamw"; }

 private:
  core::OptimizerConfig config_;
  Gpt& model_;
  kernels::Backend* backend_;
  Tensor m_, v_, master_;
  ChunkScratch scratch_;
  int64_t t_ = 0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const core::OptimizerConfig& c, Gpt& model, kernels::Backend* backend, MemoryTracker* tracker)
      : config_(c), model_(model), backend_(backend) {
    buf_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(model),
                  {model.numParams()});
    buf_.zero();
    master_ = makeMaster(model, backend, tracker);
    scratch_ = makeChunkScratch(model, backend);
  }
  void step(float lr) override {
    ScopedRange r("sgd", SpanCategory::Optimizer);
    ++t_;
    const float mom = static_cast<float>(config_.momentum);
    const bool pure = pureBf16(model_);
    for (const auto& p : model_.params()) {
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      if (pure) {
        float* w = model_.param(p);
        const float* g = model_.grad(p);
        chunkedBf16(*backend_, scratch_, &buf_, nullptr, p.offset, p.numel,
                    [&](float* m, float*, int64_t c, int64_t n) {
                      backend_->sgdUpdate(w + c, g + c, m, n, lr, mom, wd);
                    });
      } else {
        backend_->sgdUpdate(target(model_, master_, p), model_.grad(p), buf_.f32() + p.offset,
                            p.numel, lr, mom, wd);
      }
    }
    if (!master_.empty()) model_.setWeightsFrom(master_.f32());
    if (pure) model_.roundWeights();
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (!master_.empty()) return {{"momentum_buffer", &buf_}, {"master", &master_}};
    return {{"momentum_buffer", &buf_}};
  }
  std::string name() const override { return "sgd"; }

 private:
  core::OptimizerConfig config_;
  Gpt& model_;
  kernels::Backend* backend_;
  Tensor buf_, master_;
  ChunkScratch scratch_;
  int64_t t_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(const core::OptimizerConfig& config, Gpt& model,
                                         kernels::Backend* backend, MemoryTracker* tracker) {
  if (config.type == "adamw") return std::make_unique<AdamW>(config, model, backend, tracker);
  if (config.type == "sgd") return std::make_unique<Sgd>(config, model, backend, tracker);
  throw std::invalid_argument("optimizer.type '" + config.type + "' is not one of adamw, sgd");
}

double clipGradNorm(Gpt& model, kernels::Backend* backend, double maxNorm) {
  ScopedRange r("grad_norm", SpanCategory::Optimizer);
  const double norm = std::sqrt(backend->sumSquares(model.gradBuffer().f32(), model.numParams()));
  if (maxNorm > 0 && std::isfinite(norm) && norm > maxNorm) {
    backend->scale(model.gradBuffer().f32(), model.numParams(),
                   static_cast<float>(maxNorm / (norm + 1e-6)));
  }
  return norm;
}

}  // namespace ts::engine
