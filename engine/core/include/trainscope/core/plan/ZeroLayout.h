#pragma once
// How ZeRO lays out the parameter arena, shared by the engine (ParamArena) and the estimator so
// that predicted and measured per-rank memory agree to the byte.
//
// With ranks > 1 and stage >= 1, every group of the arena (the embeddings, each block, the head)
// starts on a multiple of kZeroAlign elements and the total length is padded to a multiple of
// ranks * kZeroAlign, so the buffers split into `ranks` equal shards whose boundaries, like the
// groups', fall on whole pages (kZeroAlign elements are 8 KiB of fp32 and 4 KiB of 16-bit
// values): what a rank does not own is given back to the system page by page. Stage 0 keeps the
// single-rank layout.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/model/ModelSpec.h"

namespace ts::core {

inline constexpr int64_t kZeroAlign = 2048;

// 8-bit AdamW's blocks of state (256 elements of a tensor, one absmax each), and the smallest
// tensor with 8-bit state (bitsandbytes' min_8bit_size; smaller ones keep fp32 state).
inline constexpr int64_t kAdam8Block = 256;
inline constexpr int64_t kAdam8Min = 4096;

struct ZeroLayout {
  int64_t align = 1, padTo = 1;
  // Every trainable tensor starts at a multiple of this (8-bit AdamW: kAdam8Block, so a shard
  // boundary, a multiple of kZeroAlign, never cuts one of a tensor's blocks of state and every
  // rank quantizes exactly the blocks one rank would).
  int64_t tensorAlign = 1;
};

inline ZeroLayout zeroLayoutOf(int ranks, int stage, int stateBits = 32) {
  if (ranks > 1 && stage >= 1)
    return {kZeroAlign, int64_t(ranks) * kZeroAlign, stateBits == 8 ? kAdam8Block : 1};
  return {};
}

// Gradient-space offset of each trainable tensor in the layout (-1 for a frozen one).
inline std::vector<int64_t> zeroTensorOffsets(const std::vector<TensorSpec>& tensors,
                                              ZeroLayout layout) {
  auto up = [](int64_t n, int64_t a) { return a > 1 ? (n + a - 1) / a * a : n; };
  std::vector<int64_t> out;
  int64_t off = 0;
  int block = -2;
  for (const auto& t : tensors) {
    if (!t.trainable) {
      out.push_back(-1);
      continue;
    }
    if (t.block != block) {
      if (block != -2) off = up(off, layout.align);
      block = t.block;
    }
    off = up(off, layout.tensorAlign);
    out.push_back(off);
    off += t.numel();
  }
  return out;
}

// One group of the layout: [offset, offset + numel) including its trailing padding.
struct ZeroGroup {
  int block = -1;
  int64_t offset = 0, numel = 0;
};

// The groups of the trainable tensors in storage order (as ParamArena's gradient space).
// With `values`, the value space: frozen tensors too (not an NF4 base, which the layout leaves
// out: it stays whole), only trainable ones aligned to tensorAlign.
inline std::vector<ZeroGroup> zeroGroups(const std::vector<TensorSpec>& tensors, ZeroLayout layout,
                                         bool values = false) {
  auto up = [](int64_t n, int64_t a) { return a > 1 ? (n + a - 1) / a * a : n; };
  std::vector<ZeroGroup> groups;
  int64_t off = 0;
  bool open = false;
  for (const auto& t : tensors) {
    if (!t.trainable && !values) continue;
    if (!open || groups.back().block != t.block) {
      if (open) {
        off = up(off, layout.align);
        groups.back().numel = off - groups.back().offset;
      }
      groups.push_back({t.block, off, 0});
      open = true;
    }
    off = (t.trainable ? up(off, layout.tensorAlign) : off) + t.numel();
  }
  if (open) {
    off = up(up(off, layout.align), layout.padTo);
    groups.back().numel = off - groups.back().offset;
  }
  return groups;
}

// Whether the engine keeps a 16-bit policy's gradients without a resident fp32 copy
// (ParamArena's gradWindow): one rank, the optimizer on the device. Data parallel keeps its
// own fp32 gradient buckets and shards, and the offloaded optimizer copies fp32 gradients out.
inline bool gradWindowOf(const std::string& policy, int ranks, const std::string& offloadOptimizer,
                         const std::string& offloadParams) {
  const bool sixteen =
      policy == "bf16" || policy == "fp16" || policy == "fp8" || policy == "pure_bf16";
  return sixteen && ranks <= 1 && offloadOptimizer == "none" && offloadParams == "none";
}

// Whether the blocks' fp32 compute copies exist only while a block runs (ParamArena's
// valueWindow): as gradWindowOf, but for fp8, whose weight quantization reads every block's
// fp32 weights after each step.
inline bool valueWindowOf(const std::string& policy, int ranks, const std::string& offloadOptimizer,
                          const std::string& offloadParams) {
  return gradWindowOf(policy, ranks, offloadOptimizer, offloadParams) && policy != "fp8";
}

// Rank r's shard of a padded buffer of `total` elements: [r * total / ranks, (r + 1) * ...).
inline std::pair<int64_t, int64_t> zeroShard(int64_t total, int ranks, int r) {
  const int64_t s = total / std::max(1, ranks);
  return {int64_t(r) * s, int64_t(r + 1) * s};
}

// What rank r holds of a layout (elements), for the memory it reports:
// - owned: its shard; maxGroupOwned: the most of one group inside it (the reduce-scatter buffer);
// - residentOutside: the unowned part of the groups outside the blocks (gathered for a whole
//   step under stage 3; their gradients live through a backward under stage 2/3);
// - maxBlockOutside / maxTwoBlocksOutside: the unowned part of the largest block, and of the
//   largest two adjacent blocks (a block and the one prefetched next to it).
struct ZeroRankShare {
  int64_t owned = 0, maxGroupOwned = 0, residentOutside = 0, maxBlockOutside = 0,
          maxTwoBlocksOutside = 0;
  // Backward of block l: its weights and the prefetched l-1 gathered, its gradients live and
  // those of l+1 too (their reduce-scatter runs during this backward).
  int64_t maxBackwardOutside = 0;
  // ZeRO-3 parameter offload, where not even the owned part stays between uses: the groups
  // outside the blocks whole, the owned part of the blocks, the largest two adjacent blocks
  // whole, and backward's moment (blocks l and l-1 whole, the unowned gradients of l and l+1).
  int64_t residentWhole = 0, ownedInBlocks = 0, maxTwoBlocksWhole = 0, maxBackwardWhole = 0;
  // Per block in order: its unowned part and its whole size.
  std::vector<int64_t> blockOutside, blockWhole;
};

inline ZeroRankShare zeroRankShare(const std::vector<ZeroGroup>& groups, int ranks, int r) {
  ZeroRankShare z;
  if (groups.empty()) return z;
  const int64_t total = groups.back().offset + groups.back().numel;
  const auto [lo, hi] = zeroShard(total, ranks, r);
  z.owned = hi - lo;
  auto& blockOutside = z.blockOutside;
  auto& blockWhole = z.blockWhole;
  for (const auto& g : groups) {
    const int64_t own =
        std::max<int64_t>(0, std::min(g.offset + g.numel, hi) - std::max(g.offset, lo));
    z.maxGroupOwned = std::max(z.maxGroupOwned, own);
    if (g.block < 0) {
      z.residentOutside += g.numel - own;
      z.residentWhole += g.numel;
    } else {
      blockOutside.push_back(g.numel - own);
      blockWhole.push_back(g.numel);
      z.ownedInBlocks += own;
    }
  }
  for (size_t i = 0; i < blockWhole.size(); ++i) {
    const bool next = i + 1 < blockWhole.size();
    z.maxTwoBlocksWhole =
        std::max(z.maxTwoBlocksWhole, blockWhole[i] + (next ? blockWhole[i + 1] : 0));
    z.maxBackwardWhole =
        std::max(z.maxBackwardWhole, blockWhole[i] + (i > 0 ? blockWhole[i - 1] : 0) +
                                         blockOutside[i] + (next ? blockOutside[i + 1] : 0));
  }
  for (size_t i = 0; i < blockOutside.size(); ++i) {
    z.maxBlockOutside = std::max(z.maxBlockOutside, blockOutside[i]);
    const int64_t pair = blockOutside[i] + (i + 1 < blockOutside.size() ? blockOutside[i + 1] : 0);
    z.maxTwoBlocksOutside = std::max(z.maxTwoBlocksOutside, pair);
    const int64_t bwd = 2 * blockOutside[i] + (i > 0 ? blockOutside[i - 1] : 0) +
                        (i + 1 < blockOutside.size() ? blockOutside[i + 1] : 0);
    z.maxBackwardOutside = std::max(z.maxBackwardOutside, bwd);
  }
  return z;
}

}  // namespace ts::core
