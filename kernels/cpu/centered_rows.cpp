// LayerNorm inputs stored in 16 bits, centered on their row mean: the bits sit where the norm's
// backward needs them ((x - mean) * rstd).
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cpu {

namespace {
template <class D, class S, class F>
void mapRows(D* dst, const S* src, const float* mean, int64_t rows, int64_t cols, F f) {
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols))
  for (int64_t i = 0; i < rows; ++i) {
    const float m = mean[i];
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = f(src[i * cols + j], m);
  }
}
}  // namespace

void packCenteredRows(uint16_t* y, const float* x, const float* mean, int64_t rows, int64_t cols,
                      bool fp16) {
  if (fp16)
    mapRows(y, x, mean, rows, cols, [](float v, float m) { return kernels::floatToFp16(v - m); });
  else
    mapRows(y, x, mean, rows, cols, [](float v, float m) { return kernels::floatToBf16(v - m); });
}

void unpackCenteredRows(float* x, const uint16_t* y, const float* mean, int64_t rows, int64_t cols,
                        bool fp16) {
  if (fp16)
    mapRows(x, y, mean, rows, cols,
            [](uint16_t v, float m) { return kernels::fp16ToFloat(v) + m; });
  else
    mapRows(x, y, mean, rows, cols,
            [](uint16_t v, float m) { return kernels::bf16ToFloat(v) + m; });
}

}  // namespace ts::kernels::cpu
