// The Convert and Fp8Quant backend ops against Numeric.h's scalar conversions (themselves
// checked bit-exactly against independent codecs in tests/precision): every 16- and 8-bit
// pattern back to fp32, fp32 inputs with specials, subnormals and overflow down, and the fp8 tile
// quantization against a per-tile reference written here. Runs on every instantiated backend
// (OnBackend.h), CUDA also vs the CPU twin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "OnBackend.h"
#include "TestUtil.h"
#include "trainscope/kernels/Fp8Quant.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class ConvertOps : public OnBackend {};
class Fp8TileOps : public OnBackend {};

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Random values over many binades plus the edge cases of every format.
std::vector<float> convertInputs() {
  auto x = randomVec(20000, 21, -1.f, 1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], int(i % 80) - 40);
  const float inf = std::numeric_limits<float>::infinity();
  for (float v :
       {0.f, -0.f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), floatOf(0xFF812345u),
        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(), 65504.f,
        65520.f, 448.f, 464.f, 480.f, 57344.f, 61440.f, 1e-8f, 3e-5f})
    x.push_back(v);
  return x;
}

std::vector<uint16_t> all16() {
  std::vector<uint16_t> v(65536);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint16_t(i);
  return v;
}
std::vector<uint8_t> all8() {
  std::vector<uint8_t> v(256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i);
  return v;
}

::testing::AssertionResult sameBits(const std::vector<float>& got, const std::vector<float>& want) {
  for (size_t i = 0; i < got.size(); ++i)
    if (bitsOf(got[i]) != bitsOf(want[i]))
      return ::testing::AssertionFailure() << "[" << i << "] got 0x" << std::hex << bitsOf(got[i])
                                           << " want 0x" << bitsOf(want[i]);
  return ::testing::AssertionSuccess();
}
}  // namespace

TEST_P(ConvertOps, SixteenBitFormatsMatchTheScalarConversions) {
  const auto x = convertInputs();
  const auto h = all16();
  const int64_t n = int64_t(x.size());
  for (bool bf16 : {true, false}) {
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      auto* y = static_cast<uint16_t*>(static_cast<void*>(d.poisoned(x.size())));
      float* back = d.poisoned(h.size());
      if (bf16) {
        b.floatToBf16(d.up(x), y, n);
        b.bf16ToFloat(d.up(h), back, int64_t(h.size()));
      } else {
        b.floatToFp16(d.up(x), y, n);
        b.fp16ToFloat(d.up(h), back, int64_t(h.size()));
      }
      return std::pair{d.downAs(y, x.size()), d.down(back, h.size())};
    };
    const auto [y, back] = run(be());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(y[i], bf16 ? floatToBf16(x[i]) : floatToFp16(x[i]))
          << (bf16 ? "bf16 " : "fp16 ") << x[i];
    std::vector<float> want(h.size());
    for (size_t i = 0; i < h.size(); ++i) want[i] = bf16 ? bf16ToFloat(h[i]) : fp16ToFloat(h[i]);
    EXPECT_TRUE(sameBits(back, want)) << (bf16 ? "bf16" : "fp16");
    if (hasTwin()) {
      const auto [cy, cback] = run(cpu());
      EXPECT_EQ(y, cy);
      EXPECT_TRUE(sameBits(back, cback));
    }
  }
  // n = 0 touches nothing.
  be().floatToBf16(nullptr, nullptr, 0);
  be().fp16ToFloat(nullptr, nullptr, 0);
}

TEST_P(ConvertOps, Fp8MatchesTheScalarConversionsWithScaleAndSaturation) {
  const auto x = convertInputs();
  const auto q = all8();
  const int64_t n = int64_t(x.size());
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (bool sat : {true, false})
      for (float scale : {1.f, 0.375f, 1024.f}) {
        DeviceBuffers d(be());
        auto* y = static_cast<uint8_t*>(static_cast<void*>(d.poisoned(x.size())));
        float* back = d.poisoned(q.size());
        be().floatToFp8(d.up(x), y, n, f, scale, sat);
        be().fp8ToFloat(d.up(q), back, int64_t(q.size()), f, 1.f / scale);
        const auto gy = d.downAs(y, x.size());
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_EQ(gy[i], floatToFp8(x[i] * scale, f, sat))
              << int(f) << " sat " << sat << " scale " << scale << " x " << x[i];
        std::vector<float> want(q.size());
        for (size_t i = 0; i < q.size(); ++i) want[i] = fp8ToFloat(q[i], f) * (1.f / scale);
        EXPECT_TRUE(sameBits(d.down(back, q.size()), want)) << int(f) << " scale " << scale;
      }
}

namespace {
struct TileCase {
  int64_t rows, cols, tr, tc;
  int margin;
};

// Per-tile reference: scale from the tile's max |x|, q = fp8(x * scale), deq = float(q) / scale.
void tileReference(const std::vector<float>& x, const TileCase& c, Fp8Format f,
                   std::vector<uint8_t>& q, std::vector<float>& deq, std::vector<float>& inv) {
  const int64_t tpr = (c.cols + c.tc - 1) / c.tc, tiles = (c.rows + c.tr - 1) / c.tr * tpr;
  q.assign(x.size(), 0);
  deq.assign(x.size(), 0.f);
  inv.assign(size_t(tiles), 0.f);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = t / tpr * c.tr, c0 = t % tpr * c.tc;
    const int64_t r1 = std::min(c.rows, r0 + c.tr), c1 = std::min(c.cols, c0 + c.tc);
    float a = 0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = c0; k < c1; ++k) a = std::max(a, std::fabs(x[size_t(r * c.cols + k)]));
    const float s = fp8ScaleFor(a, f, c.margin);
    inv[size_t(t)] = 1.f / s;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t k = c0; k < c1; ++k) {
        const size_t i = size_t(r * c.cols + k);
        q[i] = floatToFp8(x[i] * s, f, true);
        deq[i] = fp8ToFloat(q[i], f) * inv[size_t(t)];
      }
  }
}
}  // namespace

TEST_P(Fp8TileOps, QuantizeAndDequantizeTilesMatchAPerTileReference) {
  for (TileCase c : {TileCase{37, 300, 1, 128, 0},
                     {300, 37, 128, 1, 0},
                     {200, 300, 128, 128, 0},
                     {9, 20, 4, 8, 2},
                     {1, 1, 128, 128, 0}}) {
    auto x = randomVec(size_t(c.rows * c.cols), 31, -5.f, 5.f);
    // One all-zero tile (scale falls back to 1) and one with a large outlier.
    for (int64_t r = 0; r < std::min(c.rows, c.tr); ++r)
      for (int64_t k = 0; k < std::min(c.cols, c.tc); ++k) x[size_t(r * c.cols + k)] = 0.f;
    x.back() = 3000.f;
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      std::vector<uint8_t> wq;
      std::vector<float> wdeq, winv;
      tileReference(x, c, f, wq, wdeq, winv);
      auto run = [&](Backend& b) {
        DeviceBuffers d(b);
        auto* q = static_cast<uint8_t*>(static_cast<void*>(d.poisoned(x.size())));
        float* deq = d.poisoned(x.size());
        float* inv = d.poisoned(winv.size());
        float* deq2 = d.poisoned(x.size());
        b.quantizeFp8Tiles(d.up(x), q, deq, inv, c.rows, c.cols, c.tr, c.tc, f, c.margin);
        b.dequantizeFp8Tiles(q, inv, deq2, c.rows, c.cols, c.tr, c.tc, f);
        // q null: values only (the GEMM operand path).
        float* deq3 = d.poisoned(x.size());
        b.quantizeFp8Tiles(d.up(x), nullptr, deq3, inv, c.rows, c.cols, c.tr, c.tc, f, c.margin);
        return std::tuple{d.downAs(q, x.size()), d.down(deq, x.size()), d.down(inv, winv.size()),
                          d.down(deq2, x.size()), d.down(deq3, x.size())};
      };
      const auto [q, deq, inv, deq2, deq3] = run(be());
      const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.cols) + " tiles " +
                               std::to_string(c.tr) + "x" + std::to_string(c.tc);
      EXPECT_EQ(q, wq) << what;
      EXPECT_TRUE(sameBits(deq, wdeq)) << what;
      EXPECT_TRUE(sameBits(inv, winv)) << what;
      EXPECT_TRUE(sameBits(deq2, wdeq)) << what << " (dequantize)";
      EXPECT_TRUE(sameBits(deq3, wdeq)) << what << " (no bytes)";
      if (hasTwin()) {
        const auto [cq, cdeq, cinv, cdeq2, cdeq3] = run(cpu());
        EXPECT_EQ(q, cq) << what;
        EXPECT_TRUE(sameBits(deq, cdeq)) << what << " vs cpu";
      }
    }
  }
}

TEST_P(Fp8TileOps, FakeQuantizeIsQuantizeThenDequantizeAtOneScale) {
  const auto x = convertInputs();
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (float scale : {1.f, 0.0625f, 37.f}) {
      DeviceBuffers d(be());
      float* deq = d.poisoned(x.size());
      be().fakeQuantizeFp8(d.up(x), deq, int64_t(x.size()), f, scale);
      std::vector<float> want(x.size());
      for (size_t i = 0; i < x.size(); ++i)
        want[i] = fp8ToFloat(floatToFp8(x[i] * scale, f, true), f) * (1.f / scale);
      EXPECT_TRUE(sameBits(d.down(deq, x.size()), want)) << int(f) << " scale " << scale;
    }
}

TS_ON_BACKEND(ConvertOps);
TS_ON_BACKEND(Fp8TileOps);
