#pragma once
// What every layer of a model shares for one micro-batch: the backend, the parameter arena,
// the backward scratch, the linears' GEMM scratch, saved-activation compression and the current
// shape. Layers hold views into the arena; the context holds the rest, so a layer is its
// parameters plus forward/backward over Backend ops.
#include <cstdint>

#include "trainscope/engine/ActivationCompressor.h"
#include "trainscope/engine/Linear.h"
#include "trainscope/engine/ParamArena.h"
#include "trainscope/engine/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

// Backward scratch (category workspace), reused by every block.
struct Workspace {
  Tensor ones;   // (B*T) ones: bias add and bias gradient as GEMMs (device agnostic)
  Tensor dres;   // (B,T,C) gradient of the residual stream
  Tensor dtmp;   // (B,T,C) also the forward's projection output before the residual add
  Tensor dqkv;   // (B,T,3C)
  Tensor datt;   // (B,NH,T,T), naive attention only
  Tensor dfc;    // (B,T,4C)
  Tensor dfc2;   // (B,T,4C)
  Tensor ddrop;  // (B,T,C) a residual branch's output gradient through dropout (dropout > 0)
};

// model.dropout: on each residual branch's output (after attn's and the MLP's output projection)
// and on the embeddings, as nanoGPT (not on attention probabilities: flash never forms them).
// Masks come from the counter-based Dropout op: a pure function of (seed, stream), so backward,
// recomputation under checkpointing and a resumed run see the same mask without storing it.
struct DropoutContext {
  float p = 0.f;
  uint64_t seed = 0;
  uint64_t key = 0;  // the micro-batch (the trainer sets it from the step, so resume agrees)
  bool training = true;
  bool active() const { return p > 0.f && training; }
  // One stream per (micro-batch, layer, site); layer -1 is the embeddings.
  uint64_t stream(int layer, int site) const {
    return key * 1048576ull + uint64_t(layer + 1) * 4ull + uint64_t(site);
  }
};

struct LayerContext {
  kernels::Backend* backend = nullptr;
  ParamArena* arena = nullptr;
  Workspace* ws = nullptr;
  const LinearScratch* scratch = nullptr;
  ActivationCompressor* compressor = nullptr;
  DropoutContext dropout;
  int B = 0, T = 0;  // the current micro-batch
  int64_t rows() const { return int64_t(B) * T; }
  float* value(const ParamInfo* p) const { return p ? arena->value(*p) : nullptr; }
  float* grad(const ParamInfo* p) const { return p ? arena->grad(*p) : nullptr; }
};

}  // namespace ts::engine
