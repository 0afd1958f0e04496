#pragma once
// Token embedding plus, when the description has one, a learned position table (GPT-2's wpe;
// llama has rotary positions in attention instead). Saves nothing: backward needs the tokens.
#include "trainscope/engine/LayerContext.h"

namespace ts::engine {

class Embedding {
 public:
  Embedding(const ParamInfo* tokens, const ParamInfo* positions, int dim)
      : wte_(tokens), wpe_(positions), dim_(dim) {}
  // out (B,T,C) from token ids (B,T) in backend memory.
  void forward(const LayerContext& c, float* out, const int32_t* tokens) const;
  // Accumulates (+=) the table gradients (the trainable ones).
  void backward(const LayerContext& c, const float* dout, const int32_t* tokens) const;

 private:
  const ParamInfo *wte_, *wpe_;
  int dim_;
};

}  // namespace ts::engine
