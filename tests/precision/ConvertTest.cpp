// bf16 / fp16 / fp8 conversions, bit-exact against the reference codecs of RefFormat.h.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "RefFormat.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::test {
namespace {

namespace k = ts::kernels;
namespace kc = ts::kernels::cpu;

std::string hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Same bits, or both NaN with the same sign.
bool sameFloat(float a, double ref) {
  if (std::isnan(ref)) return std::isnan(a) && std::signbit(a) == std::signbit(ref);
  return bitsOf(a) == bitsOf(float(ref));  // ref values are exact in fp32
}

// fp32 inputs that stress rounding for `r`: every representable value, its fp32 neighbours,
// every midpoint to the next value and its neighbours (ties and near-ties; including the
// midpoint past max = overflow boundary and the subnormal/normal edge), both signs; fp32
// specials and subnormals; a strided sweep over all 2^32 patterns; random patterns.
std::vector<float> probes(const RefEncoder& r) {
  std::vector<float> out;
  const float inf = std::numeric_limits<float>::infinity();
  auto add = [&](float v) {
    out.push_back(v);
    out.push_back(-v);
  };
  for (uint32_t c = 0; c <= r.maxCode(); ++c) {
    const float v = float(r.values()[c]);
    const double midD = (r.values()[c] + r.upperNeighbour(c)) / 2;
    const float mid = float(midD);
    EXPECT_EQ(double(mid), midD) << "midpoint not representable in fp32";
    for (float p : {v, std::nextafter(v, inf), std::nextafter(v, 0.0f), mid,
                    std::nextafter(mid, inf), std::nextafter(mid, 0.0f)})
      add(p);
  }
  for (float s : {0.0f, inf, std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), floatOf(0x00400000u),
                  floatOf(0x007FFFFFu), 1.0f, 3.0f, 1e-30f, 1e30f})
    add(s);
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4093) {
    const float v = floatOf(uint32_t(u));
    if (!std::isnan(v)) out.push_back(v);
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 300000; ++i) {
    const float v = floatOf(uint32_t(rng()));
    if (!std::isnan(v)) out.push_back(v);
  }
  return out;
}

// Runs `encode` over the probes and compares with the reference; reports the first misses.
void expectRounding(const RefEncoder& ref, const std::vector<float>& xs,
                    const std::vector<uint32_t>& got, bool saturate, const char* what) {
  ASSERT_EQ(xs.size(), got.size());
  size_t bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint32_t want = ref.encode(xs[i], saturate);
    if (got[i] != want && ++bad <= 5)
      ADD_FAILURE() << what << "(" << xs[i] << " = " << hex(bitsOf(xs[i])) << ") = " << hex(got[i])
                    << ", reference " << hex(want);
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << xs.size() << " values differ";
}

// ---- 16-bit formats: all 65,536 patterns ------------------------------------------------

template <class Decode, class Encode>
void checkAll16(const RefFormat& f, Decode decode, Encode encode) {
  int nanCount = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    const double want = refDecode(f, c);
    const float got = decode(uint16_t(c));
    ASSERT_TRUE(sameFloat(got, want))
        << f.name << " decode " << hex(c) << " = " << got << ", reference " << want;
    const uint16_t back = encode(got);
    if (std::isnan(want)) {
      ++nanCount;
      // Still a NaN of the same sign, now quiet (top mantissa bit set).
      ASSERT_TRUE(std::isnan(refDecode(f, back)))
          << f.name << " NaN " << hex(c) << " -> " << hex(back);
      ASSERT_EQ(back & 0x8000u, c & 0x8000u);
      ASSERT_NE(back & (1u << (f.M - 1)), 0u) << "NaN not quiet: " << hex(back);
    } else {
      ASSERT_EQ(back, c) << f.name << " round trip of " << hex(c);
    }
  }
  // Both signs x (2^M - 1) non-zero mantissas with the exponent all ones.
  EXPECT_EQ(nanCount, 2 * ((1 << f.M) - 1));
}

TEST(Bf16, AllPatternsDecodeAndRoundTrip) {
  checkAll16(
      kBf16, [](uint16_t b) { return k::bf16ToFloat(b); },
      [](float x) { return k::floatToBf16(x); });
}

TEST(Fp16, AllPatternsDecodeAndRoundTrip) {
  checkAll16(
      kFp16, [](uint16_t b) { return k::fp16ToFloat(b); },
      [](float x) { return k::floatToFp16(x); });
}

TEST(Bf16, BulkDecodeAllPatternsMatchesReference) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = uint16_t(c);
  std::vector<float> y(65536);
  kc::bf16ToFloat(codes.data(), y.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c) ASSERT_TRUE(sameFloat(y[c], refDecode(kBf16, c))) << hex(c);
  kc::fp16ToFloat(codes.data(), y.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c) ASSERT_TRUE(sameFloat(y[c], refDecode(kFp16, c))) << hex(c);
}

TEST(Bf16, RoundingMatchesExactReference) {
  const RefEncoder ref(kBf16);
  const auto xs = probes(ref);
  std::vector<uint16_t> bulk(xs.size());
  kc::floatToBf16(xs.data(), bulk.data(), int64_t(xs.size()));
  std::vector<uint32_t> got(bulk.begin(), bulk.end()), scalar(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) scalar[i] = k::floatToBf16(xs[i]);
  expectRounding(ref, xs, got, false, "bulk floatToBf16");
  expectRounding(ref, xs, scalar, false, "floatToBf16");
}

TEST(Fp16, RoundingMatchesExactReference) {
  const RefEncoder ref(kFp16);
  const auto xs = probes(ref);
  std::vector<uint16_t> bulk(xs.size());
  kc::floatToFp16(xs.data(), bulk.data(), int64_t(xs.size()));
  std::vector<uint32_t> got(bulk.begin(), bulk.end()), scalar(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) scalar[i] = k::floatToFp16(xs[i]);
  expectRounding(ref, xs, got, false, "bulk floatToFp16");
  expectRounding(ref, xs, scalar, false, "floatToFp16");
}

TEST(Fp16, PublishedLimits) {
  EXPECT_EQ(k::fp16ToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(k::fp16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(k::fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(k::floatToFp16(65504.0f), 0x7BFF);
  EXPECT_EQ(k::floatToFp16(65519.99f), 0x7BFF);
  EXPECT_EQ(k::floatToFp16(65520.0f), 0x7C00);  // tie between 65504 (odd) and 2^16 -> inf
  EXPECT_EQ(k::floatToFp16(-1e6f), 0xFC00);
  EXPECT_EQ(k::floatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(k::floatToFp16(std::ldexp(1.5f, -25)), 0x0001);  // above tie
  EXPECT_EQ(k::floatToFp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp -> even 2
  EXPECT_EQ(k::floatToFp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);  // -> normal
  EXPECT_EQ(k::kFp16Max, 65504.0f);
  EXPECT_EQ(k::kFp16MinNormal, std::ldexp(1.0f, -14));
}

TEST(Bf16, PublishedLimits) {
  EXPECT_NEAR(k::bf16ToFloat(0x7F7F), 3.39e38f, 0.01e38f);
  EXPECT_EQ(k::bf16ToFloat(0x7F7F), k::kBf16Max);
  EXPECT_EQ(k::floatToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past max
  EXPECT_EQ(k::floatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(k::floatToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(k::floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even 1.0
  EXPECT_EQ(k::floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even
}

TEST(Bf16Fp16, NaNStaysQuietNaNWithSign) {
  for (uint32_t nanBits :
       {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFFC00000u, 0xFF800001u, 0x7FFFFFFFu}) {
    const float x = floatOf(nanBits);
    const uint16_t b = k::floatToBf16(x), h = k::floatToFp16(x);
    EXPECT_TRUE(std::isnan(refDecode(kBf16, b))) << hex(nanBits) << " -> " << hex(b);
    EXPECT_TRUE(std::isnan(refDecode(kFp16, h))) << hex(nanBits) << " -> " << hex(h);
    EXPECT_NE(b & 0x0040u, 0u);
    EXPECT_NE(h & 0x0200u, 0u);
    EXPECT_EQ(b >> 15, nanBits >> 31);
    EXPECT_EQ(h >> 15, nanBits >> 31);
  }
}

// ---- fp8: all 256 patterns --------------------------------------------------------------

struct Fp8Case {
  RefFormat ref;
  k::Fp8Format fmt;
};
class Fp8 : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8, AllPatternsDecodeMatchesDefinition) {
  const auto [f, fmt] = GetParam();
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = uint8_t(c);
  std::vector<float> bulk(256);
  kc::fp8ToFloat(codes.data(), bulk.data(), 256, fmt);
  int nans = 0, infs = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    const double want = refDecode(f, c);
    nans += std::isnan(want);
    infs += std::isinf(want);
    EXPECT_TRUE(sameFloat(k::fp8ToFloat(uint8_t(c), fmt), want)) << f.name << " " << hex(c);
    EXPECT_TRUE(sameFloat(bulk[c], want)) << f.name << " bulk " << hex(c);
  }
  // E4M3fn: NaN only at 0x7F/0xFF, no inf. E5M2: 2 x 3 NaNs and +-inf.
  EXPECT_EQ(nans, fmt == k::Fp8Format::E4M3 ? 2 : 6);
  EXPECT_EQ(infs, fmt == k::Fp8Format::E4M3 ? 0 : 2);
}

TEST_P(Fp8, EncodeOfEveryValueRoundTrips) {
  const auto [f, fmt] = GetParam();
  for (uint32_t c = 0; c < 256; ++c) {
    const double v = refDecode(f, c);
    if (std::isnan(v)) {
      EXPECT_EQ(k::floatToFp8(float(v), fmt), (c & 0x80u) | 0x7Fu);
      continue;
    }
    for (bool sat : {false, true}) {
      const uint8_t back = k::floatToFp8(float(v), fmt, sat);
      if (std::isinf(v) && sat)
        EXPECT_EQ(back, (c & 0x80u) | 0x7Bu) << "inf saturates to max";
      else
        EXPECT_EQ(back, c) << f.name << " value " << v << " sat " << sat;
    }
  }
}

TEST_P(Fp8, MidpointsRoundToEven) {
  const auto [f, fmt] = GetParam();
  const RefEncoder ref(f);
  for (uint32_t c = 0; c < ref.maxCode(); ++c) {
    const float mid = float((ref.values()[c] + ref.values()[c + 1]) / 2);
    const uint8_t got = k::floatToFp8(mid, fmt);
    EXPECT_TRUE(got == c || got == c + 1) << f.name << " mid " << mid;
    EXPECT_EQ(got % 2, 0) << f.name << " midpoint " << mid << " -> " << hex(got);
    EXPECT_EQ(k::floatToFp8(-mid, fmt), got | 0x80u);
  }
}

TEST_P(Fp8, RoundingMatchesExactReference) {
  const auto [f, fmt] = GetParam();
  const RefEncoder ref(f);
  const auto xs = probes(ref);
  for (bool sat : {true, false}) {
    std::vector<uint8_t> bulk(xs.size());
    kc::floatToFp8(xs.data(), bulk.data(), int64_t(xs.size()), fmt, 1.0f, sat);
    std::vector<uint32_t> got(bulk.begin(), bulk.end()), scalar(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) scalar[i] = k::floatToFp8(xs[i], fmt, sat);
    expectRounding(ref, xs, got, sat, "bulk floatToFp8");
    expectRounding(ref, xs, scalar, sat, "floatToFp8");
  }
}

TEST_P(Fp8, ScaledQuantizeAndDequantize) {
  const auto [f, fmt] = GetParam();
  const RefEncoder ref(f);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(70000);  // above the threading threshold
  for (auto& v : x) v = nd(rng);
  x[123] = 0.0f;
  x[456] = std::numeric_limits<float>::quiet_NaN();
  const float a = kc::amax(x.data(), int64_t(x.size()));
  ASSERT_TRUE(std::isnan(a));  // NaN propagates through amax
  x[456] = 1.0f;
  const float am = kc::amax(x.data(), int64_t(x.size()));
  const float scale = k::fp8Max(fmt) / am, scaleInv = am / k::fp8Max(fmt);
  std::vector<uint8_t> q(x.size());
  std::vector<float> y(x.size());
  kc::floatToFp8(x.data(), q.data(), int64_t(x.size()), fmt, scale);
  kc::fp8ToFloat(q.data(), y.data(), int64_t(y.size()), fmt, scaleInv);
  const double relUlp = std::ldexp(1.0, -int(f.M) - 1);  // half ulp, relative, for normals
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t want = ref.encode(x[i] * scale, true);
    ASSERT_EQ(q[i], want) << "x=" << x[i];
    ASSERT_TRUE(sameFloat(y[i], double(float(refDecode(f, want)) * scaleInv)));
    // Scaled so amax hits the format's max: nothing saturates, normals within half an ulp.
    if (std::fabs(x[i] * scale) >= std::ldexp(1.0, 1 - f.bias)) {
      ASSERT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) * relUlp * 1.0001 + 1e-30) << x[i];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8,
                         ::testing::Values(Fp8Case{kE4M3, k::Fp8Format::E4M3},
                                           Fp8Case{kE5M2, k::Fp8Format::E5M2}),
                         [](const auto& info) { return std::string(info.param.ref.name); });

TEST(Fp8Limits, PublishedNumbersAndSaturation) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(k::e4m3ToFloat(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(k::e4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(k::e4m3ToFloat(0xFF)));
  EXPECT_EQ(k::e4m3ToFloat(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(k::e4m3ToFloat(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(k::e5m2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(k::e5m2ToFloat(0x7C), inf);
  EXPECT_EQ(k::e5m2ToFloat(0xFC), -inf);
  EXPECT_TRUE(std::isnan(k::e5m2ToFloat(0x7D)));
  EXPECT_EQ(k::e5m2ToFloat(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(k::kE4M3Max, 448.0f);
  EXPECT_EQ(k::kE5M2Max, 57344.0f);
  // E4M3: 464 is the tie between 448 and the missing 480 -> 448; beyond -> NaN or saturate.
  EXPECT_EQ(k::floatToE4M3(464.0f, false), 0x7E);
  EXPECT_EQ(k::floatToE4M3(464.1f, false), 0x7F);
  EXPECT_EQ(k::floatToE4M3(-1e9f, false), 0xFF);
  EXPECT_EQ(k::floatToE4M3(inf, false), 0x7F);
  EXPECT_EQ(k::floatToE4M3(1e9f, true), 0x7E);
  EXPECT_EQ(k::floatToE4M3(-inf, true), 0xFE);
  EXPECT_EQ(k::floatToE4M3(std::numeric_limits<float>::quiet_NaN(), true), 0x7F);
  // E5M2: 61440 is the tie between 57344 (odd) and 2^16 -> inf without saturation.
  EXPECT_EQ(k::floatToE5M2(61440.0f, false), 0x7C);
  EXPECT_EQ(k::floatToE5M2(61439.996f, false), 0x7B);
  EXPECT_EQ(k::floatToE5M2(61440.0f, true), 0x7B);
  EXPECT_EQ(k::floatToE5M2(-inf, false), 0xFC);
  EXPECT_EQ(k::floatToE5M2(-inf, true), 0xFB);
  EXPECT_EQ(k::floatToE5M2(-std::numeric_limits<float>::quiet_NaN(), true), 0xFF);
  // Below half the smallest subnormal -> signed zero; the tie itself -> even (zero).
  EXPECT_EQ(k::floatToE4M3(std::ldexp(1.0f, -10), true), 0x00);
  EXPECT_EQ(k::floatToE4M3(-std::ldexp(1.0f, -10), true), 0x80);
  EXPECT_EQ(k::floatToE4M3(std::ldexp(1.01f, -10), true), 0x01);
}

TEST(BulkConvert, MatchesScalarOnOddLengthsAndEmpty) {
  std::mt19937 rng(99);
  for (int64_t n : {0, 1, 7, 17, 33, 1000, 40001}) {
    std::vector<float> x(size_t(n) + 1);
    for (auto& v : x) v = floatOf(uint32_t(rng()));
    std::vector<uint16_t> b(size_t(n) + 1, 0xABCD), h(size_t(n) + 1, 0xABCD);
    kc::floatToBf16(x.data(), b.data(), n);
    kc::floatToFp16(x.data(), h.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i], k::floatToBf16(x[i]));
      ASSERT_EQ(h[i], k::floatToFp16(x[i]));
    }
    EXPECT_EQ(b[n], 0xABCD) << "wrote past n";
    EXPECT_EQ(h[n], 0xABCD) << "wrote past n";
  }
}

// The SIMD bulk paths (F16C for fp16, AVX2 for bf16, chosen at run time) are bit-identical to
// the scalar codecs that the tests above check against the references: every 16-bit pattern
// decoded (NaN payloads included, signalling ones too), and a strided sweep over all 2^32 fp32
// patterns plus every signalling/quiet NaN shape encoded.
TEST(BulkConvert, SimdPathsBitExactIncludingNaNPayloads) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = uint16_t(c);
  std::vector<float> y(65536);
  kc::fp16ToFloat(codes.data(), y.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c)
    ASSERT_EQ(bitsOf(y[c]), bitsOf(k::fp16ToFloat(uint16_t(c)))) << "fp16 decode " << hex(c);
  kc::bf16ToFloat(codes.data(), y.data(), 65536);
  for (uint32_t c = 0; c < 65536; ++c)
    ASSERT_EQ(bitsOf(y[c]), bitsOf(k::bf16ToFloat(uint16_t(c)))) << "bf16 decode " << hex(c);

  std::vector<float> x;
  for (uint64_t u = 0; u < (1ull << 32); u += 4099) x.push_back(floatOf(uint32_t(u)));
  for (uint32_t m : {1u, 2u, 0x1FFFu, 0x2000u, 0x3FFFFFu, 0x400000u, 0x7FFFFFu, 0x401234u})
    for (uint32_t sign : {0u, 0x80000000u}) x.push_back(floatOf(sign | 0x7F800000u | m));
  const int64_t n = int64_t(x.size());
  std::vector<uint16_t> h(x.size()), b(x.size());
  kc::floatToFp16(x.data(), h.data(), n);
  kc::floatToBf16(x.data(), b.data(), n);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], k::floatToFp16(x[i])) << "fp16 encode " << hex(bitsOf(x[i]));
    ASSERT_EQ(b[i], k::floatToBf16(x[i])) << "bf16 encode " << hex(bitsOf(x[i]));
  }
  std::printf("fp16 bulk conversion uses F16C: %s\n", kc::hasF16cConversion() ? "yes" : "no");
}

}  // namespace
}  // namespace ts::test
