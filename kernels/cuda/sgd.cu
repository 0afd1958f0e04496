// SGD with momentum, PyTorch semantics (see kernels/cpu/sgd.cpp).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void sgdK(float* p, const float* g, float* buf, int64_t n, float lr, float mu,
                     float wd) {
  TS_GRID_LOOP(i, n) {
    const float gi = g[i] + wd * p[i];
    const float b = mu * buf[i] + gi;
    buf[i] = b;
    p[i] -= lr * b;
  }
}
}  // namespace

void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
               float weight_decay) {
  if (n <= 0) return;
  sgdK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(param, grad, buf, n, lr, momentum,
                                                             weight_decay);
  TS_CUDA_LAUNCHED("sgdUpdate");
}

}  // namespace ts::kernels::cuda
