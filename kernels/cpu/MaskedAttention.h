#pragma once
// The one CPU implementation of causal attention, naive (attention_masked.cpp) and flash
// (flash_attention_masked.cpp), with AttentionOptions and an explicit head dim. The GQA and
// multi-head ops call it with the default options and their own output row width (C), so
// every op shares the same GEMMs and loops (the same results, bitwise).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "trainscope/kernels/AttentionOptions.h"

namespace ts::kernels::cpu::masked {

// Shapes and options of one call, resolved once.
struct Geometry {
  int B = 0, T = 0, NH = 0, KVH = 0, HD = 0, group = 1;
  int64_t C3 = 0;   // qkv row: q heads | k heads | v heads
  int64_t ldo = 0;  // out / dout row
  float sc = 0.0f, cap = 0.0f;
  int window = 0;
  // The lowest key query i sees.
  int firstKey(int i) const { return window > 0 ? std::max(0, i - window + 1) : 0; }
  // One past the last query that sees key j.
  int endQuery(int j) const {
    return window > 0 ? int(std::min<int64_t>(T, int64_t(j) + window)) : T;
  }
};

inline Geometry geometry(const char* what, int B, int T, int NH, int KVH, int HD, int64_t ldo,
                         const AttentionOptions& opt) {
  if (NH <= 0 || KVH <= 0 || NH % KVH != 0)
    throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                " query heads are not a multiple of KVH = " + std::to_string(KVH) +
                                " kv heads");
  if (opt.window < 0 || opt.softcap < 0.0f)
    throw std::invalid_argument(std::string(what) + ": negative window or softcap");
  Geometry g;
  g.B = B;
  g.T = T;
  g.NH = NH;
  g.KVH = KVH;
  g.HD = HD;
  g.group = NH / KVH;
  g.C3 = int64_t(NH + 2 * KVH) * HD;
  g.ldo = ldo;
  g.sc = opt.scale != 0.0f ? opt.scale : 1.0f / std::sqrt(float(HD));
  g.cap = opt.softcap;
  g.window = opt.window;
  return g;
}

void attentionForward(float* out, float* att, const float* qkv, const Geometry& g);
void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, const Geometry& g);
void flashForward(float* out, float* lse, const float* qkv, const Geometry& g);
void flashBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                   const float* qkv, const Geometry& g);

}  // namespace ts::kernels::cpu::masked
