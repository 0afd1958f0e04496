// AdamW, PyTorch semantics (see kernels/cpu/adamw.cpp); bias corrections computed on the host.
#include <cmath>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void adamwK(float* p, const float* g, float* m, float* v, int64_t n, float beta1,
                       float beta2, float eps, float decay, float stepSize, float invSqrtBc2) {
  TS_GRID_LOOP(i, n) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - stepSize * mi / (sqrtf(vi) * invSqrtBc2 + eps);
  }
}
}  // namespace

void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int64_t step) {
  if (n <= 0) return;
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  adamwK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(
      param, grad, m, v, n, beta1, beta2, eps, 1.0f - lr * weight_decay, float(lr / bc1),
      float(1.0 / std::sqrt(bc2)));
  TS_CUDA_LAUNCHED("adamwUpdate");
}

}  // namespace ts::kernels::cuda
