// Sum of squares in double for the global gradient norm. Per-thread partials are added in
// thread order so the result is bitwise reproducible for a fixed thread count (resume).
#include <omp.h>

#include <vector>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

double sumSquares(const float* x, int64_t n) {
  const int nt = worthThreading(n) ? omp_get_max_threads() : 1;
  std::vector<double> partial(size_t(nt) * 8, 0.0);  // 64-byte spacing: no false sharing
#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num(), cnt = omp_get_num_threads();
    const int64_t begin = n * tid / cnt, end = n * (tid + 1) / cnt;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = begin; i < end; ++i) s += double(x[i]) * double(x[i]);
    partial[size_t(tid) * 8] = s;
  }
  double total = 0.0;
  for (int t = 0; t < nt; ++t) total += partial[size_t(t) * 8];
  return total;
}

}  // namespace ts::kernels::cpu
