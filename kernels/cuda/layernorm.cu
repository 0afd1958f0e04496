// LayerNorm: one block per row; backward's dweight/dbias are column sums done by a second
// kernel (one thread per channel, rows in order) instead of float atomics: deterministic.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

__global__ void lnForward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                          const float* b, int C, float eps) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
  const float mu = blockSum(s) / C;
  float v = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - mu) * (x[c] - mu);
  const float rs = rsqrtf(blockSum(v) / C + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    out[row * C + c] = (x[c] - mu) * rs * w[c] + b[c];
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

__global__ void lnBackwardInput(float* dinp, const float* dout, const float* inp, const float* w,
                                const float* mean, const float* rstd, int C) {
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  const float* g = dout + row * C;
  const float mu = mean[row], rs = rstd[row];
  float a = 0.0f, bsum = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float n = (x[c] - mu) * rs, dn = w[c] * g[c];
    a += dn;
    bsum += dn * n;
  }
  const float mDn = blockSum(a) / C;
  const float mDnN = blockSum(bsum) / C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float n = (x[c] - mu) * rs, dn = w[c] * g[c];
    dinp[row * C + c] += (dn - mDn - n * mDnN) * rs;
  }
}

__global__ void lnBackwardParams(float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* mean, const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int i = 0; i < N; ++i) {
    const float g = dout[int64_t(i) * C + c];
    db += g;
    dw += (inp[int64_t(i) * C + c] - mean[i]) * rstd[i] * g;
  }
  if (dweight) dweight[c] += dw;  // null: frozen
  if (dbias) dbias[c] += db;
}
}  // namespace

void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C, float eps) {
  if (N <= 0) return;
  lnForward<<<N, kBlock>>>(out, mean, rstd, inp, weight, bias, C, eps);
  TS_CUDA_LAUNCHED("layernormForward");
}

void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       int N, int C) {
  if (N <= 0) return;
  lnBackwardInput<<<N, kBlock>>>(dinp, dout, inp, weight, mean, rstd, C);
  TS_CUDA_LAUNCHED("layernormBackward(input)");
  if (!dweight && !dbias) return;  // frozen
  lnBackwardParams<<<(C + 127) / 128, 128>>>(dweight, dbias, dout, inp, mean, rstd, N, C);
  TS_CUDA_LAUNCHED("layernormBackward(params)");
}

}  // namespace ts::kernels::cuda
