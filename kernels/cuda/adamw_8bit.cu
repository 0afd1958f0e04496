// 8-bit AdamW, blockwise (bitsandbytes' algorithm; OpList.h): one CUDA block per quantization
// block, one thread per element, the maps in shared memory.
#include <cmath>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"
#include "trainscope/kernels/DynamicMap.h"

namespace ts::kernels::cuda {

namespace {
__global__ void adamw8bitK(float* param, const float* grad, uint8_t* qm, uint8_t* qv, float* absM,
                           float* absV, const float* mapM, const float* mapV, int64_t n,
                           float beta1, float beta2, float eps, float stepSize, float c2,
                           float decay, bool decays) {
  __shared__ float sm[256], sv[256];
  for (int k = threadIdx.x; k < 256; k += blockDim.x) {
    sm[k] = mapM[k];
    sv[k] = mapV[k];
  }
  __syncthreads();
  const int64_t b = blockIdx.x;
  const int64_t i = b * blockDim.x + threadIdx.x;
  float mi = 0.f, vi = 0.f;
  if (i < n) {
    const float g = grad[i];
    mi = sm[qm[i]] * absM[b];
    vi = sv[qv[i]] * absV[b];
    if (isfinite(g)) {
      mi = beta1 * mi + (1.0f - beta1) * g;
      vi = beta2 * vi + (1.0f - beta2) * g * g;
      float p = param[i] + stepSize * (mi / (sqrtf(vi) + c2 * eps));
      if (decays) p *= decay;
      param[i] = p;
    } else {
      mi = 0.f;
      vi = 0.f;
    }
  }
  const float am = blockMax(fabsf(mi)), av = blockMax(fabsf(vi));
  __syncthreads();  // every thread has read absM[b] / absV[b] before thread 0 overwrites them
  if (threadIdx.x == 0) {
    absM[b] = am;
    absV[b] = av;
  }
  if (i < n) {
    qm[i] = nearestCode(sm, mi * (am > 0.f ? 1.0f / am : 0.f));
    qv[i] = nearestCode(sv, vi * (av > 0.f ? 1.0f / av : 0.f));
  }
}
}  // namespace

void adamw8bitUpdate(float* param, const float* grad, uint8_t* qm, uint8_t* qv, float* absM,
                     float* absV, const float* mapM, const float* mapV, int64_t n, int block,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     int64_t step) {
  if (n <= 0) return;
  if (block % 32 != 0 || block > 1024)
    throw std::runtime_error("adamw8bitUpdate: block must be a multiple of 32, at most 1024");
  const float c1 = 1.0f - static_cast<float>(std::pow(double(beta1), double(step)));
  const float c2 = static_cast<float>(std::sqrt(1.0 - std::pow(double(beta2), double(step))));
  const int64_t blocks = (n + block - 1) / block;
  adamw8bitK<<<unsigned(blocks), block>>>(param, grad, qm, qv, absM, absV, mapM, mapV, n, beta1,
                                          beta2, eps, -lr * c2 / c1, c2, 1.0f - lr * weight_decay,
                                          weight_decay > 0.f);
  TS_CUDA_LAUNCHED("adamw8bitUpdate");
}

}  // namespace ts::kernels::cuda
