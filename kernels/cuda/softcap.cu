// Tanh soft-capping of logits (Gemma 2): x = cap tanh(x / cap), keeping 1 - tanh^2 for backward.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void softcapForwardK(float* x, float* grad, int64_t n, float cap) {
  TS_GRID_LOOP(i, n) {
    const float t = tanhf(x[i] / cap);
    x[i] = cap * t;
    grad[i] = 1.f - t * t;
  }
}
__global__ void softcapBackwardK(float* dx, const float* grad, int64_t n) {
  TS_GRID_LOOP(i, n) dx[i] *= grad[i];
}
}  // namespace

void softcapForward(float* x, float* grad, int64_t n, float cap) {
  if (n <= 0) return;
  softcapForwardK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, grad, n, cap);
  TS_CUDA_LAUNCHED("softcapForward");
}

void softcapBackward(float* dx, const float* grad, int64_t n) {
  if (n <= 0) return;
  softcapBackwardK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(dx, grad, n);
  TS_CUDA_LAUNCHED("softcapBackward");
}
}  // namespace ts::kernels::cuda
