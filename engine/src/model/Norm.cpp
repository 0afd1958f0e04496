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
  const int N = static_cast<int>(c.rows());
  if (offset_ == 0.f)
    c.backend->rmsnormForward(out, s.rstd.f32(), in, c.value(w_), N, dim_, eps_);
  else
    c.backend->rmsnormGroupsForward(out, s.rstd.f32(), in, c.value(w_), N, 1, dim_, dim_, eps_,
                                    offset_);
}

void RMSNorm::backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                       const NormSaved& s) const {
  ScopedRange r("rmsnorm_bwd", SpanCategory::Norm);
  const int N = static_cast<int>(c.rows());
  if (offset_ == 0.f)
    c.backend->rmsnormBackward(dinp, c.grad(w_), dout, in, c.value(w_), s.rstd.f32(), N, dim_);
  else
    c.backend->rmsnormGroupsBackward(dinp, c.grad(w_), dout, in, c.value(w_), s.rstd.f32(), N, 1,
                                     dim_, dim_, offset_, true);
}

void RMSNorm::backwardWrite(const LayerContext& c, float* dinp, const float* dout, const float* in,
                            const NormSaved& s) const {
  ScopedRange r("rmsnorm_bwd", SpanCategory::Norm);
  c.backend->rmsnormGroupsBackward(dinp, c.grad(w_), dout, in, c.value(w_), s.rstd.f32(),
                                   static_cast<int>(c.rows()), 1, dim_, dim_, offset_, false);
}

void IdentityNorm::forward(const LayerContext& c, float* out, NormSaved&, const float* in) const {
  if (out != in) c.backend->copyOnDevice(out, in, c.rows() * dim_ * int64_t(sizeof(float)));
}

void IdentityNorm::backward(const LayerContext& c, float* dinp, const float* dout, const float*,
                            const NormSaved&) const {
  c.backend->accumulate(dinp, dout, c.rows() * dim_);
}

std::unique_ptr<Norm> makeNorm(const ParamInfo* weight, const ParamInfo* bias, int dim, float eps,
                               float offset) {
  if (!weight) return std::make_unique<IdentityNorm>(dim);
  if (bias) return std::make_unique<LayerNorm>(weight, bias, dim, eps);
  return std::make_unique<RMSNorm>(weight, dim, eps, offset);
}

}  // namespace ts::engine
