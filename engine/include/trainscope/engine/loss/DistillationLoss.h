#pragma once
// The distillation loss (Hinton et al.), outside the model like CrossEntropyLoss: over the
// student's logits and the teacher's (same rows, same vocabulary),
//   loss = alpha T^2 KL(softmax(z_t / T) || softmax(z_s / T)) + (1 - alpha) CE(z_s, target)
// per counted token, and its gradient written over the student's logits for its backward.
#include <cstdint>

#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

struct DistillationSums {
  double ce = 0, kl = 0;  // sums over the counted targets
  int64_t count = 0;
  // The objective's sum: what the gradient is of.
  double objective(double temperature, double alpha) const {
    return (1 - alpha) * ce + alpha * temperature * temperature * kl;
  }
};

class DistillationLoss {
 public:
  DistillationLoss(kernels::Backend* backend, float temperature, float alpha)
      : backend_(backend), temperature_(temperature), alpha_(alpha) {}
  // student: N rows of V (device), overwritten by dloss * d(objective)/dz_s. teacher: N rows of
  // V (device), read only. targets: N host ids (< 0 ignored), staged through targetsBuf; ceBuf
  // and klBuf (N floats each, device) receive the per-row terms.
  DistillationSums forwardBackward(Tensor& student, const Tensor& teacher, Tensor& targetsBuf,
                                   Tensor& ceBuf, Tensor& klBuf, const int32_t* targets, int N,
                                   int V, float dloss) const;

 private:
  kernels::Backend* backend_;
  float temperature_, alpha_;
};

}  // namespace ts::engine
