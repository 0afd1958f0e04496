// Flash attention with options on the GPU (FlashAttention-2 recurrences, reference.md;
// MaskedAttention.cuh): one warp per query row streams over its visible keys
// [firstKey(i), i] only (a sliding window skips the rest) with an online softmax and saves
// only lse = m + log(l). Backward recomputes P = exp(S - lse): a warp per query row for dQ and
// a warp per key row for dK/dV (its queries [j, endQuery(j))), so every output has one writer
// (no atomics, deterministic). Head dim <= 256. With the default options the GQA op's
// arithmetic in the same order (flash_attention.cu calls this).
#include <string>

#include "Common.cuh"
#include "MaskedAttention.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace masked {

namespace {
constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head dim up to 32 * 8

__device__ inline float warpDot(const float* a, const float* b, int hs, int lane) {
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += a[d] * b[d];
  return warpSum(s);
}

__global__ void flashFwd(float* out, float* lse, const float* qkv, Heads H) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.NH * H.T) return;
  const int i = int(row % H.T);
  const int64_t bh = row / H.T;
  const int b = int(bh / H.NH), h = int(bh % H.NH), g = h / H.group;
  const float* q = qkv + H.q(b, i, h);
  float o[kMaxPerLane] = {};
  float m = -INFINITY, l = 0.0f, f;
  for (int j = H.firstKey(i); j <= i; ++j) {
    const float s = H.capped(warpDot(q, qkv + H.k(b, j, g), H.hs, lane) * H.sc, &f);
    const float mNew = fmaxf(m, s);
    const float alpha = expf(m - mNew), p = expf(s - mNew);
    l = alpha * l + p;
    const float* v = qkv + H.v(b, j, g);
    for (int k = 0, d = lane; d < H.hs; ++k, d += 32) o[k] = alpha * o[k] + p * v[d];
    m = mNew;
  }
  float* dst = out + (int64_t(b) * H.T + i) * H.ldo + h * H.hs;
  for (int k = 0, d = lane; d < H.hs; ++k, d += 32) dst[d] = o[k] / l;
  if (lane == 0) lse[row] = m + logf(l);
}

// dQ_i = sum_j dS_ij k_j, dS_ij = P_ij (dO_i . v_j - D_i) f_ij * scale, D_i = dO_i . O_i.
__global__ void flashBwdQ(float* dqkv, const float* dout, const float* out, const float* lse,
                          const float* qkv, Heads H) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.NH * H.T) return;
  const int i = int(row % H.T);
  const int64_t bh = row / H.T;
  const int b = int(bh / H.NH), h = int(bh % H.NH), g = h / H.group;
  const float* q = qkv + H.q(b, i, h);
  const float* go = dout + (int64_t(b) * H.T + i) * H.ldo + h * H.hs;
  const float* o = out + (int64_t(b) * H.T + i) * H.ldo + h * H.hs;
  const float D = warpDot(go, o, H.hs, lane), L = lse[row];
  float dq[kMaxPerLane] = {};
  for (int j = H.firstKey(i); j <= i; ++j) {
    const float* k = qkv + H.k(b, j, g);
    float f = 1.0f;
    const float p = expf(H.capped(warpDot(q, k, H.hs, lane) * H.sc, &f) - L);
    float ds = p * (warpDot(go, qkv + H.v(b, j, g), H.hs, lane) - D);
    ds = H.cap > 0.0f ? ds * f * H.sc : ds * H.sc;
    for (int e = 0, d = lane; d < H.hs; ++e, d += 32) dq[e] += ds * k[d];
  }
  float* dst = dqkv + H.q(b, i, h);
  for (int e = 0, d = lane; d < H.hs; ++e, d += 32) dst[d] = dq[e];
}

// dK_j = sum_{h in group} sum_i dS_h,ij q_h,i, dV_j = sum_{h in group} sum_i P_h,ij dO_h,i
// over the queries that see j; one warp per (batch, kv head, key row).
__global__ void flashBwdKV(float* dqkv, const float* dout, const float* out, const float* lse,
                           const float* qkv, Heads H) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.KVH * H.T) return;
  const int j = int(row % H.T), iEnd = H.endQuery(j);
  const int64_t bg = row / H.T;
  const int b = int(bg / H.KVH), g = int(bg % H.KVH);
  const float* k = qkv + H.k(b, j, g);
  const float* v = qkv + H.v(b, j, g);
  float dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  for (int h = g * H.group; h < (g + 1) * H.group; ++h) {
    const int64_t bh = int64_t(b) * H.NH + h;
    for (int i = j; i < iEnd; ++i) {
      const float* q = qkv + H.q(b, i, h);
      const float* go = dout + (int64_t(b) * H.T + i) * H.ldo + h * H.hs;
      const float* o = out + (int64_t(b) * H.T + i) * H.ldo + h * H.hs;
      const float D = warpDot(go, o, H.hs, lane);
      float f = 1.0f;
      const float p = expf(H.capped(warpDot(q, k, H.hs, lane) * H.sc, &f) - lse[bh * H.T + i]);
      float ds = p * (warpDot(go, v, H.hs, lane) - D);
      ds = H.cap > 0.0f ? ds * f * H.sc : ds * H.sc;
      for (int e = 0, d = lane; d < H.hs; ++e, d += 32) {
        dk[e] += ds * q[d];
        dv[e] += p * go[d];
      }
    }
  }
  float* dk0 = dqkv + H.k(b, j, g);
  float* dv0 = dqkv + H.v(b, j, g);
  for (int e = 0, d = lane; d < H.hs; ++e, d += 32) {
    dk0[d] = dk[e];
    dv0[d] = dv[e];
  }
}

void checkHeadDim(int hs) {
  if (hs > 32 * kMaxPerLane)
    throw std::runtime_error("CUDA flash attention supports head dim <= 256, got " +
                             std::to_string(hs));
}
}  // namespace

void flashForward(float* out, float* lse, const float* qkv, const Heads& H) {
  checkHeadDim(H.hs);
  const int64_t rows = int64_t(H.B) * H.NH * H.T;
  if (rows <= 0) return;
  flashFwd<<<unsigned((rows + kWarps - 1) / kWarps), 32 * kWarps>>>(out, lse, qkv, H);
  TS_CUDA_LAUNCHED("flash attention forward");
}

void flashBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                   const float* qkv, const Heads& H) {
  checkHeadDim(H.hs);
  const int64_t qRows = int64_t(H.B) * H.NH * H.T, kvRows = int64_t(H.B) * H.KVH * H.T;
  if (qRows <= 0) return;
  flashBwdQ<<<unsigned((qRows + kWarps - 1) / kWarps), 32 * kWarps>>>(dqkv, dout, out, lse, qkv, H);
  flashBwdKV<<<unsigned((kvRows + kWarps - 1) / kWarps), 32 * kWarps>>>(dqkv, dout, out, lse, qkv,
                                                                        H);
  TS_CUDA_LAUNCHED("flash attention backward");
}

}  // namespace masked

void flashAttentionMaskedForward(float* out, float* lse, const float* qkv, int B, int T, int NH,
                                 int KVH, int HD, AttentionOptions opt) {
  masked::flashForward(
      out, lse, qkv,
      masked::Heads("flashAttentionMaskedForward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

void flashAttentionMaskedBackward(float* dqkv, const float* dout, const float* out,
                                  const float* lse, const float* qkv, int B, int T, int NH, int KVH,
                                  int HD, AttentionOptions opt) {
  masked::flashBackward(
      dqkv, dout, out, lse, qkv,
      masked::Heads("flashAttentionMaskedBackward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

}  // namespace ts::kernels::cuda
