#pragma once
// What every layer of a model shares for one micro-batch: the backend, the parameter arena,
// the backward scratch, the linears' GEMM scratch, saved-activation compression and the current
// shape. Layers hold views into the arena; the context holds the rest, so a layer is its
// parameters plus forward/backward over Backend ops.
#include <cstdint>
#include <functional>

#include "trainscope/engine/model/ActivationCompressor.h"
#include "trainscope/engine/model/Dropout.h"
#include "trainscope/engine/model/Linear.h"
#include "trainscope/engine/params/ParamArena.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

// Backward scratch (category workspace), reused by every block. dfc and dfc2 are at least
// (B,T,max(C, qkv)) wide when saved activations are stored packed: forward computes those
// tensors there, backward expands them there.
struct Workspace {
  Tensor ones;    // (B*T) ones: bias add and bias gradient as GEMMs (device agnostic)
  Tensor dres;    // (B,T,C) gradient of the residual stream
  Tensor dtmp;    // (B,T,C) also the forward's projection output before the residual add
  Tensor dqkv;    // (B,T,3C)
  Tensor datt;    // (B,NH,T,T), naive attention only
  Tensor dfc;     // (B,T,4C)
  Tensor dfc2;    // (B,T,4C)
  Tensor ddrop;   // (B,T,C) a residual branch's output gradient through dropout (dropout > 0)
  Tensor dpost;   // (B,T,C) a branch's output gradient before its norm (norms after branches)
  Tensor loraDU;  // (N, r) an adapter's gradient of u = x A^T (LoRA)
  Tensor loraX;   // (N, in) an adapter's dropped input (LoRA dropout > 0)
  // Stored (16-bit or int8) saved activations only:
  Tensor stream;     // (B,T,C) the fp32 residual stream forward runs the blocks on, in place
  Tensor attUnpack;  // (B,NH,T,T) naive attention's probabilities expanded for backward
  // (threads, floats) the CPU kernels' working space (kernels' CpuScratch.h), bound to the
  // backend by each forward and backward
  Tensor kernelScratch;
};

// Writes a layer's fp32 input into `out` when backward needs it and it was not saved: under
// 16-bit storage the norms' outputs are not kept, since the block recomputes them exactly from
// the fp32 residual stream and the norm's statistics it keeps anyway (a rounded copy would cost
// 2 bytes per value and be less exact).
using InputRecompute = std::function<void(float* out)>;

// A linear's fp32 input for its backward: recomputed into `scratch` when `saved` is not kept,
// else the saved values (expanded into `scratch` when stored packed); null when the linear
// reads the bf16 saved copy itself (`reads16`).
inline const float* linearInputForBackward(ActivationCompressor& comp, const SavedTensor& saved,
                                           bool reads16, float* scratch, int64_t rows, int64_t cols,
                                           const InputRecompute& recompute) {
  if (saved.empty()) {
    recompute(scratch);
    return scratch;
  }
  return reads16 ? nullptr : comp.load(saved, scratch, rows, cols);
}

struct LayerContext {
  kernels::Backend* backend = nullptr;
  ParamArena* arena = nullptr;
  Workspace* ws = nullptr;
  const LinearScratch* scratch = nullptr;
  ActivationCompressor* compressor = nullptr;
  DropoutContext dropout;
  int B = 0, T = 0;  // the current micro-batch
  // The rotary tables (T, rotary dims) on the device: every layer's, the sliding layers' own.
  const float* rope = nullptr;
  const float* ropeLocal = nullptr;
  int64_t rows() const { return int64_t(B) * T; }
  float* value(const ParamInfo* p) const { return p ? arena->value(*p) : nullptr; }
  float* grad(const ParamInfo* p) const { return p ? arena->grad(*p) : nullptr; }
};

}  // namespace ts::engine
