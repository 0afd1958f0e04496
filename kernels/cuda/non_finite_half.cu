// Count of inf/NaN among 16-bit values (exponent all ones: bf16 0x7F80, fp16 0x7C00): per-block
// integer counts summed with an integer atomic (exact, order-free), copied to the host.
#include <mutex>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void countNonFiniteHalfK(const uint16_t* x, int64_t n, uint16_t e,
                                    unsigned long long* out) {
  __shared__ unsigned long long sh[kElementwiseBlock];
  unsigned long long c = 0;
  TS_GRID_LOOP(i, n) c += (x[i] & e) == e ? 1ull : 0ull;
  sh[threadIdx.x] = c;
  __syncthreads();
  for (int s = kElementwiseBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0 && sh[0]) atomicAdd(out, sh[0]);
}
}  // namespace

int64_t countNonFiniteHalf(const uint16_t* x, int64_t n, bool fp16) {
  if (n <= 0) return 0;
  static std::mutex mu;
  static unsigned long long* count = nullptr;  // one counter, kept for the process lifetime
  std::lock_guard<std::mutex> lock(mu);
  if (!count) TS_CUDA_CHECK(cudaMalloc(&count, sizeof *count));
  TS_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count));
  const unsigned grid = gridFor(n, kElementwiseBlock) < 1024 ? gridFor(n, kElementwiseBlock) : 1024;
  countNonFiniteHalfK<<<grid, kElementwiseBlock>>>(x, n, uint16_t(fp16 ? 0x7C00u : 0x7F80u), count);
  TS_CUDA_LAUNCHED("countNonFiniteHalf");
  unsigned long long h = 0;
  TS_CUDA_CHECK(cudaMemcpy(&h, count, sizeof h, cudaMemcpyDeviceToHost));
  return int64_t(h);
}

}  // namespace ts::kernels::cuda
