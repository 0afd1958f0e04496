// int8 rows with one fp32 scale each (saved-activation compression).
#include <algorithm>
#include <cmath>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void quantizeRowsInt8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols,
                      bool keepNonzero) {
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols))
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    float amax = 0.f;
    for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(xr[j]));
    const float s = amax / 127.f;
    scale[i] = s;
    const float inv = s > 0.f ? 1.f / s : 0.f;
    for (int64_t j = 0; j < cols; ++j) {
      float v = std::clamp(std::nearbyint(xr[j] * inv), -127.f, 127.f);
      if (keepNonzero && v == 0.f && xr[j] != 0.f) v = xr[j] > 0.f ? 1.f : -1.f;
      q[i * cols + j] = static_cast<int8_t>(v);
    }
  }
}

void dequantizeRowsInt8(float* x, const int8_t* q, const float* scale, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (worthThreading(rows * cols))
  for (int64_t i = 0; i < rows; ++i) {
    const float s = scale[i];
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = q[i * cols + j] * s;
  }
}

}  // namespace ts::kernels::cpu
