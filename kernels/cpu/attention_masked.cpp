// Naive causal attention with options (MaskedAttention.h): materialises P = softmax(S) (B, NH,
// T, T), S = softcap(scale QK^T) masked to the causal (or sliding) window. The products are
// GEMMs on strided views of qkv (dnnl_sgemm with leading dimensions), in row blocks so only the
// keys a block can see are multiplied. Heads run in parallel; each GEMM inside a parallel
// region runs single-threaded (oneDNN detects the enclosing team). With the default options
// every GEMM and loop is the one the GQA op always ran (attention.cpp calls this).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/Gemm.h"
#include "cpu/MaskedAttention.h"
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace masked {

namespace {
constexpr int kBlock = 64;
const auto sgemm = stridedGemm;

// Row i of P from its scores: soft-capped, softmax over the visible keys [firstKey(i), i],
// zeros elsewhere.
void softmaxRow(float* p, int i, const Geometry& g) {
  const int j0 = g.firstKey(i);
  if (g.cap > 0.0f) {
    const float cap = g.cap, inv = 1.0f / g.cap;
#pragma omp simd
    for (int j = j0; j <= i; ++j) p[j] = cap * vtanh(p[j] * inv);
  }
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int j = j0; j <= i; ++j) mx = vmax(mx, p[j]);
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = j0; j <= i; ++j) {
    p[j] = vexp(p[j] - mx);
    sum += p[j];
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int j = j0; j <= i; ++j) p[j] *= inv;
  std::fill(p, p + j0, 0.0f);
  std::fill(p + i + 1, p + g.T, 0.0f);
}

// Row i of dS from dP (in d) and P: dS = P (dP - D) f scale, D = sum P dP / sum P, with
// f = 1 - tanh^2 of the capped score (recomputed from q and k: att holds only P) or 1.
void gradRow(float* d, const float* p, const float* qi, const float* k, int i, const Geometry& g) {
  const int j0 = g.firstKey(i);
  // P as saved may be rounded (16-bit or int8 storage) and not sum to 1; dividing by
  // its sum keeps sum_j dS[i,j] = 0 (softmax's shift invariance). Otherwise the rounding
  // of a P near 1 (2^-9 in bf16) swamps the small true gradient of a sharp row's
  // dominant score, and bf16 runs stall on the default preset's plateau.
  float dot = 0.0f, psum = 0.0f;
#pragma omp simd reduction(+ : dot, psum)
  for (int j = j0; j <= i; ++j) {
    dot += p[j] * d[j];
    psum += p[j];
  }
  if (psum > 0.0f) dot /= psum;
  const float sc = g.sc;
  if (g.cap > 0.0f) {
    const float inv = 1.0f / g.cap;
    for (int j = j0; j <= i; ++j) {
      const float* kj = k + int64_t(j) * g.C3;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int e = 0; e < g.HD; ++e) s += qi[e] * kj[e];
      const float t = vtanh(s * sc * inv);
      d[j] = p[j] * (d[j] - dot) * (1.0f - t * t) * sc;
    }
  } else {
#pragma omp simd
    for (int j = j0; j <= i; ++j) d[j] = p[j] * (d[j] - dot) * sc;
  }
  std::fill(d, d + j0, 0.0f);  // masked: later GEMMs read the zeros
  std::fill(d + i + 1, d + g.T, 0.0f);
}

// dQ of one query head and its contribution to the kv head's dK and dV (the group's first
// head writes them, the others add).
void headBackward(float* dq, float* dk, float* dv, float* dS, const float* P, const float* q,
                  const float* k, const float* v, const float* dO, bool first, const Geometry& g) {
  const int T = g.T, hs = g.HD;
  const int64_t C3 = g.C3, ldo = g.ldo;
  for (int r0 = 0; r0 < T; r0 += kBlock) {
    const int r1 = std::min(T, r0 + kBlock), lo = g.firstKey(r0);
    // dP = dO V^T for rows [r0, r1), keys [lo, r1).
    sgemm('N', 'T', r1 - r0, r1 - lo, hs, 1.0f, dO + int64_t(r0) * ldo, ldo, v + lo * C3, C3, 0.0f,
          dS + int64_t(r0) * T + lo, T);
    for (int i = r0; i < r1; ++i)
      gradRow(dS + int64_t(i) * T, P + int64_t(i) * T, q + i * C3, k, i, g);
    // dQ rows [r0, r1) = dS[r0:r1, lo:r1] K[lo:r1].
    sgemm('N', 'N', r1 - r0, hs, r1 - lo, 1.0f, dS + int64_t(r0) * T + lo, T, k + lo * C3, C3, 0.0f,
          dq + r0 * C3, C3);
  }
  const float beta = first ? 0.0f : 1.0f;
  for (int c0 = 0; c0 < T; c0 += kBlock) {
    const int c1 = std::min(T, c0 + kBlock), rEnd = g.endQuery(c1 - 1);
    // Key rows [c0, c1) only get gradient from query rows [c0, rEnd).
    sgemm('T', 'N', c1 - c0, hs, rEnd - c0, 1.0f, dS + int64_t(c0) * T + c0, T, q + c0 * C3, C3,
          beta, dk + c0 * C3, C3);
    sgemm('T', 'N', c1 - c0, hs, rEnd - c0, 1.0f, P + int64_t(c0) * T + c0, T,
          dO + int64_t(c0) * ldo, ldo, beta, dv + c0 * C3, C3);
  }
}
}  // namespace

void attentionForward(float* out, float* att, const float* qkv, const Geometry& g) {
  const int T = g.T, hs = g.HD;
  const int64_t C3 = g.C3, ldo = g.ldo;
  const bool headsParallel = g.B * g.NH >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (headsParallel)
  for (int bh = 0; bh < g.B * g.NH; ++bh) {
    const int b = bh / g.NH, h = bh % g.NH, kv = h / g.group;
    const float* row0 = qkv + int64_t(b) * T * C3;
    const float* q = row0 + int64_t(h) * hs;
    const float* k = row0 + int64_t(g.NH + kv) * hs;
    const float* v = row0 + int64_t(g.NH + g.KVH + kv) * hs;
    float* P = att + int64_t(bh) * T * T;
    float* o = out + int64_t(b) * T * ldo + int64_t(h) * hs;
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock), lo = g.firstKey(r0);
      // Scores for rows [r0, r1) against keys [lo, r1): the rest is masked.
      sgemm('N', 'T', r1 - r0, r1 - lo, hs, g.sc, q + r0 * C3, C3, k + lo * C3, C3, 0.0f,
            P + int64_t(r0) * T + lo, T);
      for (int i = r0; i < r1; ++i) softmaxRow(P + int64_t(i) * T, i, g);
      sgemm('N', 'N', r1 - r0, hs, r1 - lo, 1.0f, P + int64_t(r0) * T + lo, T, v + lo * C3, C3,
            0.0f, o + int64_t(r0) * ldo, ldo);
    }
  }
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, const Geometry& g) {
  const int T = g.T, hs = g.HD;
  const int64_t C3 = g.C3;
  // One task per (batch, kv head): it owns dK and dV of that head and sums the query heads of
  // its group into them in head order (no atomics, fixed order).
  const bool headsParallel = g.B * g.KVH >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (headsParallel)
  for (int bg = 0; bg < g.B * g.KVH; ++bg) {
    const int b = bg / g.KVH, kv = bg % g.KVH;
    const int64_t row0 = int64_t(b) * T * C3;
    const float* k = qkv + row0 + int64_t(g.NH + kv) * hs;
    const float* v = qkv + row0 + int64_t(g.NH + g.KVH + kv) * hs;
    float* dk = dqkv + row0 + int64_t(g.NH + kv) * hs;
    float* dv = dqkv + row0 + int64_t(g.NH + g.KVH + kv) * hs;
    for (int h = kv * g.group; h < (kv + 1) * g.group; ++h) {
      const int64_t bh = int64_t(b) * g.NH + h;
      headBackward(dqkv + row0 + int64_t(h) * hs, dk, dv, datt + bh * T * T, att + bh * T * T,
                   qkv + row0 + int64_t(h) * hs, k, v,
                   dout + int64_t(b) * T * g.ldo + int64_t(h) * hs, h == kv * g.group, g);
    }
  }
}

}  // namespace masked

void attentionMaskedForward(float* out, float* att, const float* qkv, int B, int T, int NH, int KVH,
                            int HD, AttentionOptions opt) {
  masked::attentionForward(
      out, att, qkv,
      masked::geometry("attentionMaskedForward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

void attentionMaskedBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                             const float* att, int B, int T, int NH, int KVH, int HD,
                             AttentionOptions opt) {
  masked::attentionBackward(
      dqkv, datt, dout, qkv, att,
      masked::geometry("attentionMaskedBackward", B, T, NH, KVH, HD, int64_t(NH) * HD, opt));
}

}  // namespace ts::kernels::cpu
