// y += x (gradient accumulation).
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void accumulate(float* y, const float* x, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace ts::kernels::cpu
