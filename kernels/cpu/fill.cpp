// fill (memset, e.g. Tensor::zero for any dtype) and fillF32 (a float value).
#include <cstring>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void fill(void* dst, uint8_t value, int64_t bytes) {
  if (bytes > 0) std::memset(dst, value, static_cast<size_t>(bytes));
}

void fillF32(float* x, float value, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) x[i] = value;
}

}  // namespace ts::kernels::cpu
