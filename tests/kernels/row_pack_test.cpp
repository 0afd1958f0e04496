// Saved-activation packing ops (OpList.h: Int8Rows, CenteredRows) on every instantiated backend
// (OnBackend.h) into poisoned outputs, against scalar references written here in double and
// the Numeric.h conversions; CUDA also against its CPU twin, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "OnBackend.h"
#include "TestUtil.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class RowPack : public OnBackend {};

// Rows crossing a 256-thread block, an all-zero row, a row with one outlier and tiny values
// (codes that round to zero), and a row of equal magnitudes.
std::vector<float> rowsInput(int64_t rows, int64_t cols) {
  auto x = randomVec(size_t(rows * cols), 11, -3.f, 3.f);
  std::fill(x.begin() + cols, x.begin() + 2 * cols, 0.f);
  for (int64_t j = 0; j < cols; ++j) x[size_t(2 * cols + j)] = j % 3 == 0 ? 1e-4f : -2e-5f;
  x[size_t(2 * cols + 5)] = 40.f;
  for (int64_t j = 0; j < cols; ++j) x[size_t(3 * cols + j)] = j % 2 ? 0.75f : -0.75f;
  return x;
}
}  // namespace

TEST_P(RowPack, Int8RowsQuantizeWithinHalfAStepAndKeepNonzeros) {
  const int64_t rows = 9, cols = 613;
  const auto x = rowsInput(rows, cols);
  auto run = [&](Backend& b, bool keep) {
    DeviceBuffers d(b);
    auto* q = d.up(std::vector<int8_t>(size_t(rows * cols), int8_t(-128)));  // no valid code
    float* s = d.poisoned(size_t(rows));
    float* back = d.poisoned(size_t(rows * cols));
    b.quantizeRowsInt8(q, s, d.up(x), rows, cols, keep);
    b.dequantizeRowsInt8(back, q, s, rows, cols);
    return std::tuple{d.downAs(q, size_t(rows * cols)), d.down(s, size_t(rows)),
                      d.down(back, size_t(rows * cols))};
  };
  for (bool keep : {false, true}) {
    const auto [q, s, back] = run(be(), keep);
    for (int64_t i = 0; i < rows; ++i) {
      double amax = 0;
      for (int64_t j = 0; j < cols; ++j)
        amax = std::max(amax, std::fabs(double(x[size_t(i * cols + j)])));
      ASSERT_NEAR(s[size_t(i)], amax / 127.0, 1e-7 * amax) << "row " << i;
      for (int64_t j = 0; j < cols; ++j) {
        const size_t k = size_t(i * cols + j);
        const double xv = x[k], code = q[k];
        ASSERT_GE(code, -127) << k;
        ASSERT_EQ(back[k], float(q[k]) * s[size_t(i)]) << k;  // one fp32 product
        if (keep && xv != 0) {
          ASSERT_NE(code, 0) << "a nonzero packed to 0 at " << k;
        }
        if (keep && code == (xv > 0 ? 1 : -1) && std::fabs(xv) < 0.5 * s[size_t(i)]) continue;
        ASSERT_LE(std::fabs(double(back[k]) - xv), 0.5 * s[size_t(i)] * (1 + 1e-6) + 1e-30)
            << "row " << i << " col " << j;
      }
    }
    EXPECT_EQ(s[1], 0.f);  // the all-zero row: scale 0, codes 0, zeros back
    EXPECT_EQ(back[size_t(cols)], 0.f);
    if (!keep) {
      EXPECT_EQ(q[size_t(2 * cols)], 0) << "tiny values round to code 0 without keep";
    }
    EXPECT_EQ(std::abs(int(q[size_t(3 * cols)])), 127);
    if (hasTwin()) {
      const auto [qc, sc, bc] = run(cpu(), keep);
      EXPECT_EQ(q, qc);
      EXPECT_EQ(s, sc);
      EXPECT_EQ(back, bc);
    }
  }
}

TEST_P(RowPack, CenteredRowsRoundTripThroughSixteenBits) {
  const int64_t rows = 7, cols = 301;
  auto x = rowsInput(rows, cols);
  for (auto& v : x) v += 100.f;  // a large common offset: centering keeps the small differences
  std::vector<float> mean(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0;
    for (int64_t j = 0; j < cols; ++j) m += x[size_t(i * cols + j)];
    mean[size_t(i)] = float(m / double(cols));
  }
  for (bool fp16 : {false, true}) {
    auto run = [&](Backend& b) {
      DeviceBuffers d(b);
      auto* y = d.up(std::vector<uint16_t>(size_t(rows * cols), 0xFFFF));
      float* back = d.poisoned(size_t(rows * cols));
      const float* dm = d.up(mean);
      b.packCenteredRows(y, d.up(x), dm, rows, cols, fp16);
      b.unpackCenteredRows(back, y, dm, rows, cols, fp16);
      return std::pair{d.downAs(y, size_t(rows * cols)), d.down(back, size_t(rows * cols))};
    };
    const auto [y, back] = run(be());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const size_t k = size_t(i * cols + j);
        const float c = x[k] - mean[size_t(i)];
        const uint16_t want = fp16 ? floatToFp16(c) : floatToBf16(c);
        ASSERT_EQ(y[k], want) << (fp16 ? "fp16 " : "bf16 ") << k;
        const float wide = fp16 ? fp16ToFloat(want) : bf16ToFloat(want);
        ASSERT_EQ(back[k], wide + mean[size_t(i)]) << k;
        // Centering: the error is relative to |x - mean|, not to |x| (~100).
        ASSERT_LE(std::fabs(double(back[k]) - x[k]), (fp16 ? 1e-3 : 8e-3) * std::fabs(c) + 2e-5)
            << k;
      }
    if (hasTwin()) {
      const auto [yc, bc] = run(cpu());
      EXPECT_EQ(y, yc);
      EXPECT_EQ(back, bc);
    }
  }
}

TS_ON_BACKEND(RowPack);
