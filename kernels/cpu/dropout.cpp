// Dropout with the counter-based mask of DropoutMask.h (nothing stored).
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/DropoutMask.h"

namespace ts::kernels::cpu {

void dropout(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t key) {
  const uint32_t thr = dropoutThreshold(p);
  const float s = 1.f / (1.f - p);
#pragma omp parallel for schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) out[i] = dropoutKeep(seed, key, i, thr) ? inp[i] * s : 0.f;
}

}  // namespace ts::kernels::cpu
