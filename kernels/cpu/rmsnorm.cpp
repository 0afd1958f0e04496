// RMSNorm over the last dim (LLaMA): no mean subtraction, no bias.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"

namespace ts::kernels::cpu {

void rmsnormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(N) * C))
  for (int i = 0; i < N; ++i) {
    const float* x = inp + int64_t(i) * C;
    float* o = out + int64_t(i) * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; ++c) ss += x[c] * x[c];
    const float rs = 1.0f / std::sqrt(ss / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = x[c] * rs * weight[c];
    rstd[i] = rs;
  }
}

void rmsnormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C) {
  // With n = x rstd and dn = weight * dout: dx = rstd (dn - n mean(dn n)), dweight = sum n dout.
  // dweight is a reduction over rows: per-thread partial sums over static row chunks, added in
  // thread order (deterministic), as layernormBackward.
  const int nt = worthThreading(int64_t(N) * C) ? omp_get_max_threads() : 1;
  const ScratchLease partial(scratch::rmsnormBackward(C), nt);
  for (int t = 0; t < nt; ++t) std::fill_n(partial.slice(t), C, 0.0f);  // as layernormBackward
#pragma omp parallel num_threads(nt)
  {
    float* dw = partial.slice(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const float* x = inp + int64_t(i) * C;
      const float* g = dout + int64_t(i) * C;
      float* dx = dinp + int64_t(i) * C;
      const float rs = rstd[i];
      float sumDnN = 0.0f;
#pragma omp simd reduction(+ : sumDnN)
      for (int c = 0; c < C; ++c) sumDnN += weight[c] * g[c] * (x[c] * rs);
      const float mDnN = sumDnN / C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float n = x[c] * rs;
        dw[c] += n * g[c];
        dx[c] += (weight[c] * g[c] - n * mDnN) * rs;
      }
    }
  }
  for (int t = 0; t < nt && dweight; ++t) {  // null: a frozen weight
    const float* dw = partial.slice(t);
#pragma omp simd
    for (int c = 0; c < C; ++c) dweight[c] += dw[c];
  }
}

}  // namespace ts::kernels::cpu
