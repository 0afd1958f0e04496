// Sum of squares in double: a fixed grid of blocks writes partial sums, one block adds them
// in order (deterministic), and the result is copied to the host.
#include <mutex>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlocks = 512, kThreads = 256;

__device__ double blockSumD(double v) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

__global__ void partialSq(double* partial, const float* x, int64_t n) {
  double s = 0.0;
  TS_GRID_LOOP(i, n) s += double(x[i]) * double(x[i]);
  s = blockSumD(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void finalSum(double* partial) {
  double s = 0.0;
  for (int i = threadIdx.x; i < kBlocks; i += kThreads) s += partial[i];
  s = blockSumD(s);
  if (threadIdx.x == 0) partial[kBlocks] = s;
}
}  // namespace

double sumSquares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  static std::mutex mu;
  static double* partial = nullptr;  // kBlocks + 1 doubles, kept for the process lifetime
  std::lock_guard<std::mutex> lock(mu);
  if (!partial) TS_CUDA_CHECK(cudaMalloc(&partial, (kBlocks + 1) * sizeof(double)));
  partialSq<<<kBlocks, kThreads>>>(partial, x, n);
  finalSum<<<1, kThreads>>>(partial);
  TS_CUDA_LAUNCHED("sumSquares");
  double result = 0.0;
  TS_CUDA_CHECK(cudaMemcpy(&result, partial + kBlocks, sizeof(double), cudaMemcpyDeviceToHost));
  return result;
}

}  // namespace ts::kernels::cuda
