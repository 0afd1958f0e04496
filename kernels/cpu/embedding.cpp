// Token + position embedding. Backward scatters into dwte; rows may repeat, so threads split
// the channel dimension instead of the tokens (no races, deterministic order).
#include <omp.h>

#include <algorithm>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cpu {

void embeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                      int T, int C) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(B) * T * C))
  for (int bt = 0; bt < B * T; ++bt) {
    const float* e = wte + int64_t(tokens[bt]) * C;
    float* o = out + int64_t(bt) * C;
    if (!wpe) {  // no position table (rotary positions)
      std::copy(e, e + C, o);
      continue;
    }
    const float* p = wpe + int64_t(bt % T) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
  }
}

void embeddingForwardBf16(float* out, const int32_t* tokens, const uint16_t* wte,
                          const uint16_t* wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(B) * T * C))
  for (int bt = 0; bt < B * T; ++bt) {
    const uint16_t* e = wte + int64_t(tokens[bt]) * C;
    float* o = out + int64_t(bt) * C;
    if (!wpe) {
      for (int c = 0; c < C; ++c) o[c] = kernels::bf16ToFloat(e[c]);
      continue;
    }
    const uint16_t* p = wpe + int64_t(bt % T) * C;
    for (int c = 0; c < C; ++c) o[c] = kernels::bf16ToFloat(e[c]) + kernels::bf16ToFloat(p[c]);
  }
}

void embeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                       int T, int C) {
  if (!dwte && !dwpe) return;  // both frozen
  const bool par = worthThreading(int64_t(B) * T * C);
#pragma omp parallel if (par)
  {
    // Channel slices of whole cache lines (16 floats) per thread.
    const int tid = omp_get_thread_num(), cnt = omp_get_num_threads();
    const int lines = (C + 15) / 16;
    const int c0 = std::min(C, 16 * (lines * tid / cnt));
    const int c1 = std::min(C, 16 * (lines * (tid + 1) / cnt));
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* g = dout + (int64_t(b) * T + t) * C;
        if (!dwte) {  // a frozen token table
          float* dp = dwpe + int64_t(t) * C;
#pragma omp simd
          for (int c = c0; c < c1; ++c) dp[c] += g[c];
          continue;
        }
        float* dw = dwte + int64_t(tokens[b * T + t]) * C;
        if (!dwpe) {
#pragma omp simd
          for (int c = c0; c < c1; ++c) dw[c] += g[c];
          continue;
        }
        float* dp = dwpe + int64_t(t) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) {
          dw[c] += g[c];
          dp[c] += g[c];
        }
      }
    }
  }
}

}  // namespace ts::kernels::cpu
