// Fused softmax cross-entropy forward + backward, one block per row (dlogits may alias).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

__global__ void ceRow(float* losses, float* dlogits, const float* logits, const int32_t* targets,
                      int V, float dloss) {
  const int64_t row = blockIdx.x;
  const float* x = logits + row * V;
  float* dx = dlogits + row * V;
  const int t = targets[row];
  if (t < 0) {  // ignored position
    for (int j = threadIdx.x; j < V; j += blockDim.x) dx[j] = 0.0f;
    if (threadIdx.x == 0) losses[row] = 0.0f;
    return;
  }
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, x[j]);
  mx = blockMax(mx);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(x[j] - mx);
  sum = blockSum(sum);
  // Read the target logit before any thread overwrites it (aliasing).
  const float xt = t < V ? x[t] : NAN;
  __syncthreads();
  const float inv = dloss / sum;
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    dx[j] = expf(x[j] - mx) * inv - (j == t ? dloss : 0.0f);
  if (threadIdx.x == 0) losses[row] = logf(sum) + mx - xt;
}
}  // namespace

void crossEntropyForwardBackward(float* losses, float* dlogits, const float* logits,
                                 const int32_t* targets, int N, int V, float dloss) {
  if (N <= 0) return;
  ceRow<<<N, kBlock>>>(losses, dlogits, logits, targets, V, dloss);
  TS_CUDA_LAUNCHED("crossEntropyForwardBackward");
}

}  // namespace ts::kernels::cuda
