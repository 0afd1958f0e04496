// Flash attention on the CPU (FlashAttention-2, reference.md): query tiles stream over key
// tiles with an online softmax, so only lse = m + log(l) per row is saved (B, NH, T); key
// tiles right of the causal diagonal are skipped. Backward recomputes P = exp(S - lse) tile
// by tile. The tile products are small GEMMs (dnnl_sgemm on strided views of qkv, single-
// threaded inside the parallel region); the softmax work in between is vectorised loops.
// Written once for grouped-query attention; multi-head attention is the KVH == NH case, for
// which every GEMM and loop below is the one the MHA-only version ran (same results, bitwise).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "cpu/Gemm.h"
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"

namespace ts::kernels::cpu {

namespace {
constexpr int kTile = scratch::kFlashTile;  // query rows and keys per tile (equal: diagonal tiles align)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Causal mask inside a diagonal tile: row r (query r0 + r) sees keys c0 + c <= r0 + r.
inline void maskTile(float* S, int nr, int nc, int r0, int c0) {
  if (c0 + nc - 1 <= r0) return;  // tile fully below the diagonal
  for (int r = 0; r < nr; ++r)
    for (int c = std::max(0, r0 + r - c0 + 1); c < nc; ++c) S[r * kTile + c] = kNegInf;
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
  const int hs = C / NH, group = NH / KVH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = int64_t(NH + 2 * KVH) * hs;  // qkv row: q heads | k heads | v heads
  const int nQt = (T + kTile - 1) / kTile;
  const int64_t work = int64_t(B) * NH * nQt;
  const ScratchLease tiles(scratch::flashForward(hs), omp_get_max_threads());
#pragma omp parallel if (work > 1)
  {
    float* const S = tiles.slice(omp_get_thread_num());
    float* const O = S + kTile * kTile;
    float m[kTile], l[kTile];
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int qt = nQt - 1 - int(w % nQt);  // longest rows first (load balance)
      const int bh = int(w / nQt), b = bh / NH, h = bh % NH, g = h / group;
      const float* row0 = qkv + int64_t(b) * T * C3;
      const float* q = row0 + int64_t(h) * hs;
      const float* k = row0 + int64_t(NH + g) * hs;
      const float* v = row0 + int64_t(NH + KVH + g) * hs;
      const int r0 = qt * kTile, nr = std::min(kTile, T - r0);
      std::fill(m, m + kTile, kNegInf);
      std::fill(l, l + kTile, 0.0f);
      for (int c0 = 0; c0 <= r0; c0 += kTile) {
        const int nc = std::min(kTile, T - c0);
        stridedGemm('N', 'T', nr, nc, hs, sc, q + r0 * C3, C3, k + c0 * C3, C3, 0.0f, S,
                    kTile);
        maskTile(S, nr, nc, r0, c0);
        for (int r = 0; r < nr; ++r) {
          float* s = S + r * kTile;
          float mx = m[r];
#pragma omp simd reduction(max : mx)
          for (int c = 0; c < nc; ++c) mx = vmax(mx, s[c]);
          const float alpha = vexp(m[r] - mx);  // 0 on the first tile (m = -inf)
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int c = 0; c < nc; ++c) {
            s[c] = vexp(s[c] - mx);
            sum += s[c];
          }
          l[r] = alpha * l[r] + sum;
          m[r] = mx;
          float* o = O + r * hs;
          if (c0 == 0) {
            std::fill(o, o + hs, 0.0f);
          } else {
#pragma omp simd
            for (int d = 0; d < hs; ++d) o[d] *= alpha;
          }
        }
        stridedGemm('N', 'N', nr, hs, nc, 1.0f, S, kTile, v + c0 * C3, C3, 1.0f, O,
                    hs);
      }
      for (int r = 0; r < nr; ++r) {
        const float inv = 1.0f / l[r];
        float* dst = out + (int64_t(b) * T + r0 + r) * C + int64_t(h) * hs;
        const float* o = O + r * hs;
#pragma omp simd
        for (int d = 0; d < hs; ++d) dst[d] = o[d] * inv;
        lse[int64_t(bh) * T + r0 + r] = m[r] + std::log(l[r]);
      }
    }
  }
}

void flashAttentionGqaBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                               const float* qkv, int B, int T, int C, int NH, int KVH) {
  checkKvHeads(NH, KVH, "flashAttentionGqaBackward");
  const int hs = C / NH, group = NH / KVH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = int64_t(NH + 2 * KVH) * hs;
  // One (batch, kv head) per task: the task owns dK and dV of its kv head (summed over the
  // group's query heads in head order) and dQ of those heads, so no atomics and a fixed
  // summation order.
  const ScratchLease tiles(scratch::flashBackward(hs, group, T), omp_get_max_threads());
#pragma omp parallel if (B * KVH > 1)
  {
    float* const P = tiles.slice(omp_get_thread_num());
    float* const dS = P + kTile * kTile;
    float* const dK = dS + kTile * kTile;
    float* const dV = dK + int64_t(kTile) * hs;
    float* const D = dV + int64_t(kTile) * hs;  // group * T
#pragma omp for schedule(dynamic, 1)
    for (int bg = 0; bg < B * KVH; ++bg) {
      const int b = bg / KVH, g = bg % KVH;
      const int64_t row0 = int64_t(b) * T * C3;
      const float* k = qkv + row0 + int64_t(NH + g) * hs;
      const float* v = qkv + row0 + int64_t(NH + KVH + g) * hs;
      float* dk = dqkv + row0 + int64_t(NH + g) * hs;
      float* dv = dqkv + row0 + int64_t(NH + KVH + g) * hs;
      for (int j = 0; j < group; ++j) {  // D_i = rowsum(dO_i * O_i); zero dQ (written, not +=)
        const int h = g * group + j;
        const float* dO = dout + int64_t(b) * T * C + int64_t(h) * hs;
        const float* O = out + int64_t(b) * T * C + int64_t(h) * hs;
        float* dq = dqkv + row0 + int64_t(h) * hs;
        for (int i = 0; i < T; ++i) {
          float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
          for (int d = 0; d < hs; ++d) acc += dO[int64_t(i) * C + d] * O[int64_t(i) * C + d];
          D[int64_t(j) * T + i] = acc;
          std::fill(dq + i * C3, dq + i * C3 + hs, 0.0f);
        }
      }
      for (int c0 = 0; c0 < T; c0 += kTile) {
        const int nc = std::min(kTile, T - c0);
        std::fill_n(dK, int64_t(kTile) * hs, 0.0f);
        std::fill_n(dV, int64_t(kTile) * hs, 0.0f);
        for (int j = 0; j < group; ++j) {
          const int h = g * group + j;
          const float* q = qkv + row0 + int64_t(h) * hs;
          float* dq = dqkv + row0 + int64_t(h) * hs;
          const float* dO = dout + int64_t(b) * T * C + int64_t(h) * hs;
          const float* L = lse + (int64_t(b) * NH + h) * T;
          const float* Dh = D + int64_t(j) * T;
          for (int r0 = c0; r0 < T; r0 += kTile) {  // causal: queries at or after the keys
            const int nr = std::min(kTile, T - r0);
            stridedGemm('N', 'T', nr, nc, hs, sc, q + r0 * C3, C3, k + c0 * C3, C3, 0.0f, P,
                        kTile);
            maskTile(P, nr, nc, r0, c0);
            for (int r = 0; r < nr; ++r) {
              float* p = P + r * kTile;
              const float Lr = L[r0 + r];
#pragma omp simd
              for (int c = 0; c < nc; ++c) p[c] = vexp(p[c] - Lr);
            }
            // dV += P^T dO_i;  dP = dO_i V_j^T
            stridedGemm('T', 'N', nc, hs, nr, 1.0f, P, kTile, dO + int64_t(r0) * C, C, 1.0f,
                        dV, hs);
            stridedGemm('N', 'T', nr, nc, hs, 1.0f, dO + int64_t(r0) * C, C, v + c0 * C3, C3, 0.0f,
                        dS, kTile);
            for (int r = 0; r < nr; ++r) {  // dS = P (dP - D) * scale
              const float* p = P + r * kTile;
              float* ds = dS + r * kTile;
              const float Dr = Dh[r0 + r];
#pragma omp simd
              for (int c = 0; c < nc; ++c) ds[c] = p[c] * (ds[c] - Dr) * sc;
            }
            // dQ_i += dS K_j;  dK += dS^T Q_i
            stridedGemm('N', 'N', nr, hs, nc, 1.0f, dS, kTile, k + c0 * C3, C3, 1.0f,
                        dq + r0 * C3, C3);
            stridedGemm('T', 'N', nc, hs, nr, 1.0f, dS, kTile, q + r0 * C3, C3, 1.0f,
                        dK, hs);
          }
        }
        for (int c = 0; c < nc; ++c) {
          std::copy(dK + c * hs, dK + (c + 1) * hs, dk + (c0 + c) * C3);
          std::copy(dV + c * hs, dV + (c + 1) * hs, dv + (c0 + c) * C3);
        }
      }
    }
  }
}

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaForward(out, lse, qkv, B, T, C, NH, NH);
}

void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaBackward(dqkv, dout, out, lse, qkv, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cpu
