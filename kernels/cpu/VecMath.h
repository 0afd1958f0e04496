#pragma once
// Branch-free float math that GCC vectorises inside `#pragma omp simd` loops (libm's expf and
// tanhf are scalar calls unless -ffast-math, which we avoid for NaN propagation).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ts::kernels::cpu {

// min/max as compares: std::fmin/fmax are library calls without -ffast-math and stop the
// vectoriser. NaN in `a` is kept by vmax/vmin's false branch only for the second operand,
// which is fine where they are used (clamps and running maxima).
inline float vmax(float a, float b) {
  return a > b ? a : b;
}
inline float vmin(float a, float b) {
  return a < b ? a : b;
}

// exp(x) with ~2 ulp error (Cephes expf polynomial on a ln2 range reduction). exp of very
// negative x (including -inf) is 0, above 88.72 it is +inf, NaN stays NaN.
#pragma omp declare simd notinbranch
inline float vexp(float x) {
  const float xc = vmin(vmax(x, -87.0f), 88.72f);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // 2^n as 2 * 2^(n-1) so n = 128 (x near 88.72) stays representable.
  const int32_t e = (static_cast<int32_t>(n) + 126) << 23;
  const float res = y * std::bit_cast<float>(e) * 2.0f;
  const float big = x > 88.72f ? std::numeric_limits<float>::infinity() : res;
  return x < -87.0f ? 0.0f : (x != x ? x : big);
}

// tanh through exp: 1 - 2 / (exp(2u) + 1); absolute error ~1e-7, saturates correctly.
#pragma omp declare simd notinbranch
inline float vtanh(float u) {
  return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f);
}

// Threads to use for n elements of streaming work: tiny arrays stay on one thread because
// waking a team costs more than the loop.
inline bool worthThreading(int64_t work) {
  return work >= (1 << 15);
}

}  // namespace ts::kernels::cpu
