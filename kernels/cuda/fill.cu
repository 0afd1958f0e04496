// fill (cudaMemsetAsync) and fillF32.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void fillF32K(float* x, float value, int64_t n) {
  TS_GRID_LOOP(i, n) x[i] = value;
}
}  // namespace

void fill(void* dst, uint8_t value, int64_t bytes) {
  if (bytes <= 0) return;
  TS_CUDA_CHECK(cudaMemsetAsync(dst, value, size_t(bytes)));
}

void fillF32(float* x, float value, int64_t n) {
  if (n <= 0) return;
  fillF32K<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, value, n);
  TS_CUDA_LAUNCHED("fillF32");
}

}  // namespace ts::kernels::cuda
