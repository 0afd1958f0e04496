// y += x.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void accK(float* y, const float* x, int64_t n) {
  TS_GRID_LOOP(i, n) y[i] += x[i];
}
}  // namespace

void accumulate(float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  accK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(y, x, n);
  TS_CUDA_LAUNCHED("accumulate");
}
}  // namespace ts::kernels::cuda
