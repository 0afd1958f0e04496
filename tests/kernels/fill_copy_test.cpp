// fill / fillF32 / copyOnDevice, amax and countNonFinite against plain host references, on every
// instantiated backend (OnBackend.h); sizes include 0, odd tails and threaded lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class FillCopy : public OnBackend {};
class Reduce : public OnBackend {};

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
}  // namespace

TEST_P(FillCopy, FillSetsExactlyTheBytesAsked) {
  for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(100003)}) {
    DeviceBuffers d(be());
    float* p = d.poisoned(n);
    const size_t bytes = n * sizeof(float);
    be().fill(p, 0, int64_t(bytes));
    for (float v : d.down(p, n)) ASSERT_EQ(bitsOf(v), 0u) << n;
    // A partial fill leaves the bytes after it alone.
    be().fill(p, 0xAB, int64_t(bytes - 1));
    const auto raw = d.downAs(reinterpret_cast<const uint8_t*>(p), bytes);
    for (size_t i = 0; i + 1 < bytes; ++i) ASSERT_EQ(raw[i], 0xAB) << n << " at " << i;
    EXPECT_EQ(raw[bytes - 1], 0) << n;
    be().fill(p, 0, 0);  // no-op
    be().fillF32(p, -1.5f, int64_t(n));
    for (float v : d.down(p, n)) ASSERT_EQ(v, -1.5f) << n;
    be().fillF32(p, 2.f, 0);
    EXPECT_EQ(d.down(p, 1)[0], -1.5f);
  }
}

TEST_P(FillCopy, CopyOnDeviceCopiesBytes) {
  for (size_t n : {size_t(1), size_t(33), size_t(100003)}) {
    DeviceBuffers d(be());
    const auto x = randomVec(n, 5);
    const float* src = d.up(x);
    float* dst = d.poisoned(n + 1);
    be().copyOnDevice(dst, src, int64_t(n * sizeof(float)));
    const auto got = d.down(dst, n + 1);
    EXPECT_EQ(std::vector<float>(got.begin(), got.begin() + n), x) << n;
    EXPECT_TRUE(DeviceBuffers::isPoison(got[n])) << "wrote past the end, n " << n;
    be().copyOnDevice(dst, src, 0);  // no-op
  }
}

TEST_P(Reduce, AmaxIsTheLargestMagnitudeAndPropagatesInfAndNan) {
  for (size_t n : {size_t(1), size_t(9), size_t(5000), size_t(200001)}) {
    auto x = randomVec(n, 11, -3.f, 3.f);
    x[n / 2] = n > 1 ? -7.25f : x[n / 2];  // the extreme, negative, in the middle
    float want = 0;
    for (float v : x) want = std::max(want, std::fabs(v));
    auto run = [&](const std::vector<float>& v) {
      DeviceBuffers d(be());
      return be().amax(d.up(v), int64_t(v.size()));
    };
    EXPECT_EQ(run(x), want) << n;
    auto inf = x;
    inf[n - 1] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(run(inf), std::numeric_limits<float>::infinity()) << n;
    auto nan = inf;
    nan[0] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(run(nan))) << n;
    if (hasTwin()) {
      DeviceBuffers c(cpu());
      EXPECT_EQ(cpu().amax(c.up(x), int64_t(n)), run(x));
    }
  }
  EXPECT_EQ(be().amax(nullptr, 0), 0.f);
}

TEST_P(Reduce, CountNonFiniteCountsInfAndNanOnly) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN()};
  for (size_t n : {size_t(1), size_t(17), size_t(100000), size_t(300007)}) {
    auto x = randomVec(n, 13);
    // The largest finite values and subnormals are finite.
    x[0] = std::numeric_limits<float>::max();
    if (n > 1) x[1] = -std::numeric_limits<float>::denorm_min();
    DeviceBuffers d(be());
    EXPECT_EQ(be().countNonFinite(d.up(x), int64_t(n)), 0) << n;
    int64_t want = 0;
    for (size_t i = n / 3; i < n; i += 1 + n / 7, ++want) x[i] = specials[want % 4];
    EXPECT_EQ(be().countNonFinite(d.up(x), int64_t(n)), want) << n;
  }
  EXPECT_EQ(be().countNonFinite(nullptr, 0), 0);
}

TS_ON_BACKEND(FillCopy);
TS_ON_BACKEND(Reduce);
