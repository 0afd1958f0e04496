// x *= s (gradient clipping, loss scaling).
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void scale(float* x, int64_t n, float s) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace ts::kernels::cpu
