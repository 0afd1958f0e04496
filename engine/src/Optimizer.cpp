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
// Of the trainable tensors only (gradient space, ParamArena.h).
Tensor makeMaster(ParamArena& arena, kernels::Backend* backend, MemoryTracker* tracker) {
  if (!arena.mixed() || !arena.options().masterWeights) return {};
  Tensor t(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {arena.gradSize()});
  t.zero();  // padding
  // The fp32 compute copy holds the (16-bit representable) initial weights.
  arena.copyTrainableTo(t.f32());
  return t;
}
float* target(ParamArena& arena, Tensor& master, const ParamInfo& p) {
  return master.empty() ? arena.value(p) : master.f32() + p.gradOffset;
}

// pure_bf16 (no master): optimizer state is stored in bf16 as well.
bool pureBf16(const ParamArena& arena) {
  return arena.options().pureBf16();
}
DType stateType(const ParamArena& arena) {
  return pureBf16(arena) ? DType::BF16 : DType::F32;
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
ChunkScratch makeChunkScratch(const ParamArena& arena, kernels::Backend* backend) {
  if (!pureBf16(arena)) return {};
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
  AdamW(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
        MemoryTracker* tracker)
      : config_(c), arena_(arena), backend_(backend) {
    m_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(arena),
                {arena.gradSize()});
    v_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(arena),
                {arena.gradSize()});
    m_.zero();
    v_.zero();
    master_ = makeMaster(arena, backend, tracker);
    scratch_ = makeChunkScratch(arena, backend);
  }
  void step(float lr) override {
    ScopedRange r("adamw", SpanCategory::Optimizer);
    ++t_;
    const float b1 = static_cast<float>(config_.betas.size() > 0 ? config_.betas[0] : 0.9);
    const float b2 = static_cast<float>(config_.betas.size() > 1 ? config_.betas[1] : 0.999);
    const float eps = static_cast<float>(config_.eps);
    const bool pure = pureBf16(arena_);
    for (const auto& p : arena_.params()) {
      if (!p.trainable()) continue;  // frozen: no state, no update
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      if (pure) {
        // The fp32 compute copy holds the bf16 weights exactly; updated, then rounded below.
        float* w = arena_.value(p);
        const float* g = arena_.grad(p);
        chunkedBf16(*backend_, scratch_, &m_, &v_, p.gradOffset, p.numel,
                    [&](float* m, float* v, int64_t c, int64_t n) {
                      backend_->adamwUpdate(w + c, g + c, m, v, n, lr, b1, b2, eps, wd, t_);
                    });
      } else {
        backend_->adamwUpdate(target(arena_, master_, p), arena_.grad(p), m_.f32() + p.gradOffset,
                              v_.f32() + p.gradOffset, p.numel, lr, b1, b2, eps, wd, t_);
      }
    }
    if (!master_.empty()) arena_.setWeightsFrom(master_.f32());
    if (pure) arena_.roundWeights();
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
  ParamArena& arena_;
  kernels::Backend* backend_;
  Tensor m_, v_, master_;
  ChunkScratch scratch_;
  int64_t t_ = 0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
      MemoryTracker* tracker)
      : config_(c), arena_(arena), backend_(backend) {
    buf_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(arena),
                  {arena.gradSize()});
    buf_.zero();
    master_ = makeMaster(arena, backend, tracker);
    scratch_ = makeChunkScratch(arena, backend);
  }
  void step(float lr) override {
    ScopedRange r("sgd", SpanCategory::Optimizer);
    ++t_;
    const float mom = static_cast<float>(config_.momentum);
    const bool pure = pureBf16(arena_);
    for (const auto& p : arena_.params()) {
      if (!p.trainable()) continue;  // frozen: no state, no update
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      if (pure) {
        float* w = arena_.value(p);
        const float* g = arena_.grad(p);
        chunkedBf16(*backend_, scratch_, &buf_, nullptr, p.gradOffset, p.numel,
                    [&](float* m, float*, int64_t c, int64_t n) {
                      backend_->sgdUpdate(w + c, g + c, m, n, lr, mom, wd);
                    });
      } else {
        backend_->sgdUpdate(target(arena_, master_, p), arena_.grad(p), buf_.f32() + p.gradOffset,
                            p.numel, lr, mom, wd);
      }
    }
    if (!master_.empty()) arena_.setWeightsFrom(master_.f32());
    if (pure) arena_.roundWeights();
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
  ParamArena& arena_;
  kernels::Backend* backend_;
  Tensor buf_, master_;
  ChunkScratch scratch_;
  int64_t t_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(const core::OptimizerConfig& config, ParamArena& arena,
                                         kernels::Backend* backend, MemoryTracker* tracker) {
  if (config.type == "adamw") return std::make_unique<AdamW>(config, arena, backend, tracker);
  if (config.type == "sgd") return std::make_unique<Sgd>(config, arena, backend, tracker);
  throw std::invalid_argument("optimizer.type '" + config.type + "' is not one of adamw, sgd");
}

double clipGradNorm(ParamArena& arena, kernels::Backend* backend, double maxNorm) {
  ScopedRange r("grad_norm", SpanCategory::Optimizer);
  // The gradient buffer holds exactly the trainable tensors (padding is zero).
  const double norm = std::sqrt(backend->sumSquares(arena.grads().f32(), arena.gradSize()));
  if (maxNorm > 0 && std::isfinite(norm) && norm > maxNorm) {
    backend->scale(arena.grads().f32(), arena.gradSize(),
                   static_cast<float>(maxNorm / (norm + 1e-6)));
  }
  return norm;
}

}  // namespace ts::engine
