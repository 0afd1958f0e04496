#pragma once
// Causal self-attention: one packed q|k|v projection (GPT-2's c_attn, or llama's q/k/v_proj
// multiplied as one GEMM), heads and kv_heads (grouped-query attention), optional rotary
// positions on q and k (llama, Hugging Face rotate_half), naive or flash kernels, and the output
// projection.
#include "trainscope/engine/model/LayerContext.h"

namespace ts::engine {

// What attention keeps for backward (N = B*T rows), each stored as the description says
// (SavedTensor.h); flash's log-sum-exp is always exact.
struct AttentionSaved {
  SavedTensor in;   // (N,C) the normed input (the qkv projection's input); empty: recomputed
  SavedTensor qkv;  // (N, q+k+v) projections, q and k rotated when rotary
  SavedTensor att;  // naive: softmax probabilities (B,NH,T,T); flash: log-sum-exp (B,NH,T)
  SavedTensor out;  // (N, heads x head_dim) heads merged (the output projection's input)
  Tensor qkPre;     // (N, q+k+v) the projections before the q/k norms (exact); q/k norms only
  Tensor qkRstd;    // the q norms' then the k norms' statistics
};

struct AttentionShape {
  int dModel = 0, heads = 0, kvHeads = 0, headDim = 0;
  int qkvDim = 0;          // row width of the packed projections
  int rotaryDim = 0;       // > 0: rotary positions on the first rotaryDim dims of each head
  bool localRope = false;  // the sliding layers' own rotary table (LayerContext::ropeLocal)
  bool flash = false;
  bool flashBf16 = false;             // flash on bf16 tensor cores (OpList.h: FlashAttentionBf16)
  kernels::AttentionOptions options;  // scale, sliding window, soft-capping
  // RMSNorms of q and k before the rotation: per head (groups of headDim) or over the whole
  // projection; null weights: none.
  const ParamInfo *qNorm = nullptr, *kNorm = nullptr;
  bool qkNormPerHead = true;
  float normEps = 1e-5f, normOffset = 0.f;
  int qDim() const { return heads * headDim; }
};

class Attention {
 public:
  Attention(AttentionShape shape, Linear* qkv, Linear* out) : s_(shape), qkv_(qkv), o_(out) {}
  // Where the caller writes this layer's input: the saved `in` when exact, else free scratch
  // (ws.dfc2) from which forward packs it.
  float* inputSlot(const LayerContext& c, AttentionSaved& s) const;
  // out (N,C) = the output projection's result (before any residual add).
  void forward(const LayerContext& c, float* out, AttentionSaved& s, const float* in,
               bool recompute) const;
  // dinp (N,C) = gradient of the input (=); parameter gradients accumulate. Uses ws.dtmp as
  // scratch (dinp may be ws.dtmp), ws.dqkv, ws.datt, ws.dfc, and ws.dfc2 / ws.attUnpack to
  // expand stored tensors. `recomputeIn` writes the input when `s.in` is not kept (into ws.dfc,
  // after the attention kernels are done with it).
  void backward(const LayerContext& c, float* dinp, const float* dout, AttentionSaved& s,
                const InputRecompute& recomputeIn) const;

 private:
  void rope(const LayerContext& c, float* qkv, bool backward) const;
  void qkNormForward(const LayerContext& c, float* qkv, AttentionSaved& s) const;
  void qkNormBackward(const LayerContext& c, float* dqkv, const AttentionSaved& s) const;
  bool plainOptions() const {
    return s_.options.scale == 0.f && s_.options.window == 0 && s_.options.softcap == 0.f;
  }
  AttentionShape s_;
  Linear *qkv_, *o_;
};

}  // namespace ts::engine
