#pragma once
// Saved-activation compression (memory.activation_compression): int8 rows with one fp32 absmax
// scale each, or a sparse bitmap plus the nonzero values (post-ReLU). int8 and 16-bit packing
// run as backend ops (any backend); sparse packing runs on host pointers, so it needs a
// host-accessible backend (the model refuses otherwise).
#include <cstdint>

#include "trainscope/engine/model/SavedTensor.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

// What compression did in the last forward (blocks computed in forward, not recomputation).
// 16-bit storage under a mixed-precision policy is not compression and is not counted.
struct CompressionStats {
  int64_t rawBytes = 0;     // fp32 bytes of the tensors that were compressed (int8 / sparse)
  int64_t storedBytes = 0;  // bytes they took compressed (values + scales / bitmap)
  int64_t reluValues = 0;   // ReLU outputs seen (sparse only)
  int64_t reluZeros = 0;    // of which exactly zero
};

class ActivationCompressor {
 public:
  enum class Mode { None, Int8, Sparse };
  ActivationCompressor() = default;
  ActivationCompressor(kernels::Backend* backend, MemoryTracker* tracker, Mode mode)
      : backend_(backend), tracker_(tracker), mode_(mode) {}

  Mode mode() const { return mode_; }
  bool int8() const { return mode_ == Mode::Int8; }
  bool sparse() const { return mode_ == Mode::Sparse; }

  // Saved tensors in any storage (SavedTensor.h): where forward computes t in fp32 (its own
  // storage when exact, else `scratch`, which must be free until store()); packing it from
  // there (a copy when exact and computed elsewhere; int8 and sparse count in stats() when
  // `count`); and its fp32 values for backward (its storage when exact, else expanded into
  // `scratch`).
  float* slot(SavedTensor& t, float* scratch) const {
    return t.exact() && !t.empty() ? t.f32() : scratch;
  }
  // keepNonzero (int8): values that would round to 0 become +-1 code, so x != 0 survives
  // packing exactly (a ReLU output's mask).
  void store(SavedTensor& t, const float* x, int64_t rows, int64_t cols, bool count,
             bool keepNonzero = false);
  const float* load(const SavedTensor& t, float* scratch, int64_t rows, int64_t cols);
  // A bf16 tensor's storage, else null: what a bf16 GEMM can read directly.
  static const uint16_t* bf16Data(const SavedTensor& t) {
    return t.data.dtype() == DType::BF16 && !t.empty() ? static_cast<const uint16_t*>(t.data.data())
                                                       : nullptr;
  }
  // When `gemmReadsBf16` and t is stored bf16: packs x now (before the GEMM that reads it) and
  // returns the packed values for that GEMM; else null (the caller stores after its GEMM).
  const uint16_t* packForBf16Gemm(SavedTensor& t, const float* x, int64_t rows, int64_t cols,
                                  bool gemmReadsBf16) {
    if (!gemmReadsBf16 || !bf16Data(t)) return nullptr;
    store(t, x, rows, cols, false);
    return bf16Data(t);
  }
  // A LayerNorm input in 16 bits: stored centered (x - mean of its row), which keeps the bits
  // where the norm's backward needs them ((x - mean) * rstd), and expanded with the mean added
  // back in fp32. Exact tensors and null `mean` (RMSNorm) as store / load.
  void storeNormInput(SavedTensor& t, const float* x, const float* mean, int64_t rows,
                      int64_t cols);
  const float* loadNormInput(const SavedTensor& t, float* scratch, const float* mean, int64_t rows,
                             int64_t cols);

  // int8: q (I8, rows x cols) and scale (rows) from x; `count` adds to stats().
  void quantizeRows(Tensor& q, Tensor& scale, const float* x, int64_t rows, int64_t cols,
                    bool count, bool keepNonzero = false);
  void dequantizeRows(float* x, const Tensor& q, const Tensor& scale, int64_t rows, int64_t cols);
  // sparse: mask (1 bit per value) and vals, re-allocated with exactly the nonzero count. Host
  // memory: the CPU backend only.
  void packSparse(Tensor& mask, Tensor& vals, const float* x, int64_t n, bool count);
  void unpackSparse(float* x, const Tensor& mask, const Tensor& vals, int64_t n);

  const CompressionStats& stats() const { return stats_; }
  void resetStats() { stats_ = CompressionStats{}; }

 private:
  kernels::Backend* backend_ = nullptr;
  MemoryTracker* tracker_ = nullptr;
  Mode mode_ = Mode::None;
  CompressionStats stats_;
};

}  // namespace ts::engine
