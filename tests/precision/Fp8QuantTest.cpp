// fp8 GEMM-operand quantization (kernels/Fp8Quant.h) against an independent reference written
// here: amax in double, scale = fp8Max / amax / 2^margin, values rounded by RefEncoder (exact
// midpoint comparison, RefFormat.h), tiles enumerated by hand. Both recipes: delayed
// (per-tensor, amax history) and DeepSeek-V3 blockwise (1x128, 128x1 and 128x128 tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "RefFormat.h"
#include "trainscope/kernels/Fp8Quant.h"

namespace ts::test {
namespace {

namespace k = ts::kernels;
namespace kc = ts::kernels::cpu;

// Values spanning ~12 binades with a different magnitude per row and column band, so every
// tile gets its own scale.
std::vector<float> spread(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> x(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[size_t(r * cols + c)] = n(rng) * std::ldexp(1.0f, int((r * 7 + (c / 50) * 3) % 13) - 6);
  return x;
}

// Reference per-tile quantize -> dequantize.
std::vector<float> refTiles(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t tr,
                            int64_t tc, const RefFormat& rf, double fmax, int margin,
                            std::vector<float>* scaleInvOut = nullptr) {
  const RefEncoder enc(rf);
  std::vector<float> y(x.size());
  for (int64_t r0 = 0; r0 < rows; r0 += tr)
    for (int64_t c0 = 0; c0 < cols; c0 += tc) {
      double a = 0;
      for (int64_t r = r0; r < std::min(rows, r0 + tr); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + tc); ++c)
          a = std::max(a, std::fabs(double(x[size_t(r * cols + c)])));
      const float scale = a > 0 ? float(fmax) / float(a) * std::ldexp(1.0f, -margin) : 1.f;
      const float inv = 1.0f / scale;
      if (scaleInvOut) scaleInvOut->push_back(inv);
      for (int64_t r = r0; r < std::min(rows, r0 + tr); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + tc); ++c) {
          const size_t i = size_t(r * cols + c);
          const uint32_t code = enc.encode(x[i] * scale, true);
          y[i] = float(refDecode(rf, code)) * inv;
        }
    }
  return y;
}

void expectSameBits(const std::vector<float>& got, const std::vector<float>& want,
                    const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(bitsOf(got[i]), bitsOf(want[i]))
        << what << " element " << i << ": " << got[i] << " vs reference " << want[i];
}

struct TileCase {
  int64_t rows, cols, tr, tc;
};

TEST(Fp8Blockwise, TilesMatchIndependentReference) {
  // Activation tiles 1x128 (per token, along the reduction dim), their transposed use for
  // wgrad (128x1), weight blocks 128x128; shapes with partial edge tiles.
  for (const TileCase t : {TileCase{5, 300, 1, 128}, TileCase{200, 70, 128, 1},
                           TileCase{260, 300, 128, 128}, TileCase{3, 128, 1, 128}}) {
    for (const auto& [rf, fmt] :
         {std::pair{kE4M3, k::Fp8Format::E4M3}, std::pair{kE5M2, k::Fp8Format::E5M2}}) {
      const auto x = spread(t.rows, t.cols, uint32_t(t.rows * 31 + t.cols));
      std::vector<float> wantScales;
      const auto want = refTiles(x, t.rows, t.cols, t.tr, t.tc, rf, k::fp8Max(fmt), 0, &wantScales);
      const int64_t tiles = kc::fp8TileCount(t.rows, t.cols, t.tr, t.tc);
      ASSERT_EQ(tiles, int64_t(wantScales.size()));
      std::vector<uint8_t> q(x.size());
      std::vector<float> deq(x.size()), scaleInv(static_cast<size_t>(tiles)), again(x.size());
      kc::quantizeFp8Tiles(x.data(), q.data(), deq.data(), scaleInv.data(), t.rows, t.cols, t.tr,
                           t.tc, fmt, 0);
      expectSameBits(deq, want, rf.name);
      expectSameBits(scaleInv, wantScales, "scaleInv");
      // The bytes plus the per-tile dequantization scales are what an fp8 GEMM receives.
      kc::dequantizeFp8Tiles(q.data(), scaleInv.data(), again.data(), t.rows, t.cols, t.tr, t.tc,
                             fmt);
      expectSameBits(again, want, "dequantize(bytes)");
      // Every tile uses its format's range: its largest value maps to fp8Max exactly.
      for (uint8_t b : q) ASSERT_LE(std::fabs(k::fp8ToFloat(b, fmt)), k::fp8Max(fmt));
    }
  }
}

TEST(Fp8Blockwise, MarginAndZeroTiles) {
  std::vector<float> x(256, 0.f);
  for (int i = 128; i < 256; ++i) x[size_t(i)] = float(i - 128) * 0.37f - 20.f;
  std::vector<float> scaleInv(2), deq(256);
  kc::quantizeFp8Tiles(x.data(), nullptr, deq.data(), scaleInv.data(), 1, 256, 1, 128,
                       k::Fp8Format::E4M3, 2);
  EXPECT_EQ(scaleInv[0], 1.f);  // all-zero tile: scale 1, values stay 0
  for (int i = 0; i < 128; ++i) EXPECT_EQ(deq[size_t(i)], 0.f);
  const auto want = refTiles(x, 1, 256, 1, 128, kE4M3, 448.0, 2);
  expectSameBits(deq, want, "margin 2");
  // margin 2: the amax lands at 448 / 4 = 112.
  float a = 0.f;
  for (float v : x) a = std::max(a, std::fabs(v));
  EXPECT_FLOAT_EQ(1.f / scaleInv[1], 112.f / a);
}

TEST(Fp8Delayed, ScaleComesFromTheAmaxHistory) {
  k::Fp8DelayedScale s(3, 1, k::Fp8Format::E5M2);
  EXPECT_EQ(s.scale(), 1.f);  // nothing recorded yet
  s.record(0.f);              // an all-zero tensor keeps the previous scale
  EXPECT_EQ(s.scale(), 1.f);
  const float amaxes[] = {2.f, 8.f, 1.f, 0.5f, 0.25f};
  // Reference: max over the last 3 recorded amaxes (the zero included), 57344 / max / 2^1.
  std::vector<float> hist = {0.f};
  for (float a : amaxes) {
    s.record(a);
    hist.push_back(a);
    if (hist.size() > 3) hist.erase(hist.begin());
    const float m = *std::max_element(hist.begin(), hist.end());
    EXPECT_EQ(s.scale(), float(57344.0 / m / 2.0)) << "after amax " << a;
  }
  EXPECT_EQ(s.historySize(), 3);
  // A non-finite amax (overflowed step) is ignored by the max, so the scale stays usable.
  k::Fp8DelayedScale t(4, 0, k::Fp8Format::E4M3);
  t.record(4.f);
  t.record(std::numeric_limits<float>::infinity());
  EXPECT_EQ(t.scale(), 112.f);
}

// Checkpointing: a history restored from another's state (mid-ring, with an inf entry) then
// produces the same scales as the original for every further amax.
TEST(Fp8Delayed, RestoredStateContinuesIdentically) {
  k::Fp8DelayedScale a(3, 0, k::Fp8Format::E4M3);
  for (float v : {2.f, std::numeric_limits<float>::infinity(), 8.f, 0.5f}) a.record(v);
  ASSERT_EQ(a.position(), 1u);  // the ring has wrapped once
  k::Fp8DelayedScale b(3, 0, k::Fp8Format::E4M3);
  b.restore(a.history(), a.position(), a.scale());
  for (float v : {0.25f, 16.f, 1.f, 0.125f, 0.f, 4.f}) {
    a.record(v);
    b.record(v);
    EXPECT_EQ(a.scale(), b.scale()) << "after amax " << v;
    EXPECT_EQ(a.position(), b.position());
  }
  // States that cannot come from a history of length 3 are refused, and say why.
  k::Fp8DelayedScale c(3, 0, k::Fp8Format::E4M3);
  EXPECT_THROW(c.restore({1.f, 2.f, 3.f, 4.f}, 0, 1.f), std::invalid_argument);
  EXPECT_THROW(c.restore({1.f, 2.f}, 1, 1.f), std::invalid_argument);
  EXPECT_THROW(c.restore({1.f, 2.f, 3.f}, 3, 1.f), std::invalid_argument);
  EXPECT_THROW(c.restore({1.f}, 0, 0.f), std::invalid_argument);
  try {
    c.restore({1.f, 2.f, 3.f, 4.f}, 0, 1.f);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("more than its length 3"), std::string::npos) << e.what();
  }
}

// Data parallel: each rank records its own amax, then replaces it with the max over the ranks.
// The result is the history (and scale) of recording that max in the first place, before and
// after the ring wraps, also when the local amax was zero (which keeps the previous scale).
TEST(Fp8Delayed, ReplacingTheLastAmaxEqualsRecordingIt) {
  k::Fp8DelayedScale direct(3, 0, k::Fp8Format::E4M3), reduced(3, 0, k::Fp8Format::E4M3);
  const std::pair<float, float> steps[] = {{0.f, 2.f},   {1.f, 4.f},     {0.5f, 0.5f}, {3.f, 8.f},
                                           {0.f, 0.25f}, {0.125f, 16.f}, {0.f, 0.f}};
  for (const auto& [local, global] : steps) {
    direct.record(global);
    reduced.record(local);
    reduced.replaceLast(global);
    EXPECT_EQ(reduced.scale(), direct.scale()) << "global amax " << global;
    EXPECT_EQ(reduced.history(), direct.history());
    EXPECT_EQ(reduced.position(), direct.position());
    EXPECT_EQ(reduced.last(), global);
  }
}

TEST(Fp8Delayed, FakeQuantizeIsQuantizeThenDequantize) {
  const auto x = spread(17, 129, 5);
  const int64_t n = int64_t(x.size());
  for (const auto& [rf, fmt] :
       {std::pair{kE4M3, k::Fp8Format::E4M3}, std::pair{kE5M2, k::Fp8Format::E5M2}}) {
    const float scale = 37.5f;
    std::vector<float> fused(x.size()), viaBytes(x.size()), want(x.size());
    std::vector<uint8_t> q(x.size());
    kc::fakeQuantizeFp8(x.data(), fused.data(), n, fmt, scale);
    kc::floatToFp8(x.data(), q.data(), n, fmt, scale);
    kc::fp8ToFloat(q.data(), viaBytes.data(), n, fmt, 1.f / scale);
    const RefEncoder enc(rf);
    for (size_t i = 0; i < x.size(); ++i)
      want[i] = float(refDecode(rf, enc.encode(x[i] * scale, true))) * (1.f / scale);
    expectSameBits(fused, want, "fused");
    expectSameBits(viaBytes, want, "bytes");
  }
}

}  // namespace
}  // namespace ts::test
