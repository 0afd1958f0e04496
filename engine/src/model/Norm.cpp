#include "trainscope/engine/model/Norm.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

void LayerNorm::forward(const LayerContext& c, float* out, NormSaved& s, const float* in) const {
  ScopedRange r("layernorm_fwd", SpanCategory::Norm);
  c.backend->layernormForward(out, s.mean.f32(), s.rstd.f32(), in, c.value(w_), c.value(b_),
                              static_cast<int>(c.rows()), dim_, eps_);
}

void LayerNorm::backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                         const NormSaved& s) const {
  ScopedRange r("layernorm_bwd", SpanCategory::Norm);
  c.backend->layernormBackward(dinp, c.grad(w_), c.grad(b_), dout, in, c.value(w_), s.mean.f32(),
                               s.rstd.f32(), static_cast<int>(c.rows()), dim_);
}

void RMSNorm::forward(const LayerContext& c, float* out, NormSaved& s, const float* in) const {
  ScopedRange r("rmsnorm_fwd", SpanCategory::Norm);
  c.backend->rmsnormForward(out, s.rstd.f32(), in, c.value(w_), static_cast<int>(c.rows()), dim_,
                            eps_);
}

void RMSNorm::backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                       const NormSaved& s) const {
  ScopedRange r("rmsnorm_bwd", SpanCategory::Norm);
  c.backend->rmsnormBackward(dinp, c.grad(w_), dout, in, c.value(w_), s.rstd.f32(),
                             static_cast<int>(c.rows()), dim_);
}

std::unique_ptr<Norm> makeNorm(const ParamInfo* weight, const ParamInfo* bias, int dim) {
  if (bias) return std::make_unique<LayerNorm>(weight, bias, dim);
  return std::make_unique<RMSNorm>(weight, dim);
}

}  // namespace ts::engine
