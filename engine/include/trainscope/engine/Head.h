#pragma once
// The LM head: logits = x W^T over the vocabulary, W its own lm_head (llama) or tied to the
// token embedding (GPT-2: the same view, so both gradients sum in one place).
#include "trainscope/engine/LayerContext.h"

namespace ts::engine {

class Head {
 public:
  explicit Head(const ParamInfo* weight) : w_(weight) {}
  // logits (N, V) from x (N, C).
  void forward(const LayerContext& c, float* logits, const float* x) const;
  // dx (N, C) = dlogits W (=); dW += dlogits^T x when trainable.
  void backward(const LayerContext& c, float* dx, const float* dlogits, const float* x) const;

 private:
  const ParamInfo* w_;
};

}  // namespace ts::engine
