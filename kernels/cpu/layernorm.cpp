// LayerNorm over the last dim; two-pass mean/variance per row for accuracy.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuScratch.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(N) * C))
  for (int i = 0; i < N; ++i) {
    const float* x = inp + int64_t(i) * C;
    float* o = out + int64_t(i) * C;
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += x[c];
    const float mu = s / C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (x[c] - mu) * (x[c] - mu);
    const float rs = 1.0f / std::sqrt(v / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (x[c] - mu) * rs * weight[c] + bias[c];
    mean[i] = mu;
    rstd[i] = rs;
  }
}

void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       int N, int C) {
  // dweight/dbias are reductions over rows: each thread sums its static chunk of rows into a
  // private buffer, then the buffers are added in thread order (deterministic).
  const int nt = worthThreading(int64_t(N) * C) ? omp_get_max_threads() : 1;
  const ScratchLease partial(scratch::layernormBackward(C), nt);
  // Zeroed here, not by each thread: a team smaller than nt leaves slices nobody writes.
  for (int t = 0; t < nt; ++t) std::fill_n(partial.slice(t), 2 * C, 0.0f);
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    float* dw = partial.slice(tid);
    float* db = dw + C;
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const float* x = inp + int64_t(i) * C;
      const float* g = dout + int64_t(i) * C;
      float* dx = dinp + int64_t(i) * C;
      const float mu = mean[i], rs = rstd[i];
      float sumDn = 0.0f, sumDnN = 0.0f;
#pragma omp simd reduction(+ : sumDn, sumDnN)
      for (int c = 0; c < C; ++c) {
        const float n = (x[c] - mu) * rs;
        const float dn = weight[c] * g[c];
        sumDn += dn;
        sumDnN += dn * n;
      }
      const float mDn = sumDn / C, mDnN = sumDnN / C;
#pragma omp simd
      for (int c = 0; c < C; ++c) {
        const float n = (x[c] - mu) * rs;
        const float dn = weight[c] * g[c];
        db[c] += g[c];
        dw[c] += n * g[c];
        dx[c] += (dn - mDn - n * mDnN) * rs;
      }
    }
  }
  for (int t = 0; t < nt; ++t) {
    const float* dw = partial.slice(t);
    const float* db = dw + C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      if (dweight) dweight[c] += dw[c];  // null: a frozen weight
      if (dbias) dbias[c] += db[c];
    }
  }
}

}  // namespace ts::kernels::cpu
