// Naive causal self-attention: materialises P = softmax(QK^T/sqrt(d)) (B, NH, T, T).
// The products are GEMMs on strided views of qkv (dnnl_sgemm with leading dimensions), done
// in row blocks so the causal upper triangle is mostly skipped. Heads run in parallel; each
// GEMM inside a parallel region runs single-threaded (oneDNN detects the enclosing team).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/Gemm.h"
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {
constexpr int kBlock = 64;
const auto sgemm = stridedGemm;
}  // namespace

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = 3 * int64_t(C);
  const bool headsParallel = B * NH >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (headsParallel)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const float* q = qkv + int64_t(b) * T * C3 + int64_t(h) * hs;
    const float* k = q + C;
    const float* v = q + 2 * C;
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

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float sc = 1.0f / std::sqrt(float(hs));
  const int64_t C3 = 3 * int64_t(C);
  const bool headsParallel = B * NH >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (headsParallel)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    const int64_t base = int64_t(b) * T * C3 + int64_t(h) * hs;
    const float* q = qkv + base;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + base;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
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
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j <= i; ++j) dot += p[j] * d[j];
#pragma omp simd
        for (int j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot) * sc;
        std::fill(d + i + 1, d + T, 0.0f);  // masked: later GEMMs read the triangle's zeros
      }
      // dQ rows [r0, r1) = dS[r0:r1, 0:r1] K[0:r1].
      sgemm('N', 'N', r1 - r0, hs, r1, 1.0f, dS + int64_t(r0) * T, T, k, C3, 0.0f, dq + r0 * C3,
            C3);
    }
    for (int c0 = 0; c0 < T; c0 += kBlock) {
      const int c1 = std::min(T, c0 + kBlock);
      // Key rows [c0, c1) only get gradient from query rows i >= c0.
      sgemm('T', 'N', c1 - c0, hs, T - c0, 1.0f, dS + int64_t(c0) * T + c0, T, q + c0 * C3, C3,
            0.0f, dk + c0 * C3, C3);
      sgemm('T', 'N', c1 - c0, hs, T - c0, 1.0f, P + int64_t(c0) * T + c0, T, dO + int64_t(c0) * C,
            C, 0.0f, dv + c0 * C3, C3);
    }
  }
}

}  // namespace ts::kernels::cpu
