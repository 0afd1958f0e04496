#pragma once
// Low-precision number formats: bit-exact scalar conversions (host and, under nvcc, device)
// plus the bulk CPU array conversions of kernels/cpu/convert.cpp.
//
// Storage types: uint16_t holds bf16 / fp16 bits, uint8_t holds fp8 bits.
// Rounding is always round-to-nearest-even (RNE) on the exact fp32 value.
//  - bf16: fp32's range, 7 mantissa bits. NaN -> quiet NaN (sign kept), inf preserved,
//    values rounding past max (~3.39e38) become inf (IEEE).
//  - fp16: max 65504, min normal 2^-14, subnormals down to 2^-24; |x| >= 65520 -> inf;
//    NaN -> quiet NaN with the top payload bits kept.
//  - fp8 E4M3 ("fn", OCP/NVIDIA): bias 7, max 448, no inf, NaN = S.1111.111 (0x7F/0xFF),
//    subnormals down to 2^-9. Overflow (|x| > 464, i.e. rounds past 448) and +-inf give +-448
//    when `saturate` (NVIDIA's __NV_SATFINITE; the training default) else NaN.
//  - fp8 E5M2: bias 15, IEEE-like (inf = S.11111.00, NaN = mantissa != 0), max 57344,
//    subnormals down to 2^-16. Overflow (|x| >= 61440) and +-inf give +-57344 when
//    `saturate` else +-inf. NaN -> S.11111.11 for both fp8 formats (sign kept).
// Everything is written with selects instead of branches so the array loops vectorise, and
// in C++17 so the CUDA twins (kernels/cuda/convert.cu) share exactly this code.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TS_NUMERIC_HD __host__ __device__ __forceinline__
#else
#define TS_NUMERIC_HD inline
#endif

namespace ts::kernels {

enum class Fp8Format : uint8_t { E4M3, E5M2 };

// Published limits (shared/reference.md, Precision).
inline constexpr float kFp16Max = 65504.0f;
inline constexpr float kFp16MinNormal = 6.103515625e-05f;  // 2^-14
inline constexpr float kBf16Max = 3.38953139e38f;          // (2 - 2^-7) * 2^127
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;
// Largest finite value of an fp8 format (for delayed-scaling recipes: scale = max / amax).
TS_NUMERIC_HD float fp8Max(Fp8Format f) {
  return f == Fp8Format::E4M3 ? kE4M3Max : kE5M2Max;
}

namespace numeric_detail {
TS_NUMERIC_HD uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
TS_NUMERIC_HD float floatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// cond ? a : b as bit masks: GCC's vectoriser gives up on some mixed-width selects.
TS_NUMERIC_HD uint32_t pick(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - uint32_t(cond);
  return (a & mask) | (b & ~mask);
}

// Rounds the finite fp32 magnitude `a` (bits, sign cleared) to a binary format with M
// mantissa bits and exponent bias B (B <= 127 - 24 so fp32 subnormals are far below its
// smallest subnormal). Returns exponent<<M | mantissa; results past the format's top are
// the caller's to detect. Carries out of the mantissa bump the exponent, which is exactly
// RNE's behaviour at binade edges (including subnormal -> smallest normal).
template <int M, int B>
TS_NUMERIC_HD uint32_t roundMagnitude(uint32_t a) {
  // Normal: re-bias the exponent, then round away the low 23-M mantissa bits.
  uint32_t r = a - (uint32_t(127 - B) << 23);
  r += ((1u << (22 - M)) - 1u) + ((r >> (23 - M)) & 1u);
  const uint32_t normal = r >> (23 - M);
  // Subnormal: count units of 2^(1-B-M). value = m * 2^(e-150), so q = m >> (151-B-M-e).
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const int32_t sRaw = int32_t(151 - B - M) - int32_t(e);
  // Clamped to [1, 31] for every input: both paths are computed (branch-free, vectorisable) and
  // normals give sRaw < 1, where an unclamped shift would be undefined behaviour.
  const uint32_t s = uint32_t(sRaw > 31 ? 31 : (sRaw < 1 ? 1 : sRaw));
  // Same RNE trick as above: add half-1 plus the kept lsb, then shift (m + bias < 2^31).
  const uint32_t sub = (m + ((1u << (s - 1u)) - 1u) + ((m >> s) & 1u)) >> s;
  // Sub-normal path only below the format's smallest normal 2^(1-B); guard `s` use above.
  return pick(a < (uint32_t(128 - B) << 23), sub, normal);
}
}  // namespace numeric_detail

// ---- bf16 ------------------------------------------------------------------------------
TS_NUMERIC_HD uint16_t floatToBf16(float x) {
  const uint32_t u = numeric_detail::bitsOf(x);
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  return uint16_t(nan ? ((u >> 16) | 0x40u) : rounded);
}
TS_NUMERIC_HD float bf16ToFloat(uint16_t b) {
  return numeric_detail::floatOf(uint32_t(b) << 16);
}

// ---- fp16 ------------------------------------------------------------------------------
TS_NUMERIC_HD uint16_t floatToFp16(float x) {
  const uint32_t u = numeric_detail::bitsOf(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t nan = 0x7E00u | ((a >> 13) & 0x3FFu);
  // 0x477FF000 = 65520, the midpoint between 65504 and 65536 (rounds to even = inf).
  const uint32_t finite =
      numeric_detail::pick(a >= 0x477FF000u, 0x7C00u, numeric_detail::roundMagnitude<10, 15>(a));
  return uint16_t(sign | numeric_detail::pick(a > 0x7F800000u, nan, finite));
}
TS_NUMERIC_HD float fp16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu;
  const uint32_t m = h & 0x3FFu;
  const uint32_t normal = ((e + 112u) << 23) | (m << 13);
  const uint32_t special = 0x7F800000u | (m << 13);
  const uint32_t sub = numeric_detail::bitsOf(float(m) * 5.9604644775390625e-08f);  // m*2^-24
  return numeric_detail::floatOf(sign | (e == 0 ? sub : (e == 31 ? special : normal)));
}

// ---- fp8 E4M3 (fn) ---------------------------------------------------------------------
TS_NUMERIC_HD uint8_t floatToE4M3(float x, bool saturate = true) {
  const uint32_t u = numeric_detail::bitsOf(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // 0x43E80000 = 464, the midpoint between 448 and the (non-existent) 480: ties go to 448.
  const uint32_t over = saturate ? 0x7Eu : 0x7Fu;
  const uint32_t finite =
      numeric_detail::pick(a > 0x43E80000u, over, numeric_detail::roundMagnitude<3, 7>(a));
  return uint8_t(sign | numeric_detail::pick(a > 0x7F800000u, 0x7Fu, finite));
}
TS_NUMERIC_HD float e4m3ToFloat(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t e = (v >> 3) & 0xFu;
  const uint32_t m = v & 0x7u;
  const uint32_t normal = ((e + 120u) << 23) | (m << 20);
  const uint32_t sub = numeric_detail::bitsOf(float(m) * 0.001953125f);  // m * 2^-9
  const uint32_t mag = (v & 0x7Fu) == 0x7Fu ? 0x7FC00000u : (e == 0 ? sub : normal);
  return numeric_detail::floatOf(sign | mag);
}

// ---- fp8 E5M2 --------------------------------------------------------------------------
TS_NUMERIC_HD uint8_t floatToE5M2(float x, bool saturate = true) {
  const uint32_t u = numeric_detail::bitsOf(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // 0x47700000 = 61440, the midpoint between 57344 and 65536 (ties to even = inf).
  const uint32_t over = saturate ? 0x7Bu : 0x7Cu;
  const uint32_t finite =
      numeric_detail::pick(a >= 0x47700000u, over, numeric_detail::roundMagnitude<2, 15>(a));
  return uint8_t(sign | numeric_detail::pick(a > 0x7F800000u, 0x7Fu, finite));
}
TS_NUMERIC_HD float e5m2ToFloat(uint8_t v) {
  // E5M2 is the top byte of fp16 (same exponent, 2 of fp16's 10 mantissa bits).
  return fp16ToFloat(uint16_t(uint16_t(v) << 8));
}

TS_NUMERIC_HD uint8_t floatToFp8(float x, Fp8Format f, bool saturate = true) {
  return f == Fp8Format::E4M3 ? floatToE4M3(x, saturate) : floatToE5M2(x, saturate);
}
TS_NUMERIC_HD float fp8ToFloat(uint8_t v, Fp8Format f) {
  return f == Fp8Format::E4M3 ? e4m3ToFloat(v) : e5m2ToFloat(v);
}

}  // namespace ts::kernels

#if !defined(__CUDACC__)
namespace ts::kernels::cpu {
// Bulk conversions (kernels/cpu/convert.cpp): OpenMP-parallel over large arrays, vectorised,
// results identical to the scalar functions above element by element. n <= 0 is a no-op.
// On x86 the 16-bit ones pick a SIMD path at run time (fp16: F16C, bf16: AVX2).
// True when fp16 conversions run on the CPU's F16C instructions (checked at run time).
bool hasF16cConversion();
void floatToBf16(const float* x, uint16_t* y, int64_t n);
void bf16ToFloat(const uint16_t* x, float* y, int64_t n);
void floatToFp16(const float* x, uint16_t* y, int64_t n);
void fp16ToFloat(const uint16_t* x, float* y, int64_t n);

// y = fp8(x * scale) (delayed/current scaling: scale = fp8Max(f) / amax, or 1).
void floatToFp8(const float* x, uint8_t* y, int64_t n, Fp8Format f, float scale = 1.0f,
                bool saturate = true);
// y = float(x) * scaleInv (scaleInv = 1 / the scale used when quantizing).
void fp8ToFloat(const uint8_t* x, float* y, int64_t n, Fp8Format f, float scaleInv = 1.0f);

// max |x| over n values (0 for n <= 0); inf if any +-inf, NaN if any NaN (a poisoned tensor
// must not be silently scaled).
float amax(const float* x, int64_t n);

// Symmetric per-row int8: scales[r] = max|row| / 127, q = rint(x / scales[r]) in [-127, 127]
// (computed as x * (127 / max|row|)). All-zero rows: scale 0, q 0. A row holding inf/NaN gets
// scale NaN and q 0, so it dequantises to NaN instead of hiding the overflow.
void quantizeInt8Rows(const float* x, int8_t* q, float* scales, int64_t rows, int64_t cols);
// y = q * scales[row].
void dequantizeInt8Rows(const int8_t* q, const float* scales, float* y, int64_t rows, int64_t cols);
}  // namespace ts::kernels::cpu
#endif
