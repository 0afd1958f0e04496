// Flash attention with options on the CPU (FlashAttention-2, reference.md; MaskedAttention.h):
// query tiles stream over key tiles with an online softmax, so only lse = m + log(l) per row is
// saved (B, NH, T); key tiles right of the causal diagonal or wholly left of the sliding window
// are skipped. Backward recomputes P = exp(S - lse) tile by tile. The tile products are small
// GEMMs (dnnl_sgemm on strided views of qkv, single-threaded inside the parallel region); the
// softmax work in between is vectorised loops. With the default options every GEMM and loop is
// the one the GQA op always ran (flash_attention.cpp calls this).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/Gemm.h"
#include "cpu/MaskedAttention.h"
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"

namespace ts::kernels::cpu {

namespace masked {

namespace {
constexpr int kTile =
    scratch::kFlashTile;  // query rows and keys per tile (equal: diagonal tiles align)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Soft-capping then the mask inside a tile: row r (query r0 + r) sees keys c0 + c in
// [firstKey(r0 + r), r0 + r].
inline void capAndMaskTile(float* S, int nr, int nc, int r0, int c0, const Geometry& g) {
  if (g.cap > 0.0f) {
    const float cap = g.cap, inv = 1.0f / g.cap;
    for (int r = 0; r < nr; ++r) {
      float* s = S + r * kTile;
#pragma omp simd
      for (int c = 0; c < nc; ++c) s[c] = cap * vtanh(s[c] * inv);
    }
  }
  // Fully below the diagonal and, with a window, fully inside it: nothing to mask.
  if (c0 + nc - 1 <= r0 && g.firstKey(r0 + nr - 1) <= c0) return;
  for (int r = 0; r < nr; ++r) {
    const int i = r0 + r, lo = std::min(nc, std::max(0, g.firstKey(i) - c0));
    std::fill(S + r * kTile, S + r * kTile + lo, kNegInf);
    for (int c = std::max(0, i - c0 + 1); c < nc; ++c) S[r * kTile + c] = kNegInf;
  }
}

// One query tile of one head: rows [r0, r0 + nr) against the key tiles they can see.
void forwardTile(float* dst, float* lseRow, const float* q, const float* k, const float* v, int r0,
                 int nr, float* S, float* O, const Geometry& g) {
  const int hs = g.HD;
  const int64_t C3 = g.C3;
  float m[kTile], l[kTile];
  std::fill(m, m + kTile, kNegInf);
  std::fill(l, l + kTile, 0.0f);
  const int cStart = g.firstKey(r0) / kTile * kTile;
  for (int c0 = cStart; c0 <= r0; c0 += kTile) {
    const int nc = std::min(kTile, g.T - c0);
    stridedGemm('N', 'T', nr, nc, hs, g.sc, q + r0 * C3, C3, k + c0 * C3, C3, 0.0f, S, kTile);
    capAndMaskTile(S, nr, nc, r0, c0, g);
    for (int r = 0; r < nr; ++r) {
      float* s = S + r * kTile;
      float mx = m[r];
#pragma omp simd reduction(max : mx)
      for (int c = 0; c < nc; ++c) mx = vmax(mx, s[c]);
      // A row the window hides this whole tile from has mx = -inf: shift by 0, not by -inf
      // (-inf - -inf is NaN), so its probabilities and alpha are 0.
      const float mu = mx == kNegInf ? 0.0f : mx;
      const float alpha = vexp(m[r] - mu);  // 0 on the first tile (m = -inf)
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < nc; ++c) {
        s[c] = vexp(s[c] - mu);
        sum += s[c];
      }
      l[r] = alpha * l[r] + sum;
      m[r] = mx;
      float* o = O + r * hs;
      if (c0 == cStart) {
        std::fill(o, o + hs, 0.0f);
      } else {
#pragma omp simd
        for (int d = 0; d < hs; ++d) o[d] *= alpha;
      }
    }
    stridedGemm('N', 'N', nr, hs, nc, 1.0f, S, kTile, v + c0 * C3, C3, 1.0f, O, hs);
  }
  for (int r = 0; r < nr; ++r) {
    const float inv = 1.0f / l[r];
    float* d = dst + int64_t(r) * g.ldo;
    const float* o = O + r * hs;
#pragma omp simd
    for (int e = 0; e < hs; ++e) d[e] = o[e] * inv;
    lseRow[r] = m[r] + std::log(l[r]);
  }
}
}  // namespace

void flashForward(float* out, float* lse, const float* qkv, const Geometry& g) {
  const int T = g.T, hs = g.HD;
  const int64_t C3 = g.C3;
  const int nQt = (T + kTile - 1) / kTile;
  const int64_t work = int64_t(g.B) * g.NH * nQt;
  const ScratchLease tiles(scratch::flashForward(hs), omp_get_max_threads());
#pragma omp parallel if (work > 1)
  {
    float* const S = tiles.slice(omp_get_thread_num());
    float* const O = S + kTile * kTile;
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int qt = nQt - 1 - int(w % nQt);  // longest rows first (load balance)
      const int bh = int(w / nQt), b = bh / g.NH, h = bh % g.NH, kv = h / g.group;
      const float* row0 = qkv + int64_t(b) * T * C3;
      const int r0 = qt * kTile, nr = std::min(kTile, T - r0);
      forwardTile(out + (int64_t(b) * T + r0) * g.ldo + int64_t(h) * hs, lse + int64_t(bh) * T + r0,
                  row0 + int64_t(h) * hs, row0 + int64_t(g.NH + kv) * hs,
                  row0 + int64_t(g.NH + g.KVH + kv) * hs, r0, nr, S, O, g);
    }
  }
}

namespace {
// Per-thread tiles of the backward (scratch::flashBackward).
struct BackwardTiles {
  float *P, *dS, *dK, *dV, *D;
};

// One (query tile, key tile) pair of one query head: recomputes P, adds P^T dO to dV, dS K to
// dQ and dS^T Q to dK. With soft-capping, dS also carries 1 - tanh^2 of the capped score.
void backwardPair(float* dq, const float* q, const float* k, const float* v, const float* dO,
                  const float* L, const float* Dh, int r0, int nr, int c0, int nc,
                  const BackwardTiles& w, const Geometry& g) {
  const int hs = g.HD;
  const int64_t C3 = g.C3, ldo = g.ldo;
  stridedGemm('N', 'T', nr, nc, hs, g.sc, q + r0 * C3, C3, k + c0 * C3, C3, 0.0f, w.P, kTile);
  // dP = dO_i V_j^T
  stridedGemm('N', 'T', nr, nc, hs, 1.0f, dO + int64_t(r0) * ldo, ldo, v + c0 * C3, C3, 0.0f, w.dS,
              kTile);
  if (g.cap > 0.0f) {  // S = cap t with t = tanh(S / cap); dS so far (dP - D) (1 - t^2)
    const float cap = g.cap, inv = 1.0f / g.cap;
    for (int r = 0; r < nr; ++r) {
      float* p = w.P + r * kTile;
      float* ds = w.dS + r * kTile;
      const float Dr = Dh[r0 + r];
#pragma omp simd
      for (int c = 0; c < nc; ++c) {
        const float t = vtanh(p[c] * inv);
        p[c] = cap * t;
        ds[c] = (ds[c] - Dr) * (1.0f - t * t);
      }
    }
    Geometry uncapped = g;  // already capped: capAndMaskTile only masks
    uncapped.cap = 0.0f;
    capAndMaskTile(w.P, nr, nc, r0, c0, uncapped);
  } else {
    capAndMaskTile(w.P, nr, nc, r0, c0, g);
  }
  for (int r = 0; r < nr; ++r) {
    float* p = w.P + r * kTile;
    const float Lr = L[r0 + r];
#pragma omp simd
    for (int c = 0; c < nc; ++c) p[c] = vexp(p[c] - Lr);
  }
  // dV += P^T dO_i
  stridedGemm('T', 'N', nc, hs, nr, 1.0f, w.P, kTile, dO + int64_t(r0) * ldo, ldo, 1.0f, w.dV, hs);
  const float sc = g.sc;
  for (int r = 0; r < nr; ++r) {  // dS = P (dP - D) * scale (the D already in, when capped)
    const float* p = w.P + r * kTile;
    float* ds = w.dS + r * kTile;
    if (g.cap > 0.0f) {
#pragma omp simd
      for (int c = 0; c < nc; ++c) ds[c] = p[c] * ds[c] * sc;
    } else {
      const float Dr = Dh[r0 + r];
#pragma omp simd
      for (int c = 0; c < nc; ++c) ds[c] = p[c] * (ds[c] - Dr) * sc;
    }
  }
  // dQ_i += dS K_j;  dK += dS^T Q_i
  stridedGemm('N', 'N', nr, hs, nc, 1.0f, w.dS, kTile, k + c0 * C3, C3, 1.0f, dq + r0 * C3, C3);
  stridedGemm('T', 'N', nc, hs, nr, 1.0f, w.dS, kTile, q + r0 * C3, C3, 1.0f, w.dK, hs);
}

// dQ of the kv head's query heads and its dK and dV, batch b.
void kvHeadBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                    const float* qkv, int b, int kv, const BackwardTiles& w, const Geometry& g) {
  const int T = g.T, hs = g.HD;
  const int64_t C3 = g.C3, ldo = g.ldo, row0 = int64_t(b) * T * C3;
  const float* k = qkv + row0 + int64_t(g.NH + kv) * hs;
  const float* v = qkv + row0 + int64_t(g.NH + g.KVH + kv) * hs;
  float* dk = dqkv + row0 + int64_t(g.NH + kv) * hs;
  float* dv = dqkv + row0 + int64_t(g.NH + g.KVH + kv) * hs;
  for (int j = 0; j < g.group; ++j) {  // D_i = rowsum(dO_i * O_i); zero dQ (written, not +=)
    const int h = kv * g.group + j;
    const float* dO = dout + int64_t(b) * T * ldo + int64_t(h) * hs;
    const float* O = out + int64_t(b) * T * ldo + int64_t(h) * hs;
    float* dq = dqkv + row0 + int64_t(h) * hs;
    for (int i = 0; i < T; ++i) {
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int d = 0; d < hs; ++d) acc += dO[int64_t(i) * ldo + d] * O[int64_t(i) * ldo + d];
      w.D[int64_t(j) * T + i] = acc;
      std::fill(dq + i * C3, dq + i * C3 + hs, 0.0f);
    }
  }
  for (int c0 = 0; c0 < T; c0 += kTile) {
    const int nc = std::min(kTile, T - c0), rEnd = g.endQuery(c0 + nc - 1);
    std::fill_n(w.dK, int64_t(kTile) * hs, 0.0f);
    std::fill_n(w.dV, int64_t(kTile) * hs, 0.0f);
    for (int j = 0; j < g.group; ++j) {
      const int h = kv * g.group + j;
      const float* dO = dout + int64_t(b) * T * ldo + int64_t(h) * hs;
      const float* L = lse + (int64_t(b) * g.NH + h) * T;
      // Causal: queries at or after the keys; a window: before rEnd.
      for (int r0 = c0; r0 < rEnd; r0 += kTile)
        backwardPair(dqkv + row0 + int64_t(h) * hs, qkv + row0 + int64_t(h) * hs, k, v, dO, L,
                     w.D + int64_t(j) * T, r0, std::min(kTile, T - r0), c0, nc, w, g);
    }
    for (int c = 0; c < nc; ++c) {
      std::copy(w.dK + c * hs, w.dK + (c + 1) * hs, dk + (c0 + c) * C3);
      std::copy(w.dV + c * hs, w.dV + (c + 1) * hs, dv + (c0 + c) * C3);
    }
  }
}
}  // namespace

void flashBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                   const float* qkv, const Geometry& g) {
  const int hs = g.HD;
  // One (batch, kv head) per task: the task owns dK and dV of its kv head (summed over the
  // group's query heads in head order) and dQ of those heads, so no atomics and a fixed
  // summation order.
  const ScratchLease tiles(scratch::flashBackward(hs, g.group, g.T), omp_get_max_threads());
#pragma omp parallel if (g.B * g.KVH > 1)
  {
    BackwardTiles w;
    w.P = tiles.slice(omp_get_thread_num());
    w.dS = w.P + kTile * kTile;
    w.dK = w.dS + kTile * kTile;
    w.dV = w.dK + int64_t(kTile) * hs;
    w.D = w.dV + int64_t(kTile) * hs;  // group * T
#pragma omp for schedule(dynamic, 1)
    for (int bg = 0; bg < g.B * g.KVH; ++bg)
      kvHeadBackward(dqkv, dout, out, lse, qkv, bg / g.KVH, bg % g.KVH, w, g);
  }
}

}  // namespace masked

void flashAttentionMaskedForward(float* out, float* lse, const float* qkv, int B, int T, int NH,
                                 int KVH, int HD, AttentionOptions opt) {
  masked::flashForward(
      out, lse, qkv,
      masked::geometry("flashAttentionMaskedForward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

void flashAttentionMaskedBackward(float* dqkv, const float* dout, const float* out,
                                  const float* lse, const float* qkv, int B, int T, int NH, int KVH,
                                  int HD, AttentionOptions opt) {
  masked::flashBackward(
      dqkv, dout, out, lse, qkv,
      masked::geometry("flashAttentionMaskedBackward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

}  // namespace ts::kernels::cpu
