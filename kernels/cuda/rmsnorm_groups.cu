// RMSNorm over groups of D values inside strided rows (OpList.h): one block per group (row n,
// group g); backward's dweight is a column sum by a second kernel (one thread per channel,
// groups in order) instead of float atomics: deterministic, as rmsnorm.cu.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

__device__ inline int64_t groupAt(int64_t i, int G, int D, int64_t stride) {
  return (i / G) * stride + (i % G) * int64_t(D);
}

__global__ void groupsForward(float* out, float* rstd, const float* inp, const float* w, int G,
                              int D, int64_t stride, float eps, float wOff) {
  const int64_t i = blockIdx.x, at = groupAt(i, G, D, stride);
  const float* x = inp + at;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) ss += x[c] * x[c];
  const float rs = rsqrtf(blockSum(ss) / D + eps);
  // blockSum's last barrier: every thread has read x before any writes out (may be inp).
  for (int c = threadIdx.x; c < D; c += blockDim.x) out[at + c] = x[c] * rs * (wOff + w[c]);
  if (threadIdx.x == 0) rstd[i] = rs;
}

// dx = rstd (dn - n mean(dn n)), n = x rstd, dn = (wOff + w) dout; += or = (then dinp may be
// dout: each thread reads its elements before writing them, the sum is done before).
__global__ void groupsBackwardInput(float* dinp, const float* dout, const float* inp,
                                    const float* w, const float* rstd, int G, int D, int64_t stride,
                                    float wOff, bool accumulate) {
  const int64_t i = blockIdx.x, at = groupAt(i, G, D, stride);
  const float* x = inp + at;
  const float* g = dout + at;
  const float rs = rstd[i];
  float a = 0.0f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) a += (wOff + w[c]) * g[c] * (x[c] * rs);
  const float mDnN = blockSum(a) / D;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const float dx = ((wOff + w[c]) * g[c] - x[c] * rs * mDnN) * rs;
    dinp[at + c] = accumulate ? dinp[at + c] + dx : dx;
  }
}

__global__ void groupsBackwardWeight(float* dweight, const float* dout, const float* inp,
                                     const float* rstd, int64_t groups, int G, int D,
                                     int64_t stride) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= D) return;
  float dw = 0.0f;
  for (int64_t i = 0; i < groups; ++i) {
    const int64_t at = groupAt(i, G, D, stride) + c;
    dw += inp[at] * rstd[i] * dout[at];
  }
  dweight[c] += dw;
}
}  // namespace

void rmsnormGroupsForward(float* out, float* rstd, const float* inp, const float* weight, int N,
                          int G, int D, int64_t stride, float eps, float weightOffset) {
  const int64_t groups = int64_t(N) * G;
  if (groups <= 0 || D <= 0) return;
  groupsForward<<<unsigned(groups), kBlock>>>(out, rstd, inp, weight, G, D, stride, eps,
                                              weightOffset);
  TS_CUDA_LAUNCHED("rmsnormGroupsForward");
}

void rmsnormGroupsBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int N, int G, int D,
                           int64_t stride, float weightOffset, bool accumulate) {
  const int64_t groups = int64_t(N) * G;
  if (groups <= 0 || D <= 0) return;
  // dweight first: in place, the input kernel overwrites dout.
  if (dweight) {
    groupsBackwardWeight<<<(D + 127) / 128, 128>>>(dweight, dout, inp, rstd, groups, G, D, stride);
    TS_CUDA_LAUNCHED("rmsnormGroupsBackward(weight)");
  }
  groupsBackwardInput<<<unsigned(groups), kBlock>>>(dinp, dout, inp, weight, rstd, G, D, stride,
                                                    weightOffset, accumulate);
  TS_CUDA_LAUNCHED("rmsnormGroupsBackward(input)");
}

}  // namespace ts::kernels::cuda
