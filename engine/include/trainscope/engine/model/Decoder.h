#pragma once
// The stack of blocks with activation checkpointing (segments of k blocks: only each segment's
// input is kept, backward recomputes the segment) and the hooks that ZeRO gathers, gradient
// buckets and offload hang on.
#include <functional>
#include <vector>

#include "trainscope/engine/model/Block.h"

namespace ts::engine {

// What the decoder keeps: without checkpointing one BlockActivations per layer; with segments
// of k blocks, k scratch sets (slot 0 has no `input`: it is the segment's checkpoint) shared by
// all segments, plus each segment's input.
struct DecoderActivations {
  std::vector<BlockActivations> blocks;
  std::vector<Tensor> checkpoints;  // (B,T,C) input of blocks 0, k, 2k, ... (checkpointing only)
};

class Decoder {
 public:
  // Before and after block l's forward (also around its recomputation under checkpointing,
  // `recompute` true), before its backward, and when block l's parameter gradients are complete
  // for this micro-batch.
  struct Hooks {
    std::function<void(int layer, bool recompute)> beforeBlockForward;
    std::function<void(int layer, bool recompute)> afterBlockForward;
    std::function<void(int layer)> beforeBlockBackward;
    std::function<void(int layer)> blockGradientsReady;
  };

  // forwardOnly (an inference model: the distillation teacher): every block runs in the one
  // block set, in place on its input; nothing is kept for a backward.
  Decoder(std::vector<Block> blocks, int checkpointEvery, bool forwardOnly = false)
      : blocks_(std::move(blocks)), k_(checkpointEvery), forwardOnly_(forwardOnly) {}
  int layers() const { return static_cast<int>(blocks_.size()); }
  void setHooks(Hooks hooks) { hooks_ = std::move(hooks); }

  // Where the embeddings write the first block's input: its saved input (plain), or the fp32
  // residual stream ws.stream when saved activations are stored packed (16-bit or int8).
  float* input(const LayerContext& c, DecoderActivations& a) const;
  // Runs every block from input(a); the last one writes `out`.
  void forward(const LayerContext& c, DecoderActivations& a, float* out) const;
  // Takes the gradient of `out` in ws.dres; leaves the gradient of input(a) there.
  void backward(const LayerContext& c, DecoderActivations& a) const;

 private:
  float* inputOf(DecoderActivations& a, int l) const;
  bool streamed(const LayerContext& c) const;
  void blockForward(const LayerContext& c, int l, BlockActivations& s, const float* in, float* out,
                    bool recompute) const;
  std::vector<Block> blocks_;
  int k_;
  bool forwardOnly_;
  Hooks hooks_;
};

}  // namespace ts::engine
