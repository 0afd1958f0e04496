#pragma once
// fp8 quantization of GEMM operands (precision.policy "fp8").
//
// Two scaling recipes (shared/reference.md, Precision):
//  - delayed (Transformer Engine): one scale per tensor, scale = fp8Max / max(amax history)
//    / 2^margin, the history holding the amaxes of the tensor's previous quantizations;
//  - blockwise (DeepSeek-V3): one scale per tile from the tile's current amax: 1x128 tiles of
//    activations and gradients along the GEMM's reduction dimension, 128x128 weight blocks.
// A quantized value is q = fp8(x * scale) (RNE, saturating) and the GEMM sees
// fp8ToFloat(q) * (1 / scale): what an fp8 tensor-core GEMM computes with when given the bytes q
// and the dequantization scale 1/scale. On CPU the GEMM is emulated: those dequantized values
// are written as fp32 and multiplied by sgemm (fp32 accumulation).
#include <cstdint>
#include <vector>

#include "trainscope/kernels/Numeric.h"

namespace ts::kernels {

// fp8Max / amax / 2^margin; an amax that is 0 or not finite gives `fallback` (TE keeps the
// previous scale then; 1 at the start).
float fp8ScaleFor(float amax, Fp8Format f, int margin, float fallback = 1.0f);

// Delayed scaling state of one quantized tensor.
class Fp8DelayedScale {
 public:
  Fp8DelayedScale() = default;
  Fp8DelayedScale(int historyLength, int margin, Fp8Format format);
  // Scale for the next quantization, from the amaxes recorded before it.
  float scale() const { return scale_; }
  Fp8Format format() const { return format_; }
  // Records the amax of the tensor just quantized (the oldest entry drops out past the history
  // length) and recomputes scale() from the max over the history.
  void record(float amax);
  // Replaces the amax record() took last and recomputes scale() as that record() would have
  // (data parallel: the max over the ranks of what each recorded). No-op on an empty history.
  void replaceLast(float amax);
  float last() const { return history_.empty() ? 0.f : history_[lastIndex()]; }
  int historySize() const { return static_cast<int>(history_.size()); }
  int historyLength() const { return length_; }

  // Checkpoint state: the recorded amaxes in storage order, the ring position of the next
  // overwrite and the current scale. restore() takes exactly what these returned and throws
  // std::invalid_argument (saying what is wrong) when it cannot come from this history length.
  const std::vector<float>& history() const { return history_; }
  size_t position() const { return pos_; }
  void restore(std::vector<float> history, size_t position, float scale);

 private:
  int length_ = 1, margin_ = 0;
  size_t pos_ = 0;
  Fp8Format format_ = Fp8Format::E4M3;
  size_t lastIndex() const { return (pos_ + history_.size() - 1) % history_.size(); }
  void rescale(float previous);
  float scale_ = 1.0f, previous_ = 1.0f;  // previous_: scale() before the last record()
  std::vector<float> history_;
};

}  // namespace ts::kernels

namespace ts::kernels::cpu {

// Tiles of tileRows x tileCols over a row-major rows x cols matrix (edge tiles are partial).
int64_t fp8TileCount(int64_t rows, int64_t cols, int64_t tileRows, int64_t tileCols);

// Current (per-tile) scaling: scaleInv[t] = 1 / fp8ScaleFor(amax of tile t) for tiles in
// row-major tile order, q = fp8(x * scale_t). q may be null (values not kept).
// With `deq` non-null, also writes deq = fp8ToFloat(q) * scaleInv (the GEMM's view).
void quantizeFp8Tiles(const float* x, uint8_t* q, float* deq, float* scaleInv, int64_t rows,
                      int64_t cols, int64_t tileRows, int64_t tileCols, Fp8Format f, int margin);
// deq = fp8ToFloat(q) * scaleInv[tile].
void dequantizeFp8Tiles(const uint8_t* q, const float* scaleInv, float* deq, int64_t rows,
                        int64_t cols, int64_t tileRows, int64_t tileCols, Fp8Format f);
// Per-tensor with a given scale: deq = fp8ToFloat(fp8(x * scale)) * (1 / scale), without
// keeping the bytes (the CPU emulation's fused path; bit-identical to fp8ToFloat(floatToFp8)).
void fakeQuantizeFp8(const float* x, float* deq, int64_t n, Fp8Format f, float scale);

}  // namespace ts::kernels::cpu
