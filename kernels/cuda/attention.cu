// Naive causal attention on the GPU: P (B, NH, T, T) is materialised. Simple one-thread-per-
// output kernels (correctness twin of the CPU op; the fast GPU path is flash attention).
// Written once for grouped-query attention (qkv rows [NH q heads | KVH k heads | KVH v heads],
// query head h reads kv head h / (NH/KVH)); multi-head attention is KVH == NH, where every
// kernel does the arithmetic of the MHA-only version in the same order.
#include <string>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kBlock = 256;

struct Heads {
  int B, T, C, NH, KVH, hs, group;
  int64_t rowStride;  // (NH + 2 KVH) hs
  __host__ Heads(int B_, int T_, int C_, int NH_, int KVH_)
      : B(B_),
        T(T_),
        C(C_),
        NH(NH_),
        KVH(KVH_),
        hs(C_ / NH_),
        group(NH_ / KVH_),
        rowStride(int64_t(NH_ + 2 * KVH_) * (C_ / NH_)) {}
  // Start of query head h, key head g or value head g in row t of batch b.
  __device__ int64_t q(int b, int t, int h) const {
    return (int64_t(b) * T + t) * rowStride + int64_t(h) * hs;
  }
  __device__ int64_t k(int b, int t, int g) const {
    return (int64_t(b) * T + t) * rowStride + int64_t(NH + g) * hs;
  }
  __device__ int64_t v(int b, int t, int g) const {
    return (int64_t(b) * T + t) * rowStride + int64_t(NH + KVH + g) * hs;
  }
};

// att[b,h,i,j] = scale * q_i . k_j for j <= i (0 above the diagonal, filled by softmax).
__global__ void scores(float* att, const float* qkv, Heads H, float sc) {
  const int T = H.T;
  const int64_t total = int64_t(H.B) * H.NH * T * T;
  TS_GRID_LOOP(idx, total) {
    const int j = int(idx % T), i = int(idx / T % T);
    const int64_t bh = idx / (int64_t(T) * T);
    const int b = int(bh / H.NH), h = int(bh % H.NH);
    if (j > i) {
      att[idx] = 0.0f;
      continue;
    }
    const float* q = qkv + H.q(b, i, h);
    const float* k = qkv + H.k(b, j, h / H.group);
    float d = 0.0f;
    for (int e = 0; e < H.hs; ++e) d += q[e] * k[e];
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
__global__ void weightedValues(float* out, const float* att, const float* qkv, Heads H) {
  const int T = H.T, C = H.C;
  const int64_t total = int64_t(H.B) * T * C;
  TS_GRID_LOOP(idx, total) {
    const int c = int(idx % C), h = c / H.hs, d = c % H.hs;
    const int64_t bt = idx / C;
    const int b = int(bt / T), i = int(bt % T);
    const float* p = att + ((int64_t(b) * H.NH + h) * T + i) * T;
    const float* v = qkv + H.v(b, 0, h / H.group) + d;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += p[j] * v[int64_t(j) * H.rowStride];
    out[idx] = acc;
  }
}

// dS[i,j] = P[i,j] * (dP[i,j] - sum_j P dP / sum_j P) * scale, with dP = dO_i . v_j; one warp
// per row. Dividing by sum_j P (1 but for the rounding of a saved P) keeps the row of dS
// summing to zero, as the CPU twin explains.
__global__ void scoreGrad(float* datt, const float* att, const float* dout, const float* qkv,
                          Heads H, float sc) {
  const int T = H.T;
  const int64_t rows = int64_t(H.B) * H.NH * T;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % T);
  const int64_t bh = row / T;
  const int b = int(bh / H.NH), h = int(bh % H.NH);
  const float* p = att + row * T;
  float* ds = datt + row * T;
  const float* go = dout + (int64_t(b) * T + i) * H.C + h * H.hs;
  float dot = 0.0f, psum = 0.0f;
  for (int j = lane; j < T; j += 32) {
    float dp = 0.0f;
    if (j <= i) {
      const float* v = qkv + H.v(b, j, h / H.group);
      for (int e = 0; e < H.hs; ++e) dp += go[e] * v[e];
      psum += p[j];
    }
    ds[j] = dp;
    dot += p[j] * dp;
  }
  dot = warpSum(dot);
  psum = warpSum(psum);
  if (psum > 0.0f) dot /= psum;
  for (int j = lane; j < T; j += 32) ds[j] = j <= i ? p[j] * (ds[j] - dot) * sc : 0.0f;
}

// dq_i = sum_j dS[i,j] k_j; dk_j = sum_{h in group} sum_i dS_h[i,j] q_h,i;
// dv_j = sum_{h in group} sum_i P_h[i,j] dO_h,i. One thread per dqkv element.
__global__ void qkvGrad(float* dqkv, const float* datt, const float* att, const float* dout,
                        const float* qkv, Heads H) {
  const int T = H.T, hs = H.hs;
  const int width = int(H.rowStride);
  const int64_t total = int64_t(H.B) * T * width;
  TS_GRID_LOOP(idx, total) {
    const int col = int(idx % width), head = col / hs, d = col % hs;
    const int64_t bt = idx / width;
    const int b = int(bt / T), t = int(bt % T);
    float acc = 0.0f;
    if (head < H.NH) {  // q part: query head `head`
      const int64_t bhBase = (int64_t(b) * H.NH + head) * T * T;
      const float* k = qkv + H.k(b, 0, head / H.group) + d;
      for (int j = 0; j <= t; ++j) acc += datt[bhBase + int64_t(t) * T + j] * k[j * H.rowStride];
    } else if (head < H.NH + H.KVH) {  // k part: kv head g
      const int g = head - H.NH;
      for (int h = g * H.group; h < (g + 1) * H.group; ++h) {
        const int64_t bhBase = (int64_t(b) * H.NH + h) * T * T;
        const float* q = qkv + H.q(b, 0, h) + d;
        for (int i = t; i < T; ++i) acc += datt[bhBase + int64_t(i) * T + t] * q[i * H.rowStride];
      }
    } else {  // v part
      const int g = head - H.NH - H.KVH;
      for (int h = g * H.group; h < (g + 1) * H.group; ++h) {
        const int64_t bhBase = (int64_t(b) * H.NH + h) * T * T;
        const float* go = dout + int64_t(b) * T * H.C + h * hs + d;
        for (int i = t; i < T; ++i) acc += att[bhBase + int64_t(i) * T + t] * go[int64_t(i) * H.C];
      }
    }
    dqkv[idx] = acc;
  }
}
// NH query heads share KVH kv heads in equal groups.
void checkKvHeads(int NH, int KVH, const char* what) {
  if (NH <= 0 || KVH <= 0 || NH % KVH != 0)
    throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                " query heads are not a multiple of KVH = " + std::to_string(KVH) +
                                " kv heads");
}
}  // namespace

void attentionGqaForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                         int KVH) {
  checkKvHeads(NH, KVH, "attentionGqaForward");
  const Heads H(B, T, C, NH, KVH);
  const float sc = 1.0f / sqrtf(float(H.hs));
  const int64_t rows = int64_t(B) * NH * T;
  scores<<<gridFor(rows * T, kBlock), kBlock>>>(att, qkv, H, sc);
  softmaxRows<<<gridFor(rows * 32, kBlock), kBlock>>>(att, rows, T);
  weightedValues<<<gridFor(int64_t(B) * T * C, kBlock), kBlock>>>(out, att, qkv, H);
  TS_CUDA_LAUNCHED("attentionGqaForward");
}

void attentionGqaBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH, int KVH) {
  checkKvHeads(NH, KVH, "attentionGqaBackward");
  const Heads H(B, T, C, NH, KVH);
  const float sc = 1.0f / sqrtf(float(H.hs));
  const int64_t rows = int64_t(B) * NH * T;
  scoreGrad<<<gridFor(rows * 32, kBlock), kBlock>>>(datt, att, dout, qkv, H, sc);
  qkvGrad<<<gridFor(int64_t(B) * T * H.rowStride, kBlock), kBlock>>>(dqkv, datt, att, dout, qkv, H);
  TS_CUDA_LAUNCHED("attentionGqaBackward");
}

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attentionGqaForward(out, att, qkv, B, T, C, NH, NH);
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH) {
  attentionGqaBackward(dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cuda
