// Count of inf/NaN values (the loss scaler's overflow check). An exponent of all ones means
// inf or NaN; the integer test and sum vectorise without FP compares and are exact, so the count
// does not depend on the thread count.
#include <cstring>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

int64_t countNonFinite(const float* x, int64_t n) {
  int64_t count = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : count) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], sizeof u);
    count += int64_t((u & 0x7F800000u) == 0x7F800000u);
  }
  return count;
}

}  // namespace ts::kernels::cpu
