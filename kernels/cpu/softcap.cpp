// Tanh soft-capping of logits (Gemma 2): x = cap tanh(x / cap), keeping 1 - tanh^2 for backward.
// std::tanh, not the vectorised approximation: logits feed the loss directly.
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void softcapForward(float* x, float* grad, int64_t n, float cap) {
#pragma omp parallel for schedule(static) if (worthThreading(n * 8))
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::tanh(x[i] / cap);
    x[i] = cap * t;
    grad[i] = 1.f - t * t;
  }
}

void softcapBackward(float* dx, const float* grad, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) dx[i] *= grad[i];
}

}  // namespace ts::kernels::cpu
