// Sum of squares in double of 16-bit values, each widened exactly (Numeric.h, as the CPU):
// a fixed grid of blocks writes partial sums, one block adds them in order (deterministic), and
// the result is copied to the host: one synchronization for a whole 16-bit gradient buffer.
#include <mutex>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlocks = 512, kThreads = 256;

__device__ double blockSumHalf(double v) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

__global__ void partialSqHalf(double* partial, const uint16_t* x, int64_t n, bool fp16) {
  double s = 0.0;
  TS_GRID_LOOP(i, n) {
    const double v = fp16 ? ts::kernels::fp16ToFloat(x[i]) : ts::kernels::bf16ToFloat(x[i]);
    s += v * v;
  }
  s = blockSumHalf(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void finalSumHalf(double* partial) {
  double s = 0.0;
  for (int i = threadIdx.x; i < kBlocks; i += kThreads) s += partial[i];
  s = blockSumHalf(s);
  if (threadIdx.x == 0) partial[kBlocks] = s;
}
}  // namespace

double sumSquaresHalf(const uint16_t* x, int64_t n, bool fp16) {
  if (n <= 0) return 0.0;
  static std::mutex mu;
  static double* partial = nullptr;  // kBlocks + 1 doubles, kept for the process lifetime
  std::lock_guard<std::mutex> lock(mu);
  if (!partial) TS_CUDA_CHECK(cudaMalloc(&partial, (kBlocks + 1) * sizeof(double)));
  partialSqHalf<<<kBlocks, kThreads>>>(partial, x, n, fp16);
  finalSumHalf<<<1, kThreads>>>(partial);
  TS_CUDA_LAUNCHED("sumSquaresHalf");
  double result = 0.0;
  TS_CUDA_CHECK(cudaMemcpy(&result, partial + kBlocks, sizeof(double), cudaMemcpyDeviceToHost));
  return result;
}

}  // namespace ts::kernels::cuda
