// Fused softmax + cross-entropy forward and backward, one row at a time (the logits row is
// read three times while hot in cache; dlogits may alias logits).
#include <cmath>
#include <limits>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void crossEntropyForwardBackward(float* losses, float* dlogits, const float* logits,
                                 const int32_t* targets, int N, int V, float dloss) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(N) * V))
  for (int i = 0; i < N; ++i) {
    const float* x = logits + int64_t(i) * V;
    float* dx = dlogits + int64_t(i) * V;
    const int32_t t = targets[i];
    if (t < 0) {  // ignored position (padding / prompt): no loss, no gradient
      losses[i] = 0.0f;
#pragma omp simd
      for (int j = 0; j < V; ++j) dx[j] = 0.0f;
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < V; ++j) mx = vmax(mx, x[j]);
    // A target >= V is a caller bug: report it as a NaN loss (caught by the NaN-loss check)
    // rather than reading out of bounds. Read before dx (which may alias x) is written.
    const float xt = t < V ? x[t] : std::numeric_limits<float>::quiet_NaN();
    // One exp per element: store exp(x - max) in dx, then normalise in place.
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < V; ++j) {
      dx[j] = vexp(x[j] - mx);
      sum += dx[j];
    }
    losses[i] = std::log(sum) + mx - xt;
    const float inv = dloss / sum;
#pragma omp simd
    for (int j = 0; j < V; ++j) dx[j] *= inv;
    if (t < V) dx[t] -= dloss;
  }
}

}  // namespace ts::kernels::cpu
