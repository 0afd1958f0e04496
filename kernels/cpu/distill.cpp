// Distillation loss and gradient (OpList.h), one row at a time: three softmaxes over a row
// that stays in cache. dlogits may alias logits: every read of a row precedes its writes.
#include <omp.h>

#include <cmath>
#include <limits>

#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"

namespace ts::kernels::cpu {

void distillForwardBackward(float* ce, float* kl, float* dlogits, const float* logits,
                            const float* teacher, const int32_t* targets, int N, int V,
                            float temperature, float alpha, float dloss) {
  const float invT = 1.0f / temperature;
  const ScratchLease rows(scratch::distill(V), omp_get_max_threads());
#pragma omp parallel
  {
    float* const q = rows.slice(omp_get_thread_num());
    float* const pt = q + V;
#pragma omp for schedule(static)
    for (int i = 0; i < N; ++i) {
      const float* x = logits + int64_t(i) * V;
      const float* z = teacher + int64_t(i) * V;
      float* dx = dlogits + int64_t(i) * V;
      const int32_t t = targets[i];
      if (t < 0) {
        ce[i] = kl[i] = 0.f;
        for (int j = 0; j < V; ++j) dx[j] = 0.f;
        continue;
      }
      float mx = -std::numeric_limits<float>::infinity(), mz = mx;
      for (int j = 0; j < V; ++j) {
        mx = std::fmax(mx, x[j]);
        mz = std::fmax(mz, z[j]);
      }
      // Hard softmax, tempered student and teacher; log-sum-exps for the losses.
      double sh = 0, sq = 0, sp = 0;
      for (int j = 0; j < V; ++j) {
        sh += std::exp(double(x[j] - mx));
        q[size_t(j)] = std::exp((x[j] - mx) * invT);
        sq += q[size_t(j)];
        pt[size_t(j)] = std::exp((z[j] - mz) * invT);
        sp += pt[size_t(j)];
      }
      const float xt = t < V ? x[t] : std::numeric_limits<float>::quiet_NaN();
      ce[i] = static_cast<float>(std::log(sh) + mx - xt);
      // KL = sum p (log p - log q), log p = (z - mz)/T - log sp, log q = (x - mx)/T - log sq.
      const double lsp = std::log(sp), lsq = std::log(sq);
      double k = 0;
      for (int j = 0; j < V; ++j) {
        const double p = pt[size_t(j)] / sp;
        if (p > 0) k += p * ((z[j] - mz) * invT - lsp - (x[j] - mx) * invT + lsq);
      }
      kl[i] = static_cast<float>(k);
      const float a = dloss * (1.0f - alpha), b = dloss * alpha * temperature;
      for (int j = 0; j < V; ++j) {
        const float s = static_cast<float>(std::exp(double(x[j] - mx)) / sh);
        dx[j] = a * s + b * static_cast<float>(q[size_t(j)] / sq - pt[size_t(j)] / sp);
      }
      if (t < V) dx[t] -= a;
    }
  }
}

}  // namespace ts::kernels::cpu
