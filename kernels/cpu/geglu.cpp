// GeGLU on rows [gate | up]: out = gelu_tanh(gate) * up, with geluForward's formulas (gelu.cpp:
// the tanh through a sigmoid, no cancellation for negative gates).
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {
constexpr float kS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;
}  // namespace

void gegluForward(float* out, const float* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(N) * F))
  for (int i = 0; i < N; ++i) {
    const float* gate = inp + int64_t(i) * 2 * F;
    const float* up = gate + F;
    float* o = out + int64_t(i) * F;
#pragma omp simd
    for (int c = 0; c < F; ++c) {
      const float x = gate[c];
      o[c] = x / (1.0f + vexp(-2.0f * kS * (x + kA * x * x * x))) * up[c];
    }
  }
}

void gegluBackward(float* dinp, const float* inp, const float* dout, int N, int F) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(N) * F))
  for (int i = 0; i < N; ++i) {
    const float* gate = inp + int64_t(i) * 2 * F;
    const float* up = gate + F;
    const float* go = dout + int64_t(i) * F;
    float* dgate = dinp + int64_t(i) * 2 * F;
    float* dup = dgate + F;
#pragma omp simd
    for (int c = 0; c < F; ++c) {
      const float g = gate[c];
      const float gelu = g / (1.0f + vexp(-2.0f * kS * (g + kA * g * g * g)));
      // The derivative as geluBackward: clamped beyond |x| = 10 (0 or 1 to float precision).
      const float x = vmin(vmax(g, -10.0f), 10.0f);
      const float e = vexp(-2.0f * kS * (x + kA * x * x * x));
      const float s = 1.0f / (1.0f + e);
      const float d = s + x * 2.0f * s * (e * s) * kS * (1.0f + 3.0f * kA * x * x);
      dgate[c] = go[c] * up[c] * d;
      dup[c] = go[c] * gelu;
    }
  }
}

}  // namespace ts::kernels::cpu
