// RMSNorm: one block per row; backward's dweight is a column sum done by a second kernel (one
// thread per channel, rows in order) instead of float atomics: deterministic, as layernorm.cu.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

__global__ void rmsForward(float* out, float* rstd, const float* inp, const float* w, int C,
                           float eps) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
  const float rs = rsqrtf(blockSum(ss) / C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) out[row * C + c] = x[c] * rs * w[c];
  if (threadIdx.x == 0) rstd[row] = rs;
}

// dx = rstd (dn - n mean(dn n)) with n = x rstd, dn = w dout; accumulated (+=).
__global__ void rmsBackwardInput(float* dinp, const float* dout, const float* inp, const float* w,
                                 const float* rstd, int C) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  const float* g = dout + row * C;
  const float rs = rstd[row];
  float a = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) a += w[c] * g[c] * (x[c] * rs);
  const float mDnN = blockSum(a) / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    dinp[row * C + c] += (w[c] * g[c] - x[c] * rs * mDnN) * rs;
}

__global__ void rmsBackwardWeight(float* dweight, const float* dout, const float* inp,
                                  const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f;
  for (int i = 0; i < N; ++i) dw += inp[int64_t(i) * C + c] * rstd[i] * dout[int64_t(i) * C + c];
  dweight[c] += dw;
}
}  // namespace

void rmsnormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps) {
  if (N <= 0) return;
  rmsForward<<<N, kBlock>>>(out, rstd, inp, weight, C, eps);
  TS_CUDA_LAUNCHED("rmsnormForward");
}

void rmsnormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C) {
  if (N <= 0) return;
  rmsBackwardInput<<<N, kBlock>>>(dinp, dout, inp, weight, rstd, C);
  TS_CUDA_LAUNCHED("rmsnormBackward(input)");
  if (!dweight) return;  // frozen
  rmsBackwardWeight<<<(C + 127) / 128, 128>>>(dweight, dout, inp, rstd, N, C);
  TS_CUDA_LAUNCHED("rmsnormBackward(weight)");
}

}  // namespace ts::kernels::cuda
