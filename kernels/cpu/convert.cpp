// Bulk precision conversions (bf16, fp16, fp8 with scaling, int8 per-row) and amax.
// Each loop is bit-identical to the branch-free scalar code of Numeric.h. bf16 and fp16 have
// explicit x86 paths chosen at run time: fp16 through F16C (vcvtps2ph / vcvtph2ps, hardware
// RNE, 8 values per instruction) and bf16 through AVX2 integer rounding. Elsewhere the scalar
// loops (which GCC vectorises) run. AVX512-BF16's vcvtneps2bf16 is deliberately not used: it
// flushes fp32 subnormal inputs to zero, so it is not bit-exact to the RNE reference.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/Numeric.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define TS_CONVERT_X86 1
#endif

namespace ts::kernels::cpu {

namespace {

#if defined(TS_CONVERT_X86)
bool haveF16c() {
  // CPUID leaf 1 ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c"); AVX2
  // (checked with the OS's AVX state support) is required for the 256-bit paths anyway.
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0 && __builtin_cpu_supports("avx2");
  }();
  return ok;
}
bool haveAvx2() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

// Hardware RNE (imm8 0 = round to nearest even, MXCSR ignored). Overflow gives inf, NaN gives
// a quiet NaN keeping the top 9 payload bits, fp32 subnormals give signed zero: exactly the
// scalar floatToFp16.
__attribute__((target("avx2,f16c"))) void floatToFp16F16c(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = ts::kernels::floatToFp16(x[i]);
}

// vcvtph2ps is exact for every finite value and subnormal, but quiets signalling NaNs; the
// reference keeps NaN payloads bit for bit, so exponent-31 lanes are rebuilt from the bits.
__attribute__((target("avx2,f16c"))) void fp16ToFloatF16c(const uint16_t* x, float* y, int64_t n) {
  const __m256i expMask = _mm256_set1_epi32(0x7C00);
  const __m256i signMask = _mm256_set1_epi32(0x8000);
  const __m256i mantMask = _mm256_set1_epi32(0x3FF);
  const __m256i infBits = _mm256_set1_epi32(0x7F800000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m256 f = _mm256_cvtph_ps(h);
    const __m256i w = _mm256_cvtepu16_epi32(h);
    const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(w, expMask), expMask);
    const __m256i bits = _mm256_or_si256(
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(w, signMask), 16), infBits),
        _mm256_slli_epi32(_mm256_and_si256(w, mantMask), 13));
    _mm256_storeu_ps(y + i,
                     _mm256_blendv_ps(f, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(special)));
  }
  for (; i < n; ++i) y[i] = ts::kernels::fp16ToFloat(x[i]);
}

// The scalar floatToBf16 on 8 lanes: RNE by adding 0x7FFF + lsb, NaN -> top half | quiet bit.
__attribute__((target("avx2"))) void floatToBf16Avx2(const float* x, uint16_t* y, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i half = _mm256_set1_epi32(0x7FFF);
  const __m256i absMask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i top = _mm256_srli_epi32(u, 16);
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, half), _mm256_and_si256(top, one)), 16);
    // |u| > inf as signed int32 compare: both sides are non-negative.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absMask), inf);
    const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(top, quiet), nan);
    // Every lane is <= 0xFFFF, so the unsigned-saturating pack is a plain narrowing.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), packed);
  }
  for (; i < n; ++i) y[i] = ts::kernels::floatToBf16(x[i]);
}

__attribute__((target("avx2"))) void bf16ToFloatAvx2(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), w);
  }
  for (; i < n; ++i) y[i] = ts::kernels::bf16ToFloat(x[i]);
}
#endif

// A SIMD conversion moves 6 bytes per element at memory speed: below this many elements it
// takes less time than waking the other threads (a 16-bit block's weights or gradients of a
// small model are upcast several times a step).
constexpr int64_t kThreadedConversion = int64_t(1) << 18;

// Runs body(begin, count) over [0, n) in contiguous chunks, threaded for large n. Chunks are
// multiples of 64 elements so every chunk but the last is a whole number of SIMD blocks.
template <class Body>
void chunked(int64_t n, Body body) {
  if (n <= 0) return;
  if (n < kThreadedConversion) {
    body(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    const int64_t parts = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t per = ((n + parts - 1) / parts + 63) / 64 * 64;
    const int64_t begin = me * per;
    if (begin < n) body(begin, std::min(per, n - begin));
  }
}

}  // namespace

bool hasF16cConversion() {
#if defined(TS_CONVERT_X86)
  return haveF16c();
#else
  return false;
#endif
}

void floatToBf16(const float* x, uint16_t* y, int64_t n) {
#if defined(TS_CONVERT_X86)
  if (haveAvx2())
    return chunked(n, [&](int64_t b, int64_t c) { floatToBf16Avx2(x + b, y + b, c); });
#endif
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::floatToBf16(x[i]);
}

void bf16ToFloat(const uint16_t* x, float* y, int64_t n) {
#if defined(TS_CONVERT_X86)
  if (haveAvx2())
    return chunked(n, [&](int64_t b, int64_t c) { bf16ToFloatAvx2(x + b, y + b, c); });
#endif
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::bf16ToFloat(x[i]);
}

void floatToFp16(const float* x, uint16_t* y, int64_t n) {
#if defined(TS_CONVERT_X86)
  if (haveF16c())
    return chunked(n, [&](int64_t b, int64_t c) { floatToFp16F16c(x + b, y + b, c); });
#endif
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) y[i] = ts::kernels::floatToFp16(x[i]);
}

void fp16ToFloat(const uint16_t* x, float* y, int64_t n) {
#if defined(TS_CONVERT_X86)
  if (haveF16c())
    return chunked(n, [&](int64_t b, int64_t c) { fp16ToFloatF16c(x + b, y + b, c); });
#endif
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
