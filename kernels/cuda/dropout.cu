// Dropout with the counter-based mask of DropoutMask.h (nothing stored; same mask as the CPU).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"
#include "trainscope/kernels/DropoutMask.h"

namespace ts::kernels::cuda {

namespace {
__global__ void dropoutK(float* out, const float* inp, int64_t n, uint32_t thr, float s,
                         uint64_t seed, uint64_t key) {
  TS_GRID_LOOP(i, n) out[i] = dropoutKeep(seed, key, i, thr) ? inp[i] * s : 0.f;
}
}  // namespace

void dropout(float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t key) {
  if (n <= 0) return;
  dropoutK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, inp, n, dropoutThreshold(p),
                                                                 1.f / (1.f - p), seed, key);
  TS_CUDA_LAUNCHED("dropout");
}
}  // namespace ts::kernels::cuda
