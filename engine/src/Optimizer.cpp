#include "trainscope/engine/Optimizer.h"

#include <cmath>
#include <stdexcept>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

class AdamW final : public Optimizer {
 public:
  AdamW(const core::OptimizerConfig& c, Gpt& model, kernels::Backend* backend,
        MemoryTracker* tracker)
      : config_(c), model_(model), backend_(backend) {
    m_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {model.numParams()});
    v_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {model.numParams()});
    m_.zero();
    v_.zero();
  }
  void step(float lr) override {
    ScopedRange r("adamw", SpanCategory::Optimizer);
    ++t_;
    const float b1 = static_cast<float>(config_.betas.size() > 0 ? config_.betas[0] : 0.9);
    const float b2 = static_cast<float>(config_.betas.size() > 1 ? config_.betas[1] : 0.999);
    for (const auto& p : model_.params()) {
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      backend_->adamwUpdate(model_.param(p), model_.grad(p), m_.f32() + p.offset,
                            v_.f32() + p.offset, p.numel, lr, b1, b2,
                            static_cast<float>(config_.eps), wd, t_);
    }
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  }
  std::string name() const override { return "adamw"; }

 private:
  core::OptimizerConfig config_;
  Gpt& model_;
  kernels::Backend* backend_;
  Tensor m_, v_;
  int64_t t_ = 0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const core::OptimizerConfig& c, Gpt& model, kernels::Backend* backend, MemoryTracker* tracker)
      : config_(c), model_(model), backend_(backend) {
    buf_ =
        Tensor(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {model.numParams()});
    buf_.zero();
  }
  void step(float lr) override {
    ScopedRange r("sgd", SpanCategory::Optimizer);
    ++t_;
    for (const auto& p : model_.params()) {
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      backend_->sgdUpdate(model_.param(p), model_.grad(p), buf_.f32() + p.offset, p.numel, lr,
                          static_cast<float>(config_.momentum), wd);
    }
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    return {{"momentum_buffer", &buf_}};
  }
  std::string name() const override { return "sgd"; }

 private:
  core::OptimizerConfig config_;
  Gpt& model_;
  kernels::Backend* backend_;
  Tensor buf_;
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
