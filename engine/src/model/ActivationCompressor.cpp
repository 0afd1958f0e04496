#include "trainscope/engine/model/ActivationCompressor.h"

#include <stdexcept>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

void ActivationCompressor::store(SavedTensor& t, const float* x, int64_t rows, int64_t cols,
                                 bool count, bool keepNonzero) {
  if (t.empty()) return;  // not kept (int8 ReLU's pre-activation)
  const int64_t n = rows * cols;
  switch (t.data.dtype()) {
    case DType::F32:  // computed in place, or copied from where it was computed
      if (x != t.f32()) backend_->copyOnDevice(t.f32(), x, n * int64_t(sizeof(float)));
      return;
    case DType::BF16: {
      ScopedRange r("bf16_pack", SpanCategory::Elementwise);
      backend_->floatToBf16(x, static_cast<uint16_t*>(t.data.data()), n);
      return;
    }
    case DType::F16: {
      ScopedRange r("fp16_pack", SpanCategory::Elementwise);
      backend_->floatToFp16(x, static_cast<uint16_t*>(t.data.data()), n);
      return;
    }
    case DType::I8:
      return quantizeRows(t.data, t.scale, x, rows, cols, count, keepNonzero);
    default:
      throw std::logic_error("saved activation: no packing for its dtype");
  }
}

const float* ActivationCompressor::load(const SavedTensor& t, float* scratch, int64_t rows,
                                        int64_t cols) {
  if (t.empty()) throw std::logic_error("saved activation: not kept by this configuration");
  const int64_t n = rows * cols;
  switch (t.data.dtype()) {
    case DType::F32:
      return t.f32();
    case DType::BF16: {
      ScopedRange r("bf16_unpack", SpanCategory::Elementwise);
      backend_->bf16ToFloat(static_cast<const uint16_t*>(t.data.data()), scratch, n);
      return scratch;
    }
    case DType::F16: {
      ScopedRange r("fp16_unpack", SpanCategory::Elementwise);
      backend_->fp16ToFloat(static_cast<const uint16_t*>(t.data.data()), scratch, n);
      return scratch;
    }
    case DType::I8:
      dequantizeRows(scratch, t.data, t.scale, rows, cols);
      return scratch;
    default:
      throw std::logic_error("saved activation: no unpacking for its dtype");
  }
}

namespace {
bool sixteenBit(const SavedTensor& t) {
  return !t.empty() && (t.data.dtype() == DType::BF16 || t.data.dtype() == DType::F16);
}
}  // namespace

void ActivationCompressor::storeNormInput(SavedTensor& t, const float* x, const float* mean,
                                          int64_t rows, int64_t cols) {
  if (!mean || !sixteenBit(t)) return store(t, x, rows, cols, false);
  const bool fp16 = t.data.dtype() == DType::F16;
  ScopedRange r(fp16 ? "fp16_pack" : "bf16_pack", SpanCategory::Elementwise);
  backend_->packCenteredRows(static_cast<uint16_t*>(t.data.data()), x, mean, rows, cols, fp16);
}

const float* ActivationCompressor::loadNormInput(const SavedTensor& t, float* scratch,
                                                 const float* mean, int64_t rows, int64_t cols) {
  if (!mean || !sixteenBit(t)) return load(t, scratch, rows, cols);
  const bool fp16 = t.data.dtype() == DType::F16;
  ScopedRange r(fp16 ? "fp16_unpack" : "bf16_unpack", SpanCategory::Elementwise);
  backend_->unpackCenteredRows(scratch, static_cast<const uint16_t*>(t.data.data()), mean, rows,
                               cols, fp16);
  return scratch;
}

void ActivationCompressor::quantizeRows(Tensor& q, Tensor& scale, const float* x, int64_t rows,
                                        int64_t cols, bool count, bool keepNonzero) {
  ScopedRange r("int8_pack", SpanCategory::Elementwise);
  backend_->quantizeRowsInt8(static_cast<int8_t*>(q.data()), scale.f32(), x, rows, cols,
                             keepNonzero);
  if (count) {
    stats_.rawBytes += 4 * rows * cols;
    stats_.storedBytes += rows * cols + 4 * rows;
  }
}

void ActivationCompressor::dequantizeRows(float* x, const Tensor& q, const Tensor& scale,
                                          int64_t rows, int64_t cols) {
  ScopedRange r("int8_unpack", SpanCategory::Elementwise);
  backend_->dequantizeRowsInt8(x, static_cast<const int8_t*>(q.data()), scale.f32(), rows, cols);
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
