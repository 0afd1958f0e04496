// fp8 operand quantization (delayed per-tensor and blockwise per-tile scaling), see Fp8Quant.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/VecMath.h"
#include "trainscope/kernels/Fp8Quant.h"

namespace ts::kernels {

float fp8ScaleFor(float amax, Fp8Format f, int margin, float fallback) {
  // amax > 0 and finite (NaN fails both compares).
  if (!(amax > 0.0f) || !(amax <= 3.40282347e38f)) return fallback;
  const float s = std::ldexp(fp8Max(f) / amax, -margin);
  return std::isfinite(s) && s > 0.0f ? s : fallback;
}

Fp8DelayedScale::Fp8DelayedScale(int historyLength, int margin, Fp8Format format)
    : length_(std::max(1, historyLength)), margin_(std::max(0, margin)), format_(format) {
  history_.reserve(static_cast<size_t>(length_));
}

void Fp8DelayedScale::record(float amax) {
  if (history_.size() < static_cast<size_t>(length_)) {
    history_.push_back(amax);
  } else {
    history_[pos_] = amax;
    pos_ = (pos_ + 1) % history_.size();
  }
  previous_ = scale_;
  rescale(previous_);
}

void Fp8DelayedScale::replaceLast(float amax) {
  if (history_.empty()) return;
  history_[lastIndex()] = amax;
  rescale(previous_);
}

void Fp8DelayedScale::rescale(float previous) {
  // Max over the finite entries: one overflowed step must not poison the scale for the whole
  // history (that step's own values saturate instead).
  float m = 0.0f;
  for (float a : history_)
    if (a <= 3.40282347e38f && a > m) m = a;
  scale_ = fp8ScaleFor(m, format_, margin_, previous);
}

void Fp8DelayedScale::restore(std::vector<float> history, size_t position, float scale) {
  if (history.size() > static_cast<size_t>(length_))
    throw std::invalid_argument("amax history has " + std::to_string(history.size()) +
                                " entries, more than its length " + std::to_string(length_));
  // The ring only wraps once full: a partial history always appends at its end (position 0).
  if (history.size() < static_cast<size_t>(length_) ? position != 0 : position >= history.size())
    throw std::invalid_argument("amax history position " + std::to_string(position) +
                                " is out of range for " + std::to_string(history.size()) +
                                " entries");
  if (!(scale > 0.0f) || !std::isfinite(scale))
    throw std::invalid_argument("fp8 scale must be finite and positive");
  history_ = std::move(history);
  history_.reserve(static_cast<size_t>(length_));
  pos_ = position;
  scale_ = scale;
  previous_ = scale;
}

}  // namespace ts::kernels

namespace ts::kernels::cpu {

namespace {
int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
}  // namespace

int64_t fp8TileCount(int64_t rows, int64_t cols, int64_t tileRows, int64_t tileCols) {
  if (rows <= 0 || cols <= 0 || tileRows <= 0 || tileCols <= 0) return 0;
  return ceilDiv(rows, tileRows) * ceilDiv(cols, tileCols);
}

namespace {

uint32_t absBits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u & 0x7FFFFFFFu;
}

template <Fp8Format F>
uint8_t encode(float v) {
  return F == Fp8Format::E4M3 ? floatToE4M3(v) : floatToE5M2(v);
}
template <Fp8Format F>
float decode(uint8_t v) {
  return F == Fp8Format::E4M3 ? e4m3ToFloat(v) : e5m2ToFloat(v);
}

// Straight loops (no conditional stores) so GCC vectorises them.
template <Fp8Format F>
void encodeSegment(const float* x, uint8_t* q, float s, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) q[c] = encode<F>(x[c] * s);
}
template <Fp8Format F>
void fakeSegment(const float* x, float* d, float s, float inv, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) d[c] = decode<F>(encode<F>(x[c] * s)) * inv;
}
template <Fp8Format F>
void encodeRow(const float* x, uint8_t* q, const float* s, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) q[c] = encode<F>(x[c] * s[c]);
}
template <Fp8Format F>
void fakeRow(const float* x, float* d, const float* s, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) d[c] = decode<F>(encode<F>(x[c] * s[c])) * (1.0f / s[c]);
}

// The band's scaleInv row is its only working space (no scratch to allocate or track): it
// holds each tile's amax bits, then its scale, and last the scale's inverse. 1/s computed where
// it is used is the same float as the stored inverse (IEEE division, no fast-math).
using AliasedBits = uint32_t __attribute__((may_alias));

// One band of tileRows rows, walked row by row (contiguous for every tile shape): pass 1 takes
// each tile's amax as the max of |x| bits (NaN bits exceed inf's, so a NaN poisons its tile),
// pass 2 quantizes with the tile's scale. tileCols == 1 (128x1 tiles) runs per column.
template <Fp8Format F>
void quantizeBand(const float* x, uint8_t* q, float* deq, float* scaleInv, int64_t r0, int64_t r1,
                  int64_t cols, int64_t tileCols, int margin) {
  const int64_t tc = ceilDiv(cols, tileCols);
  std::fill_n(scaleInv, tc, 0.0f);  // all bits zero
  AliasedBits* m = reinterpret_cast<AliasedBits*>(scaleInv);
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    if (tileCols == 1) {
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) m[c] = absBits(xr[c]) > m[c] ? absBits(xr[c]) : m[c];
    } else {
      for (int64_t t = 0; t < tc; ++t) {
        const int64_t c0 = t * tileCols, c1 = std::min(cols, c0 + tileCols);
        uint32_t mt = m[t];
#pragma omp simd reduction(max : mt)
        for (int64_t c = c0; c < c1; ++c) mt = absBits(xr[c]) > mt ? absBits(xr[c]) : mt;
        m[t] = mt;
      }
    }
  }
  float* sc = scaleInv;
  for (int64_t t = 0; t < tc; ++t) {
    const uint32_t bits = m[t];
    float a;
    std::memcpy(&a, &bits, sizeof a);
    sc[t] = fp8ScaleFor(a, F, margin);
  }
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    uint8_t* qr = q ? q + r * cols : nullptr;
    float* dr = deq ? deq + r * cols : nullptr;
    if (tileCols == 1) {
      if (qr) encodeRow<F>(xr, qr, sc, cols);
      if (dr) fakeRow<F>(xr, dr, sc, cols);
    } else {
      for (int64_t t = 0; t < tc; ++t) {
        const int64_t c0 = t * tileCols, n = std::min(cols, c0 + tileCols) - c0;
        if (qr) encodeSegment<F>(xr + c0, qr + c0, sc[t], n);
        if (dr) fakeSegment<F>(xr + c0, dr + c0, sc[t], 1.0f / sc[t], n);
      }
    }
  }
  for (int64_t t = 0; t < tc; ++t) scaleInv[t] = 1.0f / sc[t];
}

}  // namespace

void quantizeFp8Tiles(const float* x, uint8_t* q, float* deq, float* scaleInv, int64_t rows,
                      int64_t cols, int64_t tileRows, int64_t tileCols, Fp8Format f, int margin) {
  if (rows <= 0 || cols <= 0 || tileRows <= 0 || tileCols <= 0) return;
  const int64_t bands = ceilDiv(rows, tileRows), tc = ceilDiv(cols, tileCols);
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols) && bands > 1)
  for (int64_t band = 0; band < bands; ++band) {
    const int64_t r0 = band * tileRows, r1 = std::min(rows, r0 + tileRows);
    if (f == Fp8Format::E4M3)
      quantizeBand<Fp8Format::E4M3>(x, q, deq, scaleInv + band * tc, r0, r1, cols, tileCols,
                                    margin);
    else
      quantizeBand<Fp8Format::E5M2>(x, q, deq, scaleInv + band * tc, r0, r1, cols, tileCols,
                                    margin);
  }
}

void dequantizeFp8Tiles(const uint8_t* q, const float* scaleInv, float* deq, int64_t rows,
                        int64_t cols, int64_t tileRows, int64_t tileCols, Fp8Format f) {
  if (rows <= 0 || cols <= 0 || tileRows <= 0 || tileCols <= 0) return;
  const int64_t tc = ceilDiv(cols, tileCols);
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      deq[r * cols + c] =
          fp8ToFloat(q[r * cols + c], f) * scaleInv[(r / tileRows) * tc + c / tileCols];
}

void fakeQuantizeFp8(const float* x, float* deq, int64_t n, Fp8Format f, float scale) {
  const float inv = 1.0f / scale;
  if (f == Fp8Format::E4M3) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
    for (int64_t i = 0; i < n; ++i) deq[i] = e4m3ToFloat(floatToE4M3(x[i] * scale)) * inv;
  } else {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
    for (int64_t i = 0; i < n; ++i) deq[i] = e5m2ToFloat(floatToE5M2(x[i] * scale)) * inv;
  }
}

}  // namespace ts::kernels::cpu
