#pragma once
// The LM head: logits = x W^T over the vocabulary, W its own lm_head (llama) or tied to the
// token embedding (GPT-2: the same view, so both gradients sum in one place). Under bf16 GEMMs
// (precision.gemm) it multiplies the stored bf16 weight with the bf16-rounded input, and in
// backward the bf16-rounded logit gradient, fp32 accumulation, as the block linears do.
#include "trainscope/engine/model/LayerContext.h"

namespace ts::engine {

class Head {
 public:
  Head(const ParamInfo* weight, bool bf16Gemm) : w_(weight), bf16_(bf16Gemm) {}
  bool bf16Gemm() const { return bf16_; }
  // logits (N, V) from x (N, C).
  void forward(const LayerContext& c, float* logits, const float* x) const;
  // dx (N, C) = dlogits W (=); dW += dlogits^T x when trainable.
  void backward(const LayerContext& c, float* dx, const float* dlogits, const float* x) const;

 private:
  const ParamInfo* w_;
  bool bf16_;
};

}  // namespace ts::engine
