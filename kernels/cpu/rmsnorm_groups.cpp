// RMSNorm over groups of D values inside strided rows (OpList.h): a whole row (G = 1), or each
// head of a q or k slice of the packed qkv (per-head norms), with Gemma's weight offset.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"

namespace ts::kernels::cpu {

void rmsnormGroupsForward(float* out, float* rstd, const float* inp, const float* weight, int N,
                          int G, int D, int64_t stride, float eps, float weightOffset) {
  const int64_t groups = int64_t(N) * G;
#pragma omp parallel for schedule(static) if (worthThreading(groups * D))
  for (int64_t i = 0; i < groups; ++i) {
    const int64_t at = (i / G) * stride + (i % G) * int64_t(D);
    const float* x = inp + at;
    float* o = out + at;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < D; ++c) ss += x[c] * x[c];
    const float rs = 1.0f / std::sqrt(ss / D + eps);
#pragma omp simd
    for (int c = 0; c < D; ++c) o[c] = x[c] * rs * (weightOffset + weight[c]);
    rstd[i] = rs;
  }
}

void rmsnormGroupsBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int N, int G, int D,
                           int64_t stride, float weightOffset, bool accumulate) {
  // As rmsnormBackward with w' = weightOffset + weight: dx = rstd (dn - n mean(dn n)), dn =
  // w' dout, n = x rstd; dweight = sum n dout over every group, per-thread partial sums added
  // in thread order (deterministic). Each element is read before it is written, so dinp may be
  // dout when writing.
  const int64_t groups = int64_t(N) * G;
  const int nt = worthThreading(groups * D) ? omp_get_max_threads() : 1;
  const ScratchLease partial(scratch::rmsnormBackward(D), nt);
  for (int t = 0; t < nt; ++t) std::fill_n(partial.slice(t), D, 0.0f);
#pragma omp parallel num_threads(nt)
  {
    float* dw = partial.slice(omp_get_thread_num());
#pragma omp for schedule(static)
    for (int64_t i = 0; i < groups; ++i) {
      const int64_t at = (i / G) * stride + (i % G) * int64_t(D);
      const float* x = inp + at;
      const float* g = dout + at;
      float* dx = dinp + at;
      const float rs = rstd[i];
      float sumDnN = 0.0f;
#pragma omp simd reduction(+ : sumDnN)
      for (int c = 0; c < D; ++c) sumDnN += (weightOffset + weight[c]) * g[c] * (x[c] * rs);
      const float mDnN = sumDnN / D;
      if (accumulate) {
#pragma omp simd
        for (int c = 0; c < D; ++c) {
          const float n = x[c] * rs;
          dw[c] += n * g[c];
          dx[c] += ((weightOffset + weight[c]) * g[c] - n * mDnN) * rs;
        }
      } else {
#pragma omp simd
        for (int c = 0; c < D; ++c) {
          const float n = x[c] * rs, gc = g[c];
          dw[c] += n * gc;
          dx[c] = ((weightOffset + weight[c]) * gc - n * mDnN) * rs;
        }
      }
    }
  }
  for (int t = 0; t < nt && dweight; ++t) {  // null: a frozen weight
    const float* dw = partial.slice(t);
#pragma omp simd
    for (int c = 0; c < D; ++c) dweight[c] += dw[c];
  }
}

}  // namespace ts::kernels::cpu
