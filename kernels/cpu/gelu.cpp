// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {
constexpr float kS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;
}  // namespace

void geluForward(float* out, const float* inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    // 0.5 (1 + tanh u) = sigmoid(2u): no cancellation for negative x.
    out[i] = x / (1.0f + vexp(-2.0f * kS * (x + kA * x * x * x)));
  }
}

void geluBackward(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) {
    // Beyond |x| = 10 the derivative is 0 or 1 to float precision; clamping keeps x^3 finite.
    const float x = vmin(vmax(inp[i], -10.0f), 10.0f);
    // With s = sigmoid(2u): d/dx = s + x * 2 s (1 - s) u', and 1 - s = e s for e = exp(-2u).
    const float e = vexp(-2.0f * kS * (x + kA * x * x * x));
    const float s = 1.0f / (1.0f + e);
    const float d = s + x * 2.0f * s * (e * s) * kS * (1.0f + 3.0f * kA * x * x);
    dinp[i] = d * dout[i];
  }
}

}  // namespace ts::kernels::cpu
