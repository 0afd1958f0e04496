// out = a + b (residual stream; out may alias a or b).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void addK(float* out, const float* a, const float* b, int64_t n) {
  TS_GRID_LOOP(i, n) out[i] = a[i] + b[i];
}
}  // namespace

void residualForward(float* out, const float* a, const float* b, int64_t n) {
  if (n <= 0) return;
  addK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, a, b, n);
  TS_CUDA_LAUNCHED("residualForward");
}
}  // namespace ts::kernels::cuda
