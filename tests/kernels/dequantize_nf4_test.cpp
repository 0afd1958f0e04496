// NF4 dequantization (Nf4.h) on every instantiated backend (OnBackend.h) against the host rule:
// a tensor quantized on the host, with a short last block, an all-zero block and more than one
// second-level block, dequantized to fp32 and to bf16 into poisoned outputs; CUDA also against
// its CPU twin. tests/engine/model/QloraTest.cpp checks the same ops against bitsandbytes' bytes.
#include <gtest/gtest.h>

#include <algorithm>

#include "OnBackend.h"
#include "TestUtil.h"
#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/kernels/Nf4.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class DequantizeNf4 : public OnBackend {};
}  // namespace

TEST_P(DequantizeNf4, MatchesTheHostRuleIntoPoisonedOutputs) {
  const int64_t n = 64 * 300 + 37;  // 301 blocks: two second-level blocks, a short last block
  auto x = randomVec(size_t(n), 7, -0.05f, 0.05f);
  std::fill(x.begin() + 128, x.begin() + 192, 0.f);  // an all-zero block
  x[1000] = 0.9f;                                    // an outlier block
  const Nf4Layout q{n};
  std::vector<uint8_t> packed(size_t(q.packedBytes())), codes(size_t(q.blocks()));
  std::vector<float> scales(size_t(q.scaleCount()));
  quantizeNf4(x.data(), n, packed.data(), codes.data(), scales.data());
  ASSERT_EQ(q.blocks2(), 2);
  const auto map = dynamicMap(true);
  auto run = [&](Backend& b) {
    DeviceBuffers d(b);
    float* out = d.poisoned(size_t(n));
    auto* out16 = d.up(std::vector<uint16_t>(size_t(n), 0xFFFF));
    const uint8_t* dp = d.up(packed);
    const uint8_t* dc = d.up(codes);
    const float* ds = d.up(scales);
    const float* dm = d.up(map);
    b.dequantizeNf4(out, dp, dc, ds, dm, n);
    b.dequantizeNf4Bf16(out16, dp, dc, ds, dm, n);
    return std::pair{d.down(out, size_t(n)), d.downAs(out16, size_t(n))};
  };
  const auto [got, got16] = run(be());
  double err = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float want = nf4Dequant(packed.data(), codes.data(), scales.data(), map.data(), i);
    ASSERT_EQ(got[size_t(i)], want) << i;
    ASSERT_EQ(got16[size_t(i)], floatToBf16(want)) << i;
    err = std::max(err, double(std::abs(want - x[size_t(i)])));
  }
  EXPECT_LT(err, 0.9 * 0.16) << "NF4's largest half-gap times the largest absmax";
  EXPECT_EQ(got[130], 0.f);  // the all-zero block comes back as zeros
  if (hasTwin()) {
    const auto [c, c16] = run(cpu());
    EXPECT_EQ(got, c);
    EXPECT_EQ(got16, c16);
  }
}

TS_ON_BACKEND(DequantizeNf4);
