#pragma once
// How a parameter arena (ParamArena.h) lays out and keeps its buffers: working dtype,
// alignments, ZeRO partitioning, NF4 storage and the fp32 windows over 16-bit storage.
#include <cstdint>

#include "trainscope/kernels/Backend.h"

namespace ts::engine {

using kernels::DType;

struct ArenaOptions {
  // Working dtype: F32, or BF16/F16 (then the stored weights and gradients are 16-bit and the
  // fp32 buffers are compute copies, category workspace).
  DType working = DType::F32;
  int64_t align = 1;  // each group starts at a multiple of this many elements
  // Each trainable tensor starts at a multiple of this many elements (core::ZeroLayout's
  // tensorAlign: 8-bit AdamW's blocks under ZeRO).
  int64_t tensorAlign = 1;
  // ZeRO partitioned from construction (ZeRO-3: the weights; stages >= 2: the gradients): rank
  // partitionRank of partitionRanks counts only its shard (core::zeroShard of the padded
  // buffer); the rest holds no page until DataParallel gathers a group, so a model larger than
  // one device initializes. The buffers start zero without being touched.
  int partitionRanks = 1, partitionRank = 0;
  bool partitionValues = false, partitionGrads = false;
  // The value and gradient buffers' lengths are padded (in the last group) to a multiple of
  // this: ZeRO splits them into equal, aligned rank shards.
  int64_t padTo = 1;
  // An fp32 master copy of the trainable weights is kept by the optimizer (16-bit policies
  // except pure_bf16, whose optimizer updates the 16-bit weights and keeps bf16 state).
  bool masterWeights = true;
  bool pureBf16() const { return working != DType::F32 && !masterWeights; }
  // finetune.base_quant nf4: frozen linear weights of the blocks stored as NF4.
  bool nf4FrozenLinears = false;
  // 16-bit gradients without a resident fp32 copy (mixed only; the backend must give pages
  // back): the fp32 gradient buffer keeps its layout, but a group's pages hold memory only
  // while it is open (openGrads .. closeGrads): the model accumulates one block at a time into
  // them and rounds the result into the 16-bit gradients, and the clipping, the loss scaler
  // and the optimizer read the groups one at a time. A block's linear weights have windows of
  // their own (openWeightGrads), open only around the GEMM that writes them. Model states are
  // then 2 + 2 + 12 bytes per parameter, as the ZeRO paper counts mixed precision.
  bool gradWindow = false;
  // The fp32 compute copy of each block's tensors without resident pages between uses (mixed,
  // one rank): a block's group is upcast from its 16-bit weights when its forward,
  // recomputation or backward starts (openBlockValues) and its pages go back when it ends, and
  // each linear weight only around the GEMMs that read it (openWeightValues; never under bf16
  // GEMMs, which read the 16-bit weights); the 16-bit weights are the only lasting copy. The
  // groups outside the blocks (embeddings, final norm, head) are open only around the ops that
  // read them (openValues).
  bool valueWindow = false;
};

}  // namespace ts::engine
