#pragma once
// Where a model's dropout masks come from. model.dropout applies on each residual branch's
// output (after attention's and the MLP's output projection) and on the embeddings, as nanoGPT
// (not on attention probabilities: flash never forms them); LoRA's dropout on each adapter's
// input. Masks come from the counter-based Dropout op: a pure function of (seed, stream), so
// backward, recomputation under checkpointing and a resumed run see the same mask without
// storing it.
#include <cstdint>

namespace ts::engine {

struct DropoutContext {
  float p = 0.f;  // model.dropout
  uint64_t seed = 0;
  uint64_t key = 0;  // the micro-batch (the trainer sets it from the step, so resume agrees)
  bool training = true;
  bool active() const { return p > 0.f && training; }
  // One stream per (micro-batch, layer, site); layer -1 is the embeddings. Sites: 0 attention
  // branch, 1 MLP branch, 2 + i the block's i-th LoRA adapter.
  uint64_t stream(int layer, int site) const {
    return key * 1048576ull + uint64_t(layer + 1) * 64ull + uint64_t(site);
  }
};

}  // namespace ts::engine
