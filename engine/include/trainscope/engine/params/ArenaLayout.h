#pragma once
// Where every parameter tensor of an arena lives (ParamArena.h): offsets into the value and
// gradient buffers, the groups (embeddings, each block, the head) with their padding, and the
// NF4 tensors' places in the NF4 buffers. Pure arithmetic over the model description, in its
// storage order; no memory.
//
// - Gradient storage only for trainable tensors: the gradient buffer holds the trainable views
//   back to back (frozen tensors have no gradient, no optimizer state and no master copy), so
//   the optimizer, clipping and checkpoints work in "gradient space" (ParamInfo::gradOffset).
// - Grouped by block: the tensors of the embeddings, each block and the head form groups
//   (ParamGroup), each one contiguous slice of both buffers. With `align` > 1 every group starts
//   at a multiple of `align` elements (zero padding between groups), so a block or a rank's
//   shard is one aligned slice.
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/params/ArenaOptions.h"

namespace ts::engine {

struct ParamInfo {
  std::string name;            // "wte", "h.0.attn.c_attn.weight", ...
  std::vector<int64_t> shape;  // (out, in) for linear weights
  int64_t offset = 0;          // in elements, into the value buffers
  int64_t numel = 0;
  int64_t gradOffset = -1;  // into the gradient buffers; -1: frozen (no gradient)
  bool decay = false;       // weight decay applies (2-D weights incl. embeddings, as nanoGPT)
  core::TensorSpec spec;    // its entry in the model description (role, block, module)
  // NF4-stored (frozen base linear under QLoRA): byte offsets of its packed codes and absmax
  // codes and the float offset of its scales in the arena's NF4 buffers; offset is then -1.
  struct Nf4View {
    int64_t packed = -1, codes = 0, scales = 0;
  } nf4;
  bool trainable() const { return gradOffset >= 0; }
  bool quantized() const { return nf4.packed >= 0; }
};

// A contiguous slice of the arena: the tensors of one block (block >= 0), or those before the
// first block (embeddings) or after the last (final norm, head), block -1.
struct ParamGroup {
  int block = -1;
  size_t firstParam = 0, paramCount = 0;  // into params()
  int64_t offset = 0, numel = 0;          // value elements incl. trailing padding
  int64_t gradOffset = 0, gradNumel = 0;  // gradient elements incl. trailing padding
};

// The lengths of the three NF4 buffers: packed codes and absmax codes (bytes), scales (floats).
struct Nf4Sizes {
  int64_t packed = 0, codes = 0, scales = 0;
};

class ArenaLayout {
 public:
  ArenaLayout() = default;
  // Uses options' align, tensorAlign, padTo and nf4FrozenLinears.
  ArenaLayout(std::vector<core::TensorSpec> tensors, const ArenaOptions& options);

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  int64_t numParams() const { return numParams_; }  // elements of all tensors
  int64_t trainable() const { return trainable_; }  // elements of trainable tensors
  int64_t size() const { return size_; }            // value buffer length (padding incl.)
  int64_t gradSize() const { return gradSize_; }    // gradient buffer length
  const Nf4Sizes& nf4() const { return nf4_; }

  const ParamInfo* find(const std::string& name) const;
  size_t groupOf(const ParamInfo& p) const;  // throws when p lies in no group's values
  int groupOfBlock(int l) const;             // -1 when no group holds block l
  // The groups of the tensors before and after the blocks (block -1).
  std::vector<size_t> outerGroups() const;

 private:
  void startGroup(int block);
  void place(const core::TensorSpec& t, ParamInfo& p, const ArenaOptions& options);
  // Pads the open group's end to a multiple of `align`; the padding belongs to that group.
  void closeGroup(int64_t align);

  std::vector<ParamInfo> params_;
  std::vector<ParamGroup> groups_;
  int64_t numParams_ = 0, trainable_ = 0, size_ = 0, gradSize_ = 0;
  Nf4Sizes nf4_;
};

}  // namespace ts::engine
