// Flash attention on the GPU (FlashAttention-2 recurrences, reference.md): one warp per query
// row streams over keys j <= i with an online softmax and saves only lse = m + log(l).
// Backward recomputes P = exp(S - lse): a warp per query row for dQ and a warp per key row for
// dK/dV, so every output has one writer (no atomics, deterministic). Head dim <= 256.
// Written once for grouped-query attention (qkv rows [NH q heads | KVH k heads | KVH v heads],
// query head h reads kv head h / (NH/KVH)): the dK/dV warp of a kv head loops over its query
// heads. Multi-head attention is KVH == NH, with the MHA-only version's arithmetic and order.
#include <string>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head dim up to 32 * 8

struct Head {
  int B, T, C, NH, KVH, hs, group;
  int64_t rowStride;  // (NH + 2 KVH) hs
  Head(int B_, int T_, int C_, int NH_, int KVH_)
      : B(B_),
        T(T_),
        C(C_),
        NH(NH_),
        KVH(KVH_),
        hs(C_ / NH_),
        group(NH_ / KVH_),
        rowStride(int64_t(NH_ + 2 * KVH_) * (C_ / NH_)) {}
  // part 0: query head h; part 1 / 2: key / value head h (a kv head index).
  __device__ const float* row(const float* qkv, int b, int t, int part, int h) const {
    const int head = part == 0 ? h : (part == 1 ? NH + h : NH + KVH + h);
    return qkv + (int64_t(b) * T + t) * rowStride + int64_t(head) * hs;
  }
};

__device__ inline float warpDot(const float* a, const float* b, int hs, int lane) {
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += a[d] * b[d];
  return warpSum(s);
}

__global__ void flashFwd(float* out, float* lse, const float* qkv, Head H, float sc) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.NH * H.T) return;
  const int i = int(row % H.T);
  const int64_t bh = row / H.T;
  const int b = int(bh / H.NH), h = int(bh % H.NH), g = h / H.group;
  const float* q = H.row(qkv, b, i, 0, h);
  float o[kMaxPerLane] = {};
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const float s = warpDot(q, H.row(qkv, b, j, 1, g), H.hs, lane) * sc;
    const float mNew = fmaxf(m, s);
    const float alpha = expf(m - mNew), p = expf(s - mNew);
    l = alpha * l + p;
    const float* v = H.row(qkv, b, j, 2, g);
    for (int k = 0, d = lane; d < H.hs; ++k, d += 32) o[k] = alpha * o[k] + p * v[d];
    m = mNew;
  }
  float* dst = out + (int64_t(b) * H.T + i) * H.C + h * H.hs;
  for (int k = 0, d = lane; d < H.hs; ++k, d += 32) dst[d] = o[k] / l;
  if (lane == 0) lse[row] = m + logf(l);
}

// dQ_i = sum_{j<=i} dS_ij k_j, dS_ij = P_ij (dO_i . v_j - D_i) * scale, D_i = dO_i . O_i.
__global__ void flashBwdQ(float* dqkv, const float* dout, const float* out, const float* lse,
                          const float* qkv, Head H, float sc) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.NH * H.T) return;
  const int i = int(row % H.T);
  const int64_t bh = row / H.T;
  const int b = int(bh / H.NH), h = int(bh % H.NH), g = h / H.group;
  const float* q = H.row(qkv, b, i, 0, h);
  const float* go = dout + (int64_t(b) * H.T + i) * H.C + h * H.hs;
  const float* o = out + (int64_t(b) * H.T + i) * H.C + h * H.hs;
  const float D = warpDot(go, o, H.hs, lane), L = lse[row];
  float dq[kMaxPerLane] = {};
  for (int j = 0; j <= i; ++j) {
    const float* k = H.row(qkv, b, j, 1, g);
    const float p = expf(warpDot(q, k, H.hs, lane) * sc - L);
    const float ds = p * (warpDot(go, H.row(qkv, b, j, 2, g), H.hs, lane) - D) * sc;
    for (int e = 0, d = lane; d < H.hs; ++e, d += 32) dq[e] += ds * k[d];
  }
  float* dst = dqkv + (int64_t(b) * H.T + i) * H.rowStride + h * H.hs;
  for (int e = 0, d = lane; d < H.hs; ++e, d += 32) dst[d] = dq[e];
}

// dK_j = sum_{h in group} sum_{i>=j} dS_h,ij q_h,i, dV_j = sum_{h in group} sum_{i>=j} P_h,ij
// dO_h,i; one warp per (batch, kv head, key row).
__global__ void flashBwdKV(float* dqkv, const float* dout, const float* out, const float* lse,
                           const float* qkv, Head H, float sc) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.KVH * H.T) return;
  const int j = int(row % H.T);
  const int64_t bg = row / H.T;
  const int b = int(bg / H.KVH), g = int(bg % H.KVH);
  const float* k = H.row(qkv, b, j, 1, g);
  const float* v = H.row(qkv, b, j, 2, g);
  float dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  for (int h = g * H.group; h < (g + 1) * H.group; ++h) {
    const int64_t bh = int64_t(b) * H.NH + h;
    for (int i = j; i < H.T; ++i) {
      const float* q = H.row(qkv, b, i, 0, h);
      const float* go = dout + (int64_t(b) * H.T + i) * H.C + h * H.hs;
      const float* o = out + (int64_t(b) * H.T + i) * H.C + h * H.hs;
      const float D = warpDot(go, o, H.hs, lane);
      const float p = expf(warpDot(q, k, H.hs, lane) * sc - lse[bh * H.T + i]);
      const float ds = p * (warpDot(go, v, H.hs, lane) - D) * sc;
      for (int e = 0, d = lane; d < H.hs; ++e, d += 32) {
        dk[e] += ds * q[d];
        dv[e] += p * go[d];
      }
    }
  }
  float* dk0 = dqkv + (int64_t(b) * H.T + j) * H.rowStride + int64_t(H.NH + g) * H.hs;
  float* dv0 = dk0 + int64_t(H.KVH) * H.hs;
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
// NH query heads share KVH kv heads in equal groups.
void checkKvHeads(int NH, int KVH, const char* what) {
  if (NH <= 0 || KVH <= 0 || NH % KVH != 0)
    throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                " query heads are not a multiple of KVH = " + std::to_string(KVH) +
                                " kv heads");
}
}  // namespace

void flashAttentionGqaForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                              int KVH) {
  checkKvHeads(NH, KVH, "flashAttentionGqaForward");
  const Head H(B, T, C, NH, KVH);
  checkHeadDim(H.hs);
  const int64_t rows = int64_t(B) * NH * T;
  flashFwd<<<unsigned((rows + kWarps - 1) / kWarps), 32 * kWarps>>>(out, lse, qkv, H,
                                                                    1.0f / sqrtf(float(H.hs)));
  TS_CUDA_LAUNCHED("flashAttentionGqaForward");
}

void flashAttentionGqaBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                               const float* qkv, int B, int T, int C, int NH, int KVH) {
  checkKvHeads(NH, KVH, "flashAttentionGqaBackward");
  const Head H(B, T, C, NH, KVH);
  checkHeadDim(H.hs);
  const int64_t qRows = int64_t(B) * NH * T, kvRows = int64_t(B) * KVH * T;
  const float sc = 1.0f / sqrtf(float(H.hs));
  flashBwdQ<<<unsigned((qRows + kWarps - 1) / kWarps), 32 * kWarps>>>(dqkv, dout, out, lse, qkv, H,
                                                                      sc);
  flashBwdKV<<<unsigned((kvRows + kWarps - 1) / kWarps), 32 * kWarps>>>(dqkv, dout, out, lse, qkv,
                                                                        H, sc);
  TS_CUDA_LAUNCHED("flashAttentionGqaBackward");
}

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaForward(out, lse, qkv, B, T, C, NH, NH);
}

void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaBackward(dqkv, dout, out, lse, qkv, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cuda
