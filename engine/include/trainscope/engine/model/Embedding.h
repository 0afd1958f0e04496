#pragma once
// Token embedding plus, when the description has one, a learned position table (GPT-2's wpe;
// llama has rotary positions in attention instead). Saves nothing: backward needs the tokens.
// Under bf16 GEMMs forward reads the stored bf16 tables (the same values as their fp32 copy).
#include "trainscope/engine/model/LayerContext.h"

namespace ts::engine {

class Embedding {
 public:
  Embedding(const ParamInfo* tokens, const ParamInfo* positions, int dim, bool bf16 = false)
      : wte_(tokens), wpe_(positions), dim_(dim), bf16_(bf16) {}
  bool bf16() const { return bf16_; }
  // out (B,T,C) from token ids (B,T) in backend memory.
  void forward(const LayerContext& c, float* out, const int32_t* tokens) const;
  // Accumulates (+=) the table gradients (the trainable ones).
  void backward(const LayerContext& c, const float* dout, const int32_t* tokens) const;

 private:
  const ParamInfo *wte_, *wpe_;
  int dim_;
  bool bf16_;
};

}  // namespace ts::engine
