#include "trainscope/engine/model/Embedding.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

void Embedding::forward(const LayerContext& c, float* out, const int32_t* tokens) const {
  ScopedRange r("embedding_fwd", SpanCategory::Elementwise);
  if (bf16_) {
    c.backend->embeddingForwardBf16(out, tokens, c.arena->value16(*wte_),
                                    wpe_ ? c.arena->value16(*wpe_) : nullptr, c.B, c.T, dim_);
    return;
  }
  c.backend->embeddingForward(out, tokens, c.value(wte_), c.value(wpe_), c.B, c.T, dim_);
}

void Embedding::backward(const LayerContext& c, const float* dout, const int32_t* tokens) const {
  float* dwte = c.grad(wte_);
  float* dwpe = c.grad(wpe_);
  if (!dwte && !dwpe) return;
  ScopedRange r("embedding_bwd", SpanCategory::Elementwise);
  c.backend->embeddingBackward(dwte, dwpe, dout, tokens, c.B, c.T, dim_);
}

}  // namespace ts::engine
