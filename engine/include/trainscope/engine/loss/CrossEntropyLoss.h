#pragma once
// The language-model loss, outside the model: the model's forward produces logits; this loss
// turns them into the summed token cross-entropy and writes dloss * (softmax - onehot) over them
// in place, ready for the model's backward. Distillation will be a second loss of this shape.
#include <cstdint>

#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(kernels::Backend* backend) : backend_(backend) {}
  // logits: N rows of V (device), overwritten by their gradient. targets: N host ids (< 0 are
  // ignored: no loss, no gradient), staged through targetsBuf (N int32, device); lossesBuf
  // (N floats, device) receives the per-row losses. Returns the sum over counted targets and
  // their number through `count`; the caller normalises (gradient accumulation).
  double forwardBackward(Tensor& logits, Tensor& targetsBuf, Tensor& lossesBuf,
                         const int32_t* targets, int N, int V, float dloss,
                         int64_t* count = nullptr) const;

 private:
  kernels::Backend* backend_;
};

}  // namespace ts::engine
