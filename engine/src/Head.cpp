#include "trainscope/engine/Head.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

void Head::forward(const LayerContext& c, float* logits, const float* x) const {
  const int N = static_cast<int>(c.rows());
  const int V = static_cast<int>(w_->shape[0]), C = static_cast<int>(w_->shape[1]);
  ScopedRange r("lm_head_fwd", SpanCategory::Gemm, 2.0 * N * V * C);
  c.backend->matmul(logits, x, c.value(w_), N, V, C, false, true, 1.f, 0.f);
}

void Head::backward(const LayerContext& c, float* dx, const float* dlogits, const float* x) const {
  const int N = static_cast<int>(c.rows());
  const int V = static_cast<int>(w_->shape[0]), C = static_cast<int>(w_->shape[1]);
  ScopedRange r("lm_head_bwd", SpanCategory::Gemm, 4.0 * N * V * C);
  c.backend->matmul(dx, dlogits, c.value(w_), N, C, V, false, false, 1.f, 0.f);
  if (float* dw = c.grad(w_)) c.backend->matmul(dw, dlogits, x, V, C, N, true, false, 1.f, 1.f);
}

}  // namespace ts::engine
