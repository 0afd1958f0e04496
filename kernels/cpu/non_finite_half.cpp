// Count of inf/NaN among 16-bit values: an exponent of all ones (bf16: 0x7F80, fp16: 0x7C00).
// Integer tests, exact: the count does not depend on the thread count.
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

int64_t countNonFiniteHalf(const uint16_t* x, int64_t n, bool fp16) {
  const uint16_t e = fp16 ? 0x7C00u : 0x7F80u;
  int64_t count = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : count) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) count += int64_t((x[i] & e) == e);
  return count;
}

}  // namespace ts::kernels::cpu
