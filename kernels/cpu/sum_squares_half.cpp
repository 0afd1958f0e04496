// Sum of squares in double of 16-bit values (the norm of a 16-bit gradient buffer), each
// widened exactly. Per-thread partials added in thread order, as sumSquares: reproducible for a
// fixed thread count.
#include <omp.h>

#include <vector>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

double sumSquaresHalf(const uint16_t* x, int64_t n, bool fp16) {
  const int nt = worthThreading(n) ? omp_get_max_threads() : 1;
  std::vector<double> partial(size_t(nt) * 8, 0.0);  // 64-byte spacing: no false sharing
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num(), cnt = omp_get_num_threads();
    const int64_t begin = n * tid / cnt, end = n * (tid + 1) / cnt;
    double s = 0.0;
    if (fp16) {
      for (int64_t i = begin; i < end; ++i) {
        const double v = ts::kernels::fp16ToFloat(x[i]);
        s += v * v;
      }
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t i = begin; i < end; ++i) {
        const double v = ts::kernels::bf16ToFloat(x[i]);
        s += v * v;
      }
    }
    partial[size_t(tid) * 8] = s;
  }
  double total = 0.0;
  for (int t = 0; t < nt; ++t) total += partial[size_t(t) * 8];
  return total;
}

}  // namespace ts::kernels::cpu
