// Flash attention on the CPU (FlashAttention-2, reference.md): query tiles stream over key
// tiles with an online softmax, so only lse = m + log(l) per row is saved (B, NH, T); tiles
// right of the causal diagonal are skipped. Backward recomputes P = exp(S - lse) per key tile.
// Keys/values of a tile are transposed into a small buffer so the inner loops run over the
// tile's columns with unit stride (vectorised), all in L1/L2.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {
constexpr int kBr = 32;  // query rows per tile
constexpr int kBc = 64;  // keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// s[c] = scale * q . K[c] for c < nc, with Kt the tile transposed (hs x kBc).
inline void scoresRow(float* s, const float* q, const float* Kt, int hs, int nc, float sc) {
  float acc[kBc] = {};
  for (int d = 0; d < hs; ++d) {
    const float qd = q[d];
    const float* kt = Kt + d * kBc;
#pragma omp simd
    for (int c = 0; c < kBc; ++c) acc[c] += qd * kt[c];
  }
#pragma omp simd
  for (int c = 0; c < nc; ++c) s[c] = acc[c] * sc;
}

// Tile of rows [c0, c0+nc) of a head matrix with row stride ld, transposed to (hs x kBc).
inline void loadTransposed(float* dst, const float* src, int64_t ld, int c0, int nc, int hs) {
  for (int c = 0; c < nc; ++c) {
    const float* row = src + (c0 + c) * ld;
    for (int d = 0; d < hs; ++d) dst[d * kBc + c] = row[d];
  }
  for (int c = nc; c < kBc; ++c)
    for (int d = 0; d < hs; ++d) dst[d * kBc + c] = 0.0f;
}
}  // namespace

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C,
                           int NH) {
  const int hs = C / NH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = 3 * int64_t(C);
  const int nQt = (T + kBr - 1) / kBr;
  const int64_t work = int64_t(B) * NH * nQt;
#pragma omp parallel if (work > 1)
  {
    std::vector<float> Kt(size_t(hs) * kBc), O(size_t(kBr) * hs);
    float s[kBc];
    float m[kBr], l[kBr];
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      // Largest tiles (most key tiles) first for load balance.
      const int qt = nQt - 1 - int(w % nQt);
      const int bh = int(w / nQt), b = bh / NH, h = bh % NH;
      const float* q = qkv + int64_t(b) * T * C3 + int64_t(h) * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      const int r0 = qt * kBr, r1 = std::min(T, r0 + kBr);
      std::fill(O.begin(), O.end(), 0.0f);
      std::fill(m, m + kBr, kNegInf);
      std::fill(l, l + kBr, 0.0f);
      for (int c0 = 0; c0 < r1; c0 += kBc) {  // causal: keys beyond the last row are skipped
        const int nc = std::min(kBc, T - c0);
        loadTransposed(Kt.data(), k, C3, c0, nc, hs);
        for (int i = r0; i < r1; ++i) {
          const int r = i - r0;
          const int valid = std::min(nc, i - c0 + 1);  // keys c0..i are visible to row i
          if (valid <= 0) continue;
          scoresRow(s, q + i * C3, Kt.data(), hs, valid, sc);
          float mx = m[r];
          for (int c = 0; c < valid; ++c) mx = std::fmax(mx, s[c]);
          const float alpha = vexp(m[r] - mx);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int c = 0; c < valid; ++c) {
            s[c] = vexp(s[c] - mx);
            sum += s[c];
          }
          l[r] = alpha * l[r] + sum;
          m[r] = mx;
          float* o = O.data() + r * hs;
#pragma omp simd
          for (int d = 0; d < hs; ++d) o[d] *= alpha;
          for (int c = 0; c < valid; ++c) {
            const float p = s[c];
            const float* vr = v + (c0 + c) * C3;
#pragma omp simd
            for (int d = 0; d < hs; ++d) o[d] += p * vr[d];
          }
        }
      }
      for (int i = r0; i < r1; ++i) {
        const int r = i - r0;
        const float inv = 1.0f / l[r];
        float* dst = out + (int64_t(b) * T + i) * C + int64_t(h) * hs;
        const float* o = O.data() + r * hs;
#pragma omp simd
        for (int d = 0; d < hs; ++d) dst[d] = o[d] * inv;
        lse[int64_t(bh) * T + i] = m[r] + std::log(l[r]);
      }
    }
  }
}

void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = 3 * int64_t(C);
  // One (batch, head) per task: the task owns dQ, dK and dV of its head, so no atomics and a
  // fixed summation order.
#pragma omp parallel if (B * NH > 1)
  {
    std::vector<float> Kt(size_t(hs) * kBc), Vt(size_t(hs) * kBc);
    std::vector<float> dK(size_t(kBc) * hs), dV(size_t(kBc) * hs), D(T);
    float p[kBc], dp[kBc];
#pragma omp for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH;
      const int64_t base = int64_t(b) * T * C3 + int64_t(h) * hs;
      const float* q = qkv + base;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + base;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* dO = dout + int64_t(b) * T * C + int64_t(h) * hs;
      const float* O = out + int64_t(b) * T * C + int64_t(h) * hs;
      const float* L = lse + int64_t(bh) * T;
      for (int i = 0; i < T; ++i) {  // D_i = rowsum(dO_i * O_i); zero dQ (written, not +=)
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int d = 0; d < hs; ++d) acc += dO[int64_t(i) * C + d] * O[int64_t(i) * C + d];
        D[i] = acc;
        std::fill(dq + i * C3, dq + i * C3 + hs, 0.0f);
      }
      for (int c0 = 0; c0 < T; c0 += kBc) {
        const int nc = std::min(kBc, T - c0);
        loadTransposed(Kt.data(), k, C3, c0, nc, hs);
        loadTransposed(Vt.data(), v, C3, c0, nc, hs);
        std::fill(dK.begin(), dK.end(), 0.0f);
        std::fill(dV.begin(), dV.end(), 0.0f);
        for (int i = c0; i < T; ++i) {  // causal: only queries at or after the tile see it
          const int valid = std::min(nc, i - c0 + 1);
          const float* qi = q + i * C3;
          const float* doi = dO + int64_t(i) * C;
          scoresRow(p, qi, Kt.data(), hs, valid, sc);
          const float Li = L[i];
#pragma omp simd
          for (int c = 0; c < valid; ++c) p[c] = vexp(p[c] - Li);
          // dp[c] = dO_i . V_c
          scoresRow(dp, doi, Vt.data(), hs, valid, 1.0f);
          const float Di = D[i];
#pragma omp simd
          for (int c = 0; c < valid; ++c) dp[c] = p[c] * (dp[c] - Di) * sc;  // dS, scaled
          float* dqi = dq + i * C3;
          for (int c = 0; c < valid; ++c) {
            const float pc = p[c], ds = dp[c];
            float* dvc = dV.data() + c * hs;
            float* dkc = dK.data() + c * hs;
            const float* kc = k + (c0 + c) * C3;
#pragma omp simd
            for (int d = 0; d < hs; ++d) {
              dvc[d] += pc * doi[d];
              dkc[d] += ds * qi[d];
              dqi[d] += ds * kc[d];
            }
          }
        }
        for (int c = 0; c < nc; ++c) {
          std::copy(dK.data() + c * hs, dK.data() + (c + 1) * hs, dk + (c0 + c) * C3);
          std::copy(dV.data() + c * hs, dV.data() + (c + 1) * hs, dv + (c0 + c) * C3);
        }
      }
    }
  }
}

}  // namespace ts::kernels::cpu
