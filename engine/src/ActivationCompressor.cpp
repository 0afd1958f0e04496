#include "trainscope/engine/ActivationCompressor.h"

#include <algorithm>
#include <cmath>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

void ActivationCompressor::quantizeRows(Tensor& q, Tensor& scale, const float* x, int64_t rows,
                                        int64_t cols, bool count) {
  ScopedRange r("int8_pack", SpanCategory::Elementwise);
  int8_t* qd = static_cast<int8_t*>(q.data());
  float* sd = scale.f32();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    float amax = 0.f;
    for (int64_t j = 0; j < cols; ++j) amax = std::max(amax, std::fabs(xr[j]));
    const float s = amax / 127.f;
    sd[i] = s;
    const float inv = s > 0.f ? 1.f / s : 0.f;
    for (int64_t j = 0; j < cols; ++j)
      qd[i * cols + j] =
          static_cast<int8_t>(std::clamp(std::nearbyint(xr[j] * inv), -127.f, 127.f));
  }
  if (count) {
    stats_.rawBytes += 4 * rows * cols;
    stats_.storedBytes += rows * cols + 4 * rows;
  }
}

void ActivationCompressor::dequantizeRows(float* x, const Tensor& q, const Tensor& scale,
                                          int64_t rows, int64_t cols) {
  ScopedRange r("int8_unpack", SpanCategory::Elementwise);
  const int8_t* qd = static_cast<const int8_t*>(q.data());
  const float* sd = scale.f32();
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = qd[i * cols + j] * sd[i];
}

void ActivationCompressor::packSparse(Tensor& maskT, Tensor& vals, const float* x, int64_t n,
                                      bool count) {
  ScopedRange r("sparse_pack", SpanCategory::Elementwise);
  uint8_t* mask = static_cast<uint8_t*>(maskT.data());
  int64_t nnz = 0;
  for (int64_t byte = 0; byte * 8 < n; ++byte) {
    uint8_t m = 0;
    for (int b = 0; b < 8 && byte * 8 + b < n; ++b)
      if (x[byte * 8 + b] != 0.f) {
        m |= static_cast<uint8_t>(1u << b);
        ++nnz;
      }
    mask[byte] = m;
  }
  // Exactly nnz values are kept, so the tracker shows what the storage really costs (the old
  // values go first so old and new never count together).
  vals.reset();
  vals = Tensor(backend_, tracker_, MemoryCategory::Activations, DType::F32, {nnz});
  float* v = vals.f32();
  for (int64_t i = 0; i < n; ++i)
    if (x[i] != 0.f) *v++ = x[i];
  if (count) {
    stats_.rawBytes += 4 * n;
    stats_.storedBytes += (n + 7) / 8 + 4 * nnz;
    stats_.reluValues += n;
    stats_.reluZeros += n - nnz;
  }
}

void ActivationCompressor::unpackSparse(float* x, const Tensor& maskT, const Tensor& vals,
                                        int64_t n) {
  ScopedRange r("sparse_unpack", SpanCategory::Elementwise);
  const uint8_t* mask = static_cast<const uint8_t*>(maskT.data());
  const float* v = vals.f32();
  for (int64_t i = 0; i < n; ++i) x[i] = (mask[i >> 3] >> (i & 7)) & 1u ? *v++ : 0.f;
}

}  // namespace ts::engine
