// Naive causal self-attention: materialises P = softmax(QK^T/sqrt(d)) (B, NH, T, T).
// The products are GEMMs on strided views of qkv (dnnl_sgemm with leading dimensions), done
// in row blocks so the causal upper triangle is mostly skipped. Heads run in parallel; each
// GEMM inside a parallel region runs single-threaded (oneDNN detects the enclosing team).
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

namespace ts::kernels::cpu {

namespace {
constexpr int kBlock = 64;
const auto sgemm = stridedGemm;
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
  const int hs = C / NH, group = NH / KVH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = int64_t(NH + 2 * KVH) * hs;  // qkv row: q heads | k heads | v heads
  const bool headsParallel = B * NH >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (headsParallel)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH, g = h / group;
    const float* row0 = qkv + int64_t(b) * T * C3;
    const float* q = row0 + int64_t(h) * hs;
    const float* k = row0 + int64_t(NH + g) * hs;
    const float* v = row0 + int64_t(NH + KVH + g) * hs;
    float* P = att + int64_t(bh) * T * T;
    float* o = out + int64_t(b) * T * C + int64_t(h) * hs;
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock);
      // Scores for rows [r0, r1) against keys [0, r1): everything right of r1 is masked.
      sgemm('N', 'T', r1 - r0, r1, hs, sc, q + r0 * C3, C3, k, C3, 0.0f, P + int64_t(r0) * T, T);
      for (int i = r0; i < r1; ++i) {
        float* p = P + int64_t(i) * T;
        float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
        for (int j = 0; j <= i; ++j) mx = vmax(mx, p[j]);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= i; ++j) {
          p[j] = vexp(p[j] - mx);
          sum += p[j];
        }
        const float inv = 1.0f / sum;
#pragma omp simd
        for (int j = 0; j <= i; ++j) p[j] *= inv;
        std::fill(p + i + 1, p + T, 0.0f);
      }
      sgemm('N', 'N', r1 - r0, hs, r1, 1.0f, P + int64_t(r0) * T, T, v, C3, 0.0f,
            o + int64_t(r0) * C, C);
    }
  }
}

void attentionGqaBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH, int KVH) {
  checkKvHeads(NH, KVH, "attentionGqaBackward");
  const int hs = C / NH, group = NH / KVH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = int64_t(NH + 2 * KVH) * hs;
  // One task per (batch, kv head): it owns dK and dV of that head and sums the query heads of
  // its group into them in head order (no atomics, fixed order).
  const bool headsParallel = B * KVH >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (headsParallel)
  for (int bg = 0; bg < B * KVH; ++bg) {
    const int b = bg / KVH, g = bg % KVH;
    const int64_t row0 = int64_t(b) * T * C3;
    const float* k = qkv + row0 + int64_t(NH + g) * hs;
    const float* v = qkv + row0 + int64_t(NH + KVH + g) * hs;
    float* dk = dqkv + row0 + int64_t(NH + g) * hs;
    float* dv = dqkv + row0 + int64_t(NH + KVH + g) * hs;
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const int bh = b * NH + h;
      const float* q = qkv + row0 + int64_t(h) * hs;
      float* dq = dqkv + row0 + int64_t(h) * hs;
      const float* P = att + int64_t(bh) * T * T;
      float* dS = datt + int64_t(bh) * T * T;
      const float* dO = dout + int64_t(b) * T * C + int64_t(h) * hs;
      for (int r0 = 0; r0 < T; r0 += kBlock) {
        const int r1 = std::min(T, r0 + kBlock);
        // dP = dO V^T for rows [r0, r1), keys [0, r1).
        sgemm('N', 'T', r1 - r0, r1, hs, 1.0f, dO + int64_t(r0) * C, C, v, C3, 0.0f,
              dS + int64_t(r0) * T, T);
        for (int i = r0; i < r1; ++i) {
          const float* p = P + int64_t(i) * T;
          float* d = dS + int64_t(i) * T;
          // P as saved may be rounded (16-bit or int8 storage) and not sum to 1; dividing by
          // its sum keeps sum_j dS[i,j] = 0 (softmax's shift invariance). Otherwise the rounding
          // of a P near 1 (2^-9 in bf16) swamps the small true gradient of a sharp row's
          // dominant score, and bf16 runs stall on the default preset's plateau.
          float dot = 0.0f, psum = 0.0f;
#pragma omp simd reduction(+ : dot, psum)
          for (int j = 0; j <= i; ++j) {
            dot += p[j] * d[j];
            psum += p[j];
          }
          if (psum > 0.0f) dot /= psum;
#pragma omp simd
          for (int j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot) * sc;
          std::fill(d + i + 1, d + T, 0.0f);  // masked: later GEMMs read the triangle's zeros
        }
        // dQ rows [r0, r1) = dS[r0:r1, 0:r1] K[0:r1].
        sgemm('N', 'N', r1 - r0, hs, r1, 1.0f, dS + int64_t(r0) * T, T, k, C3, 0.0f, dq + r0 * C3,
              C3);
      }
      const float beta = h == g * group ? 0.0f : 1.0f;  // the group's first head writes
      for (int c0 = 0; c0 < T; c0 += kBlock) {
        const int c1 = std::min(T, c0 + kBlock);
        // Key rows [c0, c1) only get gradient from query rows i >= c0.
        sgemm('T', 'N', c1 - c0, hs, T - c0, 1.0f, dS + int64_t(c0) * T + c0, T, q + c0 * C3, C3,
              beta, dk + c0 * C3, C3);
        sgemm('T', 'N', c1 - c0, hs, T - c0, 1.0f, P + int64_t(c0) * T + c0, T,
              dO + int64_t(c0) * C, C, beta, dv + c0 * C3, C3);
      }
    }
  }
}

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attentionGqaForward(out, att, qkv, B, T, C, NH, NH);
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH) {
  attentionGqaBackward(dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cpu
