#pragma once
// The feed-forward branch: an up projection (GPT-2's c_fc; llama's gate_proj|up_proj multiplied
// as one GEMM), the activation (GELU tanh, ReLU, or SwiGLU over the packed [gate | up]) and the
// down projection (mlp.c_proj / down_proj).
#include "trainscope/engine/model/LayerContext.h"

namespace ts::engine {

// What the MLP keeps for backward (N = B*T rows, F = d_ff), stored as the description says.
struct MlpSaved {
  SavedTensor in;   // (N,C) the normed input (the up projection's input); empty: recomputed
  SavedTensor pre;  // (N,F) or (N,2F) for SwiGLU: the up projection's output
  // (N,F) after the activation (the down projection's input); empty: sparse, or 16-bit storage
  // (backward recomputes it from `pre`)
  SavedTensor act;
  // sparse compression of `act` (post-ReLU): a bitmap, 1 bit per value, and the nonzeros in
  // order; `vals` is re-allocated by every forward with the exact count.
  Tensor mask, vals;
};

class Mlp {
 public:
  enum class Activation { Gelu, Relu, SwiGlu, GeGlu };  // the last two over [gate | up]
  Mlp(int dModel, int dFf, Activation act, Linear* up, Linear* down)
      : C_(dModel), F_(dFf), act_(act), up_(up), down_(down) {}
  float* inputSlot(const LayerContext& c, MlpSaved& s) const;
  // out (N,C) = the down projection's result; out == nullptr stops after the activation (a
  // recomputation that only rebuilds the saved state).
  void forward(const LayerContext& c, float* out, MlpSaved& s, const float* in,
               bool recompute) const;
  // dinp (N,C) = gradient of the input (=). Uses ws.dfc and ws.dfc2 as scratch (also to
  // expand stored tensors). `recomputeIn` writes the input when `s.in` is not kept (into ws.dfc,
  // once the activation's backward is done with it).
  void backward(const LayerContext& c, float* dinp, const float* dout, MlpSaved& s,
                const InputRecompute& recomputeIn) const;

 private:
  bool gated() const { return act_ == Activation::SwiGlu || act_ == Activation::GeGlu; }
  // act = the activation of pre (its rows of F, or of [gate | up] for SwiGLU).
  void activate(const LayerContext& c, float* act, const float* pre) const;
  int C_, F_;
  Activation act_;
  Linear *up_, *down_;
};

}  // namespace ts::engine
