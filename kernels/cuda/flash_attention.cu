// Flash attention on the GPU (FlashAttention-2 recurrences, reference.md): one warp per query
// row streams over keys j <= i with an online softmax and saves only lse = m + log(l).
// Backward recomputes P = exp(S - lse): a warp per query row for dQ and a warp per key row for
// dK/dV, so every output has one writer (no atomics, deterministic). Head dim <= 256.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head dim up to 32 * 8

struct Head {
  int B, T, C, NH, hs;
  __device__ const float* row(const float* qkv, int b, int t, int part, int h) const {
    return qkv + (int64_t(b) * T + t) * 3 * C + int64_t(part) * C + h * hs;
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
  const int b = int(bh / H.NH), h = int(bh % H.NH);
  const float* q = H.row(qkv, b, i, 0, h);
  float o[kMaxPerLane] = {};
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const float s = warpDot(q, H.row(qkv, b, j, 1, h), H.hs, lane) * sc;
    const float mNew = fmaxf(m, s);
    const float alpha = expf(m - mNew), p = expf(s - mNew);
    l = alpha * l + p;
    const float* v = H.row(qkv, b, j, 2, h);
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
  const int b = int(bh / H.NH), h = int(bh % H.NH);
  const float* q = H.row(qkv, b, i, 0, h);
  const float* go = dout + (int64_t(b) * H.T + i) * H.C + h * H.hs;
  const float* o = out + (int64_t(b) * H.T + i) * H.C + h * H.hs;
  const float D = warpDot(go, o, H.hs, lane), L = lse[row];
  float dq[kMaxPerLane] = {};
  for (int j = 0; j <= i; ++j) {
    const float* k = H.row(qkv, b, j, 1, h);
    const float p = expf(warpDot(q, k, H.hs, lane) * sc - L);
    const float ds = p * (warpDot(go, H.row(qkv, b, j, 2, h), H.hs, lane) - D) * sc;
    for (int e = 0, d = lane; d < H.hs; ++e, d += 32) dq[e] += ds * k[d];
  }
  float* dst = dqkv + (int64_t(b) * H.T + i) * 3 * H.C + h * H.hs;
  for (int e = 0, d = lane; d < H.hs; ++e, d += 32) dst[d] = dq[e];
}

// dK_j = sum_{i>=j} dS_ij q_i, dV_j = sum_{i>=j} P_ij dO_i.
__global__ void flashBwdKV(float* dqkv, const float* dout, const float* out, const float* lse,
                           const float* qkv, Head H, float sc) {
  const int64_t row = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= int64_t(H.B) * H.NH * H.T) return;
  const int j = int(row % H.T);
  const int64_t bh = row / H.T;
  const int b = int(bh / H.NH), h = int(bh % H.NH);
  const float* k = H.row(qkv, b, j, 1, h);
  const float* v = H.row(qkv, b, j, 2, h);
  float dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
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
  float* dk0 = dqkv + (int64_t(b) * H.T + j) * 3 * H.C + H.C + h * H.hs;
  for (int e = 0, d = lane; d < H.hs; ++e, d += 32) {
    dk0[d] = dk[e];
    dk0[H.C + d] = dv[e];
  }
}

void checkHeadDim(int hs) {
  if (hs > 32 * kMaxPerLane)
    throw std::runtime_error("CUDA flash attention supports head dim <= 256, got " +
                             std::to_string(hs));
}
}  // namespace

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const Head H{B, T, C, NH, C / NH};
  checkHeadDim(H.hs);
  const int64_t rows = int64_t(B) * NH * T;
  flashFwd<<<unsigned((rows + kWarps - 1) / kWarps), 32 * kWarps>>>(out, lse, qkv, H,
                                                                    1.0f / sqrtf(float(H.hs)));
  TS_CUDA_LAUNCHED("flashAttentionForward");
}

void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH) {
  const Head H{B, T, C, NH, C / NH};
  checkHeadDim(H.hs);
  const int64_t rows = int64_t(B) * NH * T;
  const unsigned grid = unsigned((rows + kWarps - 1) / kWarps);
  const float sc = 1.0f / sqrtf(float(H.hs));
  flashBwdQ<<<grid, 32 * kWarps>>>(dqkv, dout, out, lse, qkv, H, sc);
  flashBwdKV<<<grid, 32 * kWarps>>>(dqkv, dout, out, lse, qkv, H, sc);
  TS_CUDA_LAUNCHED("flashAttentionBackward");
}

}  // namespace ts::kernels::cuda
