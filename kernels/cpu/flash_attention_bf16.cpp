// Flash attention with bf16 tensor-core numerics, on the CPU: the reference the CUDA twin
// (mma.sync tiles) is tested against, not a fast path (CpuBackend reports it emulated, so the
// engine runs flashAttentionGqa* on the CPU). Row by row: S in fp32 from bf16-rounded q and k,
// the row max and sum, then the bf16-rounded probabilities times bf16 v (OpList.h states the
// rounding points both twins share). One thread per (batch, kv head): it owns that head's dk
// and dv and the dq of its query heads, so every output has one writer.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {
inline float r16(float x) {
  return ts::kernels::bf16ToFloat(ts::kernels::floatToBf16(x));
}

struct Shape {
  int B, T, C, NH, KVH, hs, group;
  int64_t C3;
  Shape(int B_, int T_, int C_, int NH_, int KVH_, const char* what)
      : B(B_), T(T_), C(C_), NH(NH_), KVH(KVH_), hs(0), group(0), C3(0) {
    if (NH <= 0 || KVH <= 0 || NH % KVH != 0 || C % NH != 0)
      throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                  " query heads must divide C = " + std::to_string(C) +
                                  " and be a multiple of KVH = " + std::to_string(KVH));
    hs = C / NH;
    group = NH / KVH;
    C3 = int64_t(NH + 2 * KVH) * hs;
  }
  // part 0: query head h; 1 / 2: key / value of kv head h.
  int64_t at(int b, int t, int part, int h) const {
    const int head = part == 0 ? h : part == 1 ? NH + h : NH + KVH + h;
    return (int64_t(b) * T + t) * C3 + int64_t(head) * hs;
  }
};

// The (b, kv head g) q, k, v and (optionally) dout rows rounded to bf16 once.
struct Rounded {
  std::vector<float> q, k, v, dO;
  void load(const Shape& s, const float* qkv, const float* dout, int b, int g) {
    const size_t Th = size_t(s.T) * s.hs;
    q.resize(Th * s.group);
    k.resize(Th);
    v.resize(Th);
    if (dout) dO.resize(Th * s.group);
    for (int t = 0; t < s.T; ++t) {
      for (int d = 0; d < s.hs; ++d) {
        k[size_t(t) * s.hs + d] = r16(qkv[s.at(b, t, 1, g) + d]);
        v[size_t(t) * s.hs + d] = r16(qkv[s.at(b, t, 2, g) + d]);
      }
      for (int hh = 0; hh < s.group; ++hh) {
        const int h = g * s.group + hh;
        for (int d = 0; d < s.hs; ++d) {
          q[Th * hh + size_t(t) * s.hs + d] = r16(qkv[s.at(b, t, 0, h) + d]);
          if (dout)
            dO[Th * hh + size_t(t) * s.hs + d] =
                r16(dout[(int64_t(b) * s.T + t) * s.C + int64_t(h) * s.hs + d]);
        }
      }
    }
  }
};

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}
}  // namespace

void flashAttentionBf16Forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                               int NH, int KVH) {
  const Shape s(B, T, C, NH, KVH, "flashAttentionBf16Forward");
  const float sc = 1.0f / std::sqrt(float(s.hs));
  const int64_t work = int64_t(B) * KVH;
#pragma omp parallel if (work > 1)
  {
    Rounded r;
    std::vector<float> S(static_cast<size_t>(T)), o(static_cast<size_t>(s.hs));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int b = int(w / KVH), g = int(w % KVH);
      r.load(s, qkv, nullptr, b, g);
      for (int hh = 0; hh < s.group; ++hh) {
        const int h = g * s.group + hh;
        for (int i = 0; i < T; ++i) {
          const float* q = r.q.data() + (size_t(hh) * T + i) * s.hs;
          float m = -std::numeric_limits<float>::infinity();
          for (int j = 0; j <= i; ++j) {
            S[j] = dot(q, r.k.data() + size_t(j) * s.hs, s.hs) * sc;
            m = std::max(m, S[j]);
          }
          float l = 0.0f;
          std::fill(o.begin(), o.end(), 0.0f);
          for (int j = 0; j <= i; ++j) {
            const float p = std::exp(S[j] - m);
            l += p;
            const float p16 = r16(p);
            const float* v = r.v.data() + size_t(j) * s.hs;
            for (int d = 0; d < s.hs; ++d) o[d] += p16 * v[d];
          }
          float* dst = out + (int64_t(b) * T + i) * C + int64_t(h) * s.hs;
          for (int d = 0; d < s.hs; ++d) dst[d] = o[d] / l;
          lse[(int64_t(b) * NH + h) * T + i] = m + std::log(l);
        }
      }
    }
  }
}

void flashAttentionBf16Backward(float* dqkv, const float* dout, const float* out, const float* lse,
                                const float* qkv, int B, int T, int C, int NH, int KVH) {
  const Shape s(B, T, C, NH, KVH, "flashAttentionBf16Backward");
  const float sc = 1.0f / std::sqrt(float(s.hs));
  const int64_t work = int64_t(B) * KVH;
#pragma omp parallel if (work > 1)
  {
    Rounded r;
    std::vector<float> dk, dv, dq(static_cast<size_t>(s.hs));
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      const int b = int(w / KVH), g = int(w % KVH);
      r.load(s, qkv, dout, b, g);
      dk.assign(size_t(T) * s.hs, 0.0f);
      dv.assign(size_t(T) * s.hs, 0.0f);
      for (int hh = 0; hh < s.group; ++hh) {
        const int h = g * s.group + hh;
        for (int i = 0; i < T; ++i) {
          const float* q = r.q.data() + (size_t(hh) * T + i) * s.hs;
          const float* go = r.dO.data() + (size_t(hh) * T + i) * s.hs;
          const float* o = out + (int64_t(b) * T + i) * C + int64_t(h) * s.hs;
          const float D = dot(go, o, s.hs), L = lse[(int64_t(b) * NH + h) * T + i];
          std::fill(dq.begin(), dq.end(), 0.0f);
          for (int j = 0; j <= i; ++j) {
            const float* k = r.k.data() + size_t(j) * s.hs;
            const float* v = r.v.data() + size_t(j) * s.hs;
            const float p = std::exp(dot(q, k, s.hs) * sc - L);
            const float ds16 = r16(p * (dot(go, v, s.hs) - D)), p16 = r16(p);
            float* dkj = dk.data() + size_t(j) * s.hs;
            float* dvj = dv.data() + size_t(j) * s.hs;
            for (int d = 0; d < s.hs; ++d) {
              dq[d] += ds16 * k[d];
              dkj[d] += ds16 * q[d];
              dvj[d] += p16 * go[d];
            }
          }
          float* dst = dqkv + s.at(b, i, 0, h);
          for (int d = 0; d < s.hs; ++d) dst[d] = dq[d] * sc;
        }
      }
      for (int j = 0; j < T; ++j)
        for (int d = 0; d < s.hs; ++d) {
          dqkv[s.at(b, j, 1, g) + d] = dk[size_t(j) * s.hs + d] * sc;
          dqkv[s.at(b, j, 2, g) + d] = dv[size_t(j) * s.hs + d];
        }
    }
  }
}

}  // namespace ts::kernels::cpu
