// Distillation loss and gradient (OpList.h), one block per row (dlogits may alias logits).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

__global__ void distillRow(float* ce, float* kl, float* dlogits, const float* logits,
                           const float* teacher, const int32_t* targets, int V, float invT, float a,
                           float b) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  const float* z = teacher + row * V;
  float* dx = dlogits + row * V;
  const int t = targets[row];
  if (t < 0) {
    for (int j = threadIdx.x; j < V; j += blockDim.x) dx[j] = 0.0f;
    if (threadIdx.x == 0) ce[row] = kl[row] = 0.0f;
    return;
  }
  float mx = -INFINITY, mz = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    mx = fmaxf(mx, x[j]);
    mz = fmaxf(mz, z[j]);
  }
  mx = blockMax(mx);
  mz = blockMax(mz);
  float sh = 0.f, sq = 0.f, sp = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    sh += expf(x[j] - mx);
    sq += expf((x[j] - mx) * invT);
    sp += expf((z[j] - mz) * invT);
  }
  sh = blockSum(sh);
  sq = blockSum(sq);
  sp = blockSum(sp);
  const float lsp = logf(sp), lsq = logf(sq);
  float k = 0.f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float lp = (z[j] - mz) * invT - lsp;
    k += expf(lp) * (lp - ((x[j] - mx) * invT - lsq));
  }
  k = blockSum(k);
  const float xt = t < V ? x[t] : NAN;
  __syncthreads();  // every read of the row before any write (aliasing)
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float s = expf(x[j] - mx) / sh;
    const float q = expf((x[j] - mx) * invT) / sq, p = expf((z[j] - mz) * invT) / sp;
    dx[j] = a * s + b * (q - p) - (j == t ? a : 0.0f);
  }
  if (threadIdx.x == 0) {
    ce[row] = logf(sh) + mx - xt;
    kl[row] = k;
  }
}
}  // namespace

void distillForwardBackward(float* ce, float* kl, float* dlogits, const float* logits,
                            const float* teacher, const int32_t* targets, int N, int V,
                            float temperature, float alpha, float dloss) {
  if (N <= 0) return;
  distillRow<<<N, kBlock>>>(ce, kl, dlogits, logits, teacher, targets, V, 1.0f / temperature,
                            dloss * (1.0f - alpha), dloss * alpha * temperature);
  TS_CUDA_LAUNCHED("distillForwardBackward");
}

}  // namespace ts::kernels::cuda
