// Elementwise add (residual stream).
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void residualForward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace ts::kernels::cpu
