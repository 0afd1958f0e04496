#include "trainscope/engine/model/Head.h"

#include <algorithm>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

void Head::forward(const LayerContext& c, float* logits, const float* x) const {
  const int N = static_cast<int>(c.rows());
  const int V = static_cast<int>(w_->shape[0]), C = static_cast<int>(w_->shape[1]);
  ScopedRange r(bf16_ ? "lm_head_fwd_bf16" : "lm_head_fwd", SpanCategory::Gemm, 2.0 * N * V * C);
  if (bf16_) {
    auto* x16 = static_cast<uint16_t*>(c.scratch->x16->data());
    c.backend->floatToBf16(x, x16, int64_t(N) * C);
    c.backend->matmulBf16(logits, x16, c.arena->value16(*w_), N, V, C, false, true, 1.f, 0.f);
    return;
  }
  WeightWindow open(*c.arena, *w_, WeightWindow::Kind::Values);
  c.backend->matmul(logits, x, c.value(w_), N, V, C, false, true, 1.f, 0.f);
}

void Head::backward(const LayerContext& c, float* dx, const float* dlogits, const float* x) const {
  const int N = static_cast<int>(c.rows());
  const int V = static_cast<int>(w_->shape[0]), C = static_cast<int>(w_->shape[1]);
  ScopedRange r(bf16_ ? "lm_head_bwd_bf16" : "lm_head_bwd", SpanCategory::Gemm, 4.0 * N * V * C);
  if (bf16_) {
    // The logit gradient goes through g16 a block of rows at a time: (N, V) in bf16 could be far
    // larger than the scratch the block GEMMs need (g16 holds at least one row of V).
    auto* x16 = static_cast<uint16_t*>(c.scratch->x16->data());
    auto* g16 = static_cast<uint16_t*>(c.scratch->g16->data());
    const int rows = static_cast<int>(std::min<int64_t>(N, c.scratch->g16->numel() / V));
    c.backend->floatToBf16(x, x16, int64_t(N) * C);
    const uint16_t* w16 = c.arena->value16(*w_);
    WeightWindow open(*c.arena, *w_, WeightWindow::Kind::Grads);
    float* dw = c.grad(w_);
    for (int r0 = 0; r0 < N; r0 += rows) {
      const int R = std::min(rows, N - r0);
      c.backend->floatToBf16(dlogits + int64_t(r0) * V, g16, int64_t(R) * V);
      c.backend->matmulBf16(dx + int64_t(r0) * C, g16, w16, R, C, V, false, false, 1.f, 0.f);
      if (dw) c.backend->matmulBf16(dw, g16, x16 + int64_t(r0) * C, V, C, R, true, false, 1.f, 1.f);
    }
    return;
  }
  {
    WeightWindow open(*c.arena, *w_, WeightWindow::Kind::Values);
    c.backend->matmul(dx, dlogits, c.value(w_), N, C, V, false, false, 1.f, 0.f);
  }
  if (float* dw = c.grad(w_)) {
    WeightWindow open(*c.arena, *w_, WeightWindow::Kind::Grads);
    c.backend->matmul(dw, dlogits, x, V, C, N, true, false, 1.f, 1.f);
  }
}

}  // namespace ts::engine
