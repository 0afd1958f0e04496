#pragma once
// Causal self-attention: one packed q|k|v projection (GPT-2's c_attn, or llama's q/k/v_proj
// multiplied as one GEMM), heads and kv_heads (grouped-query attention), optional rotary
// positions on q and k (llama, Hugging Face rotate_half), naive or flash kernels, and the output
// projection.
#include "trainscope/engine/LayerContext.h"

namespace ts::engine {

// What attention keeps for backward (N = B*T rows).
struct AttentionSaved {
  Tensor in;              // (N,C) the normed input (the qkv projection's input)
  Tensor inQ, inScale;    // int8 compression: `in` as I8 rows + one fp32 scale per row
  Tensor qkv;             // (N, q+k+v) projections, q and k rotated when rotary
  Tensor att;             // naive: softmax probabilities (B,NH,T,T); flash: log-sum-exp (B,NH,T)
  Tensor out;             // (N,C) heads merged (the output projection's input)
  Tensor outQ, outScale;  // int8 compression of `out`
};

struct AttentionShape {
  int dModel = 0, heads = 0, kvHeads = 0, headDim = 0;
  int qkvDim = 0;          // row width of the packed projections
  double ropeTheta = 0.0;  // > 0: rotary positions
  bool flash = false;
};

class Attention {
 public:
  Attention(AttentionShape shape, Linear* qkv, Linear* out) : s_(shape), qkv_(qkv), o_(out) {}
  // Where the caller writes this layer's input: the saved `in`, or (int8) free scratch from
  // which forward quantizes it.
  float* inputSlot(const LayerContext& c, AttentionSaved& s) const;
  // out (N,C) = the output projection's result (before any residual add).
  void forward(const LayerContext& c, float* out, AttentionSaved& s, const float* in,
               bool recompute) const;
  // dinp (N,C) = gradient of the input (=); parameter gradients accumulate. Uses ws.dtmp as
  // scratch (dinp may be ws.dtmp), ws.dqkv, ws.datt and ws.dfc.
  void backward(const LayerContext& c, float* dinp, const float* dout,
                const AttentionSaved& s) const;

 private:
  void rope(const LayerContext& c, float* qkv, bool backward) const;
  AttentionShape s_;
  Linear *qkv_, *o_;
};

}  // namespace ts::engine
