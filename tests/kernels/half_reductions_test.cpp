// The 16-bit gradient buffer's reductions (OpList.h: sumSquaresHalf, countNonFiniteHalf) on
// every instantiated backend (OnBackend.h): the sum of squares against an fp64 sum of the
// exactly widened values, the count against the values planted; bf16 and fp16, sizes across
// the CUDA grid (more elements than its 512 x 256 threads); CUDA also against its CPU twin.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "OnBackend.h"
#include "TestUtil.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class HalfReductions : public OnBackend {};

std::vector<uint16_t> halves(const std::vector<float>& x, bool fp16) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = fp16 ? floatToFp16(x[i]) : floatToBf16(x[i]);
  return h;
}
}  // namespace

TEST_P(HalfReductions, SumOfSquaresIsTheWidenedValuesInDouble) {
  for (bool fp16 : {false, true})
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(1000), int64_t(131072 + 77)}) {
      const auto h = halves(randomVec(size_t(n), 7, -3.f, 3.f), fp16);
      double want = 0;
      for (uint16_t v : h) {
        const double w = fp16 ? fp16ToFloat(v) : bf16ToFloat(v);
        want += w * w;
      }
      DeviceBuffers d(be());
      const double got = be().sumSquaresHalf(d.up(h), n, fp16);
      EXPECT_NEAR(got, want, 1e-12 * want) << (fp16 ? "fp16" : "bf16") << " n " << n;
      if (hasTwin()) {
        DeviceBuffers c(cpu());
        EXPECT_NEAR(got, cpu().sumSquaresHalf(c.up(h), n, fp16), 1e-12 * want);
      }
    }
}

TEST_P(HalfReductions, CountsInfAndNanButNotLargeFiniteValues) {
  for (bool fp16 : {false, true}) {
    const int64_t n = 131072 + 77;
    auto x = randomVec(size_t(n), 8, -2.f, 2.f);
    // The largest finite value of each format stays finite; inf, -inf and NaN are counted.
    x[3] = fp16 ? 65504.f : 3.0e38f;
    const float inf = std::numeric_limits<float>::infinity();
    x[10] = inf;
    x[size_t(n / 2)] = -inf;
    x[size_t(n - 1)] = std::numeric_limits<float>::quiet_NaN();
    if (fp16) x[20] = 1e6f;  // overflows fp16: inf
    const auto h = halves(x, fp16);
    DeviceBuffers d(be());
    EXPECT_EQ(be().countNonFiniteHalf(d.up(h), n, fp16), fp16 ? 4 : 3) << (fp16 ? "fp16" : "bf16");
    EXPECT_EQ(be().countNonFiniteHalf(d.up(h), 3, fp16), 0);  // a prefix without any
  }
}

TS_ON_BACKEND(HalfReductions);
