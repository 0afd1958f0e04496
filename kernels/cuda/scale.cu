// x *= s.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void scaleK(float* x, int64_t n, float s) {
  TS_GRID_LOOP(i, n) x[i] *= s;
}
}  // namespace

void scale(float* x, int64_t n, float s) {
  if (n <= 0) return;
  scaleK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, n, s);
  TS_CUDA_LAUNCHED("scale");
}
}  // namespace ts::kernels::cuda
