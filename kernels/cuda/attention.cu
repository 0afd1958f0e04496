// Naive causal attention on the GPU: P (B, NH, T, T) is materialised. Simple one-thread-per-
// output kernels (correctness twin of the CPU op; the fast GPU path is flash attention).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

// att[b,h,i,j] = scale * q_i . k_j for j <= i (0 above the diagonal, filled by softmax).
__global__ void scores(float* att, const float* qkv, int B, int T, int C, int NH, float sc) {
  const int hs = C / NH;
  const int64_t total = int64_t(B) * NH * T * T;
  TS_GRID_LOOP(idx, total) {
    const int j = int(idx % T), i = int(idx / T % T);
    const int64_t bh = idx / (int64_t(T) * T);
    const int b = int(bh / NH), h = int(bh % NH);
    if (j > i) {
      att[idx] = 0.0f;
      continue;
    }
    const float* q = qkv + (int64_t(b) * T + i) * 3 * C + h * hs;
    const float* k = qkv + (int64_t(b) * T + j) * 3 * C + C + h * hs;
    float d = 0.0f;
    for (int e = 0; e < hs; ++e) d += q[e] * k[e];
    att[idx] = d * sc;
  }
}

// Row softmax over j <= i, one warp per row.
__global__ void softmaxRows(float* att, int64_t rows, int T) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % T);
  float* p = att + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, p[j]);
  mx = warpMax(mx);
  float sum = 0.0f;
  for (int j = lane; j <= i; j += 32) sum += expf(p[j] - mx);
  sum = warpSum(sum);
  for (int j = lane; j <= i; j += 32) p[j] = expf(p[j] - mx) / sum;
}

// out[b,i,h*hs+d] = sum_{j<=i} P[i,j] v[j,d].
__global__ void weightedValues(float* out, const float* att, const float* qkv, int B, int T, int C,
                               int NH) {
  const int hs = C / NH;
  const int64_t total = int64_t(B) * T * C;
  TS_GRID_LOOP(idx, total) {
    const int c = int(idx % C), h = c / hs, d = c % hs;
    const int64_t bt = idx / C;
    const int b = int(bt / T), i = int(bt % T);
    const float* p = att + ((int64_t(b) * NH + h) * T + i) * T;
    const float* v = qkv + int64_t(b) * T * 3 * C + 2 * C + h * hs + d;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += p[j] * v[int64_t(j) * 3 * C];
    out[idx] = acc;
  }
}

// dS[i,j] = P[i,j] * (dP[i,j] - sum_j P dP) * scale, with dP = dO_i . v_j; one warp per row.
__global__ void scoreGrad(float* datt, const float* att, const float* dout, const float* qkv, int B,
                          int T, int C, int NH, float sc) {
  const int hs = C / NH;
  const int64_t rows = int64_t(B) * NH * T;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % T);
  const int64_t bh = row / T;
  const int b = int(bh / NH), h = int(bh % NH);
  const float* p = att + row * T;
  float* ds = datt + row * T;
  const float* go = dout + (int64_t(b) * T + i) * C + h * hs;
  float dot = 0.0f;
  for (int j = lane; j < T; j += 32) {
    float dp = 0.0f;
    if (j <= i) {
      const float* v = qkv + (int64_t(b) * T + j) * 3 * C + 2 * C + h * hs;
      for (int e = 0; e < hs; ++e) dp += go[e] * v[e];
    }
    ds[j] = dp;
    dot += p[j] * dp;
  }
  dot = warpSum(dot);
  for (int j = lane; j < T; j += 32) ds[j] = j <= i ? p[j] * (ds[j] - dot) * sc : 0.0f;
}

// dq_i = sum_j dS[i,j] k_j; dk_j = sum_i dS[i,j] q_i; dv_j = sum_i P[i,j] dO_i.
__global__ void qkvGrad(float* dqkv, const float* datt, const float* att, const float* dout,
                        const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int64_t total = int64_t(B) * T * 3 * C;
  TS_GRID_LOOP(idx, total) {
    const int c3 = int(idx % (3 * C)), part = c3 / C, c = c3 % C, h = c / hs, d = c % hs;
    const int64_t bt = idx / (3 * C);
    const int b = int(bt / T), t = int(bt % T);
    const int64_t bhBase = (int64_t(b) * NH + h) * T * T;
    const int64_t rowStride = 3 * int64_t(C);
    const float* base = qkv + int64_t(b) * T * rowStride + h * hs + d;
    float acc = 0.0f;
    if (part == 0) {
      for (int j = 0; j <= t; ++j)
        acc += datt[bhBase + int64_t(t) * T + j] * base[C + j * rowStride];
    } else if (part == 1) {
      for (int i = t; i < T; ++i) acc += datt[bhBase + int64_t(i) * T + t] * base[i * rowStride];
    } else {
      const float* go = dout + int64_t(b) * T * C + h * hs + d;
      for (int i = t; i < T; ++i) acc += att[bhBase + int64_t(i) * T + t] * go[int64_t(i) * C];
    }
    dqkv[idx] = acc;
  }
}
}  // namespace

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const float sc = 1.0f / sqrtf(float(C / NH));
  const int64_t rows = int64_t(B) * NH * T;
  scores<<<gridFor(rows * T, kBlock), kBlock>>>(att, qkv, B, T, C, NH, sc);
  softmaxRows<<<gridFor(rows * 32, kBlock), kBlock>>>(att, rows, T);
  weightedValues<<<gridFor(int64_t(B) * T * C, kBlock), kBlock>>>(out, att, qkv, B, T, C, NH);
  TS_CUDA_LAUNCHED("attentionForward");
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH) {
  const float sc = 1.0f / sqrtf(float(C / NH));
  const int64_t rows = int64_t(B) * NH * T;
  scoreGrad<<<gridFor(rows * 32, kBlock), kBlock>>>(datt, att, dout, qkv, B, T, C, NH, sc);
  qkvGrad<<<gridFor(int64_t(B) * T * 3 * C, kBlock), kBlock>>>(dqkv, datt, att, dout, qkv, B, T, C,
                                                               NH);
  TS_CUDA_LAUNCHED("attentionBackward");
}

}  // namespace ts::kernels::cuda
