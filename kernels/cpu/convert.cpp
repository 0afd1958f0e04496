// Bulk precision conversions (bf16, fp16, fp8 with scaling, int8 per-row) and amax.
// Each loop calls the branch-free scalar code of Numeric.h, so results are bit-identical to
// it and GCC vectorises the integer selects (AVX2 here).
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cpu {

void floatToBf16(const float* x, uint16_t* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::floatToBf16(x[i]);
}

void bf16ToFloat(const uint16_t* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::bf16ToFloat(x[i]);
}

void floatToFp16(const float* x, uint16_t* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::floatToFp16(x[i]);
}

void fp16ToFloat(const uint16_t* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::fp16ToFloat(x[i]);
}

void floatToFp8(const float* x, uint8_t* y, int64_t n, Fp8Format f, float scale, bool saturate) {
  // Format and saturation hoisted out of the loop so each body is a straight select chain.
  if (f == Fp8Format::E4M3) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
    for (int64_t i = 0; i < n; ++i) y[i] = floatToE4M3(x[i] * scale, saturate);
  } else {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
    for (int64_t i = 0; i < n; ++i) y[i] = floatToE5M2(x[i] * scale, saturate);
  }
}

void fp8ToFloat(const uint8_t* x, float* y, int64_t n, Fp8Format f, float scaleInv) {
  if (f == Fp8Format::E4M3) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
    for (int64_t i = 0; i < n; ++i) y[i] = e4m3ToFloat(x[i]) * scaleInv;
  } else {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
    for (int64_t i = 0; i < n; ++i) y[i] = e5m2ToFloat(x[i]) * scaleInv;
  }
}

namespace {
// |x| bits compare like the magnitudes they encode, and every NaN's bits exceed inf's, so an
// unsigned max over them is amax with NaN propagation, as integer SIMD.
uint32_t absBitsMax(const float* x, int64_t n) {
  uint32_t m = 0;
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], sizeof u);
    u &= 0x7FFFFFFFu;
    m = u > m ? u : m;
  }
  return m;
}
float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace

float amax(const float* x, int64_t n) {
  uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (worthThreading(n))
  for (int64_t c = 0; c < n; c += 8192) {
    const uint32_t part = absBitsMax(x + c, n - c < 8192 ? n - c : 8192);
    m = part > m ? part : m;
  }
  return fromBits(m);
}

void quantizeInt8Rows(const float* x, int8_t* q, float* scales, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    int8_t* qr = q + r * cols;
    const float a = fromBits(absBitsMax(xr, cols));
    const bool finite = a <= 3.40282347e38f;  // false for inf and NaN
    const float inv = (finite && a > 0.0f) ? 127.0f / a : 0.0f;
    scales[r] = finite ? a / 127.0f : std::nanf("");
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      float v = std::nearbyint(xr[c] * inv);
      v = v > 127.0f ? 127.0f : v;
      v = v < -127.0f ? -127.0f : v;
      qr[c] = static_cast<int8_t>(v == v ? v : 0.0f);  // inf * 0 = NaN in poisoned rows
    }
  }
}

void dequantizeInt8Rows(const int8_t* q, const float* scales, float* y, int64_t rows,
                        int64_t cols) {
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols))
  for (int64_t r = 0; r < rows; ++r) {
    const float s = scales[r];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = float(q[r * cols + c]) * s;
  }
}

}  // namespace ts::kernels::cpu
