// ReLU; backward from the saved output.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void reluF(float* out, const float* inp, int64_t n) {
  TS_GRID_LOOP(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
__global__ void reluB(float* dinp, const float* out, const float* dout, int64_t n) {
  TS_GRID_LOOP(i, n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}
}  // namespace

void reluForward(float* out, const float* inp, int64_t n) {
  if (n <= 0) return;
  reluF<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, inp, n);
  TS_CUDA_LAUNCHED("reluForward");
}

void reluBackward(float* dinp, const float* out, const float* dout, int64_t n) {
  if (n <= 0) return;
  reluB<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(dinp, out, dout, n);
  TS_CUDA_LAUNCHED("reluBackward");
}
}  // namespace ts::kernels::cuda
