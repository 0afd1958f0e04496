// SwiGLU on rows [gate | up]: out = silu(gate) * up. sigmoid through vexp so the loops
// vectorise; exp(-g) overflowing to inf for very negative g gives sigmoid 0, as it should.
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void swigluForward(float* out, const float* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(N) * F))
  for (int i = 0; i < N; ++i) {
    const float* gate = inp + int64_t(i) * 2 * F;
    const float* up = gate + F;
    float* o = out + int64_t(i) * F;
#pragma omp simd
    for (int c = 0; c < F; ++c) {
      const float g = gate[c];
      o[c] = g / (1.0f + vexp(-g)) * up[c];
    }
  }
}

void swigluBackward(float* dinp, const float* inp, const float* dout, int N, int F) {
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
      const float s = 1.0f / (1.0f + vexp(-g));
      // silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
      dgate[c] = go[c] * up[c] * (s * (1.0f + g * (1.0f - s)));
      dup[c] = go[c] * (g * s);
    }
  }
}

}  // namespace ts::kernels::cpu
