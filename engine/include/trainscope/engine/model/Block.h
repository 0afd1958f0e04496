#pragma once
// One pre-norm transformer block: x + attn(norm_1(x)), then + mlp(norm_2(.)), with dropout on
// each branch's output when model.dropout > 0.
#include <memory>
#include <vector>

#include "trainscope/engine/model/Attention.h"
#include "trainscope/engine/model/Mlp.h"
#include "trainscope/engine/model/Norm.h"

namespace ts::engine {

// Everything one block keeps from forward for backward. The names the model description uses
// for these buffers (core/ModelSpec.h savedState: "input", "ln1", "qkv", ...) map onto the
// fields in Gpt.cpp.
struct BlockActivations {
  // (B,T,C) residual stream entering the block (norm_1's input); empty in the first set under
  // checkpointing when it is exact (the segment's checkpoint is the input then)
  SavedTensor input;
  NormSaved norm1;
  AttentionSaved attn;
  SavedTensor resid2;  // (B,T,C) input + attention branch (norm_2's input)
  NormSaved norm2;
  MlpSaved mlp;
  std::vector<Tensor> lora;  // each LoRA adapter's u = x A^T (N, r), in the block's adapter order
  // Norms on the branches' outputs (Gemma, OLMo 2): each branch's output before its norm.
  Tensor attnBranch, mlpBranch;
  NormSaved postAttn, postMlp;
};

// The norms on the branches' outputs, before the residual adds (none: null).
struct PostNorms {
  std::unique_ptr<RMSNorm> attn, mlp;
};

class Block {
 public:
  Block(int layer, int dModel, std::unique_ptr<Norm> norm1, Attention attn,
        std::unique_ptr<Norm> norm2, Mlp mlp, PostNorms post = {})
      : layer_(layer),
        C_(dModel),
        norm1_(std::move(norm1)),
        attn_(attn),
        norm2_(std::move(norm2)),
        mlp_(mlp),
        post_(std::move(post)) {}
  // out (B,T,C) from in; out == nullptr stops before the MLP's output projection and the final
  // residual add (a recomputation: the next checkpoint already holds the output). out may be
  // in (the fp32 residual stream, when the saved input is stored packed). Uses ws.dtmp, and
  // ws.dqkv, datt, dfc, dfc2 as the fp32 slots of stored tensors.
  void forward(const LayerContext& c, BlockActivations& a, const float* in, float* out,
               bool recompute) const;
  // Takes the gradient of the block's output in ws.dres and leaves the gradient of its input
  // there; parameter gradients accumulate. `in` is read only when the set has no saved input.
  void backward(const LayerContext& c, BlockActivations& a, const float* in) const;

 private:
  void dropout(const LayerContext& c, float* out, const float* in, int site) const;
  int layer_, C_;
  std::unique_ptr<Norm> norm1_;
  Attention attn_;
  std::unique_ptr<Norm> norm2_;
  Mlp mlp_;
  PostNorms post_;
};

}  // namespace ts::engine
