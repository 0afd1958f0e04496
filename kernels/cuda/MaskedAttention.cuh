#pragma once
// The one CUDA implementation of causal attention, naive (attention_masked.cu) and flash
// (flash_attention_masked.cu), with AttentionOptions and an explicit head dim. The GQA and
// multi-head ops call it with the default options and their own output row width (C), so they
// run the same kernels (the same results, bitwise).
#include <cstdint>
#include <stdexcept>
#include <string>

#include "Common.cuh"
#include "trainscope/kernels/AttentionOptions.h"

namespace ts::kernels::cuda::masked {

// Shapes and options of one call; qkv rows [NH q heads | KVH k heads | KVH v heads], query
// head h reads kv head h / group.
struct Heads {
  int B, T, NH, KVH, hs, group;
  int64_t rowStride;  // (NH + 2 KVH) hs
  int64_t ldo;        // out / dout row
  float sc, cap;      // scale; soft-cap (0: off)
  int window;         // 0: causal over the whole sequence

  __host__ Heads(const char* what, int B_, int T_, int NH_, int KVH_, int HD, int64_t ldo_,
                 const AttentionOptions& o)
      : B(B_),
        T(T_),
        NH(NH_),
        KVH(KVH_),
        hs(HD),
        group(KVH_ > 0 ? NH_ / KVH_ : 1),
        rowStride(int64_t(NH_ + 2 * KVH_) * HD),
        ldo(ldo_),
        sc(o.scale != 0.0f ? o.scale : 1.0f / sqrtf(float(HD))),
        cap(o.softcap),
        window(o.window) {
    if (NH <= 0 || KVH <= 0 || NH % KVH != 0)
      throw std::invalid_argument(
          std::string(what) + ": NH = " + std::to_string(NH) +
          " query heads are not a multiple of KVH = " + std::to_string(KVH) + " kv heads");
    if (window < 0 || cap < 0.0f)
      throw std::invalid_argument(std::string(what) + ": negative window or softcap");
  }
  // Start of query head h, key head g or value head g in row t of batch b.
  __device__ int64_t q(int b, int t, int h) const {
    return (int64_t(b) * T + t) * rowStride + int64_t(h) * hs;
  }
  __device__ int64_t k(int b, int t, int g) const { return q(b, t, NH + g); }
  __device__ int64_t v(int b, int t, int g) const { return q(b, t, NH + KVH + g); }
  // The lowest key query i sees; one past the last query that sees key j.
  __device__ int firstKey(int i) const { return window > 0 ? max(0, i - window + 1) : 0; }
  __device__ int endQuery(int j) const {
    return window > 0 ? int(min(int64_t(T), int64_t(j) + window)) : T;
  }
  // The scaled score soft-capped; f = its derivative w.r.t. the scaled score.
  __device__ float capped(float s, float* f) const {
    if (cap <= 0.0f) return s;
    const float t = tanhf(s / cap);
    *f = 1.0f - t * t;
    return cap * t;
  }
};

void attentionForward(float* out, float* att, const float* qkv, const Heads& H);
void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, const Heads& H);
void flashForward(float* out, float* lse, const float* qkv, const Heads& H);
void flashBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                   const float* qkv, const Heads& H);

}  // namespace ts::kernels::cuda::masked
