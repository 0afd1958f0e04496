// Naive causal attention with options on the GPU (MaskedAttention.cuh): P (B, NH, T, T) is
// materialised, 0 outside each row's visible keys [firstKey(i), i]. Simple one-thread-per-
// output kernels (correctness twin of the CPU op; the fast GPU path is flash attention). With
// the default options every kernel does the GQA op's arithmetic in the same order
// (attention.cu calls this).
#include "Common.cuh"
#include "MaskedAttention.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace masked {

namespace {
constexpr int kBlock = 256;

// att[b,h,i,j] = softcap(scale * q_i . k_j) for visible j (0 elsewhere, as softmax keeps it).
__global__ void scores(float* att, const float* qkv, Heads H) {
  const int T = H.T;
  const int64_t total = int64_t(H.B) * H.NH * T * T;
  TS_GRID_LOOP(idx, total) {
    const int j = int(idx % T), i = int(idx / T % T);
    const int64_t bh = idx / (int64_t(T) * T);
    const int b = int(bh / H.NH), h = int(bh % H.NH);
    if (j > i || j < H.firstKey(i)) {
      att[idx] = 0.0f;
      continue;
    }
    const float* q = qkv + H.q(b, i, h);
    const float* k = qkv + H.k(b, j, h / H.group);
    float d = 0.0f;
    for (int e = 0; e < H.hs; ++e) d += q[e] * k[e];
    float f;
    att[idx] = H.capped(d * H.sc, &f);
  }
}

// Row softmax over the visible keys, one warp per row.
__global__ void softmaxRows(float* att, int64_t rows, Heads H) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % H.T), j0 = H.firstKey(i);
  float* p = att + row * H.T;
  float mx = -INFINITY;
  for (int j = j0 + lane; j <= i; j += 32) mx = fmaxf(mx, p[j]);
  mx = warpMax(mx);
  float sum = 0.0f;
  for (int j = j0 + lane; j <= i; j += 32) sum += expf(p[j] - mx);
  sum = warpSum(sum);
  for (int j = j0 + lane; j <= i; j += 32) p[j] = expf(p[j] - mx) / sum;
}

// out[b,i,h*hs+d] = sum_j P[i,j] v[j,d] over the visible keys.
__global__ void weightedValues(float* out, const float* att, const float* qkv, Heads H) {
  const int T = H.T, C = H.NH * H.hs;
  const int64_t total = int64_t(H.B) * T * C;
  TS_GRID_LOOP(idx, total) {
    const int c = int(idx % C), h = c / H.hs, d = c % H.hs;
    const int64_t bt = idx / C;
    const int b = int(bt / T), i = int(bt % T);
    const float* p = att + ((int64_t(b) * H.NH + h) * T + i) * T;
    const float* v = qkv + H.v(b, 0, h / H.group) + d;
    float acc = 0.0f;
    for (int j = H.firstKey(i); j <= i; ++j) acc += p[j] * v[int64_t(j) * H.rowStride];
    out[bt * H.ldo + c] = acc;
  }
}

// dS[i,j] = P[i,j] * (dP[i,j] - sum_j P dP / sum_j P) * f * scale, with dP = dO_i . v_j and f
// the soft-cap's derivative (recomputed from q . k) or 1; one warp per row. Dividing by
// sum_j P (1 but for the rounding of a saved P) keeps the row of dS summing to zero, as the
// CPU twin explains.
__global__ void scoreGrad(float* datt, const float* att, const float* dout, const float* qkv,
                          Heads H) {
  const int T = H.T;
  const int64_t rows = int64_t(H.B) * H.NH * T;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = int(row % T), j0 = H.firstKey(i);
  const int64_t bh = row / T;
  const int b = int(bh / H.NH), h = int(bh % H.NH);
  const float* p = att + row * T;
  float* ds = datt + row * T;
  const float* go = dout + (int64_t(b) * T + i) * H.ldo + h * H.hs;
  float dot = 0.0f, psum = 0.0f;
  for (int j = lane; j < T; j += 32) {
    float dp = 0.0f;
    if (j <= i && j >= j0) {
      const float* v = qkv + H.v(b, j, h / H.group);
      for (int e = 0; e < H.hs; ++e) dp += go[e] * v[e];
      psum += p[j];
      dot += p[j] * dp;
    }
    ds[j] = dp;
  }
  dot = warpSum(dot);
  psum = warpSum(psum);
  if (psum > 0.0f) dot /= psum;
  const float* q = qkv + H.q(b, i, h);
  for (int j = lane; j < T; j += 32) {
    if (j > i || j < j0) {
      ds[j] = 0.0f;
    } else if (H.cap > 0.0f) {
      const float* k = qkv + H.k(b, j, h / H.group);
      float s = 0.0f, f = 1.0f;
      for (int e = 0; e < H.hs; ++e) s += q[e] * k[e];
      H.capped(s * H.sc, &f);
      ds[j] = p[j] * (ds[j] - dot) * f * H.sc;
    } else {
      ds[j] = p[j] * (ds[j] - dot) * H.sc;
    }
  }
}

// dq_i = sum_j dS[i,j] k_j; dk_j = sum_{h in group} sum_i dS_h[i,j] q_h,i;
// dv_j = sum_{h in group} sum_i P_h[i,j] dO_h,i, over the visible pairs. One thread per dqkv
// element.
__global__ void qkvGrad(float* dqkv, const float* datt, const float* att, const float* dout,
                        const float* qkv, Heads H) {
  const int T = H.T, hs = H.hs;
  const int width = int(H.rowStride);
  const int64_t total = int64_t(H.B) * T * width;
  TS_GRID_LOOP(idx, total) {
    const int col = int(idx % width), head = col / hs, d = col % hs;
    const int64_t bt = idx / width;
    const int b = int(bt / T), t = int(bt % T), iEnd = H.endQuery(t);
    float acc = 0.0f;
    if (head < H.NH) {  // q part: query head `head`
      const int64_t bhBase = (int64_t(b) * H.NH + head) * T * T;
      const float* k = qkv + H.k(b, 0, head / H.group) + d;
      for (int j = H.firstKey(t); j <= t; ++j)
        acc += datt[bhBase + int64_t(t) * T + j] * k[j * H.rowStride];
    } else if (head < H.NH + H.KVH) {  // k part: kv head g
      const int g = head - H.NH;
      for (int h = g * H.group; h < (g + 1) * H.group; ++h) {
        const int64_t bhBase = (int64_t(b) * H.NH + h) * T * T;
        const float* q = qkv + H.q(b, 0, h) + d;
        for (int i = t; i < iEnd; ++i)
          acc += datt[bhBase + int64_t(i) * T + t] * q[i * H.rowStride];
      }
    } else {  // v part
      const int g = head - H.NH - H.KVH;
      for (int h = g * H.group; h < (g + 1) * H.group; ++h) {
        const int64_t bhBase = (int64_t(b) * H.NH + h) * T * T;
        const float* go = dout + int64_t(b) * T * H.ldo + h * hs + d;
        for (int i = t; i < iEnd; ++i)
          acc += att[bhBase + int64_t(i) * T + t] * go[int64_t(i) * H.ldo];
      }
    }
    dqkv[idx] = acc;
  }
}
}  // namespace

void attentionForward(float* out, float* att, const float* qkv, const Heads& H) {
  const int64_t rows = int64_t(H.B) * H.NH * H.T;
  if (rows <= 0) return;
  scores<<<gridFor(rows * H.T, kBlock), kBlock>>>(att, qkv, H);
  softmaxRows<<<gridFor(rows * 32, kBlock), kBlock>>>(att, rows, H);
  weightedValues<<<gridFor(int64_t(H.B) * H.T * H.NH * H.hs, kBlock), kBlock>>>(out, att, qkv, H);
  TS_CUDA_LAUNCHED("attention forward");
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, const Heads& H) {
  const int64_t rows = int64_t(H.B) * H.NH * H.T;
  if (rows <= 0) return;
  scoreGrad<<<gridFor(rows * 32, kBlock), kBlock>>>(datt, att, dout, qkv, H);
  qkvGrad<<<gridFor(int64_t(H.B) * H.T * H.rowStride, kBlock), kBlock>>>(dqkv, datt, att, dout, qkv,
                                                                         H);
  TS_CUDA_LAUNCHED("attention backward");
}

}  // namespace masked

void attentionMaskedForward(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH,
                            int HD, AttentionOptions opt) {
  masked::attentionForward(
      out, att, qkv,
      masked::Heads("attentionMaskedForward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

void attentionMaskedBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                             const float* att, int B, int T, int NH, int KVH, int HD,
                             AttentionOptions opt) {
  masked::attentionBackward(
      dqkv, datt, dout, qkv, att,
      masked::Heads("attentionMaskedBackward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

}  // namespace ts::kernels::cuda
