#pragma once
// Shared helpers for the CUDA twins: error checks that throw (CudaCheck.h), launch geometry,
// reductions.
#include <cuda_runtime.h>

#include "CudaCheck.h"

namespace ts::kernels::cuda {

// Grid-stride loop over [0, n).
#define TS_GRID_LOOP(i, n)                                                  \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

constexpr int kElementwiseBlock = 256;

inline unsigned gridFor(int64_t n, int block) {
  const int64_t g = (n + block - 1) / block;
  return unsigned(g < 65535 * 32 ? (g > 0 ? g : 1) : 65535 * 32);
}

__device__ inline float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ inline float blockSum(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warpSum(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  return warpSum(v);
}
__device__ inline float blockMax(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warpMax(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -INFINITY;
  return warpMax(v);
}

}  // namespace ts::kernels::cuda
