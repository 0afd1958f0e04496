#pragma once
// Optimizers over a parameter arena (ParamArena.h): state for the trainable tensors only, laid
// out in the arena's gradient space, so a rank's slice of it is a slice of the state too. State
// tensors are counted as optimizer_state. AdamW decays only 2-D weights (linear weights and
// embeddings, as nanoGPT); biases and LayerNorm parameters are not decayed. SGD uses momentum
// (PyTorch semantics).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/engine/params/ParamArena.h"

namespace ts::engine {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update with learning rate `lr`; the optimizer counts its own steps (bias correction).
  virtual void step(float lr) = 0;
  virtual int64_t stepCount() const = 0;
  virtual void setStepCount(int64_t n) = 0;
  // Named state tensors (flat, same length as the parameters) for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor*>> state() = 0;
  virtual std::string name() const = 0;
  // The fp32 master of the part this optimizer updates (null without one).
  virtual const Tensor* shardMaster() const { return nullptr; }
  // After a checkpoint was loaded into state(): an offloaded optimizer moves it to its tier.
  virtual void stateLoaded() {}
  // Per-step numbers for step events (offload: bytes moved, I/O time); empty by default.
  virtual nlohmann::json takeStepStats() { return nlohmann::json::object(); }
  // A state tensor kept compact rather than in gradient space (8-bit AdamW's codes, absmaxes
  // and small tensors' fp32 state): this rank's buffer is the elements [offset, offset +
  // numel) of the whole state, `total` long and the same for any number of ranks, so the ranks'
  // buffers in rank order are the one-rank state. nullopt: a slice of gradient space.
  struct CompactSlice {
    int64_t offset = 0, total = 0;
  };
  virtual std::optional<CompactSlice> compactSlice(const std::string& name) const {
    (void)name;
    return std::nullopt;
  }
};

// The part of gradient space an optimizer updates and keeps state for: everything (hi < 0), or
// a ZeRO rank's shard [lo, hi). A sharded optimizer writes the shard's new weights into the
// arena (ParamArena::setWeightsRange) and leaves gathering them to the caller (DataParallel).
struct OptimizerShard {
  int64_t lo = 0, hi = -1;
  bool sharded() const { return hi >= 0; }
};

// 8-bit AdamW's compact state for a shard, one layout for the device optimizer and its offloaded
// twin (so their checkpoints move between them). Tensors of at least core::kAdam8Min elements
// keep uint8 codes with an fp32 absmax per core::kAdam8Block; smaller ones fp32 m and v; only
// each tensor's piece of the shard is kept, compact, in arena order.
struct Adam8Layout {
  struct Piece {
    const ParamInfo* p = nullptr;
    int64_t a = 0, b = 0;  // the shard's part of the tensor in gradient space (empty: none)
    bool big = false;      // 8-bit state
    int64_t q = 0, block = 0, f = 0;  // where it starts in the codes, absmaxes, fp32 state
  };
  std::vector<Piece> pieces;                 // every trainable tensor, in arena order
  int64_t codes = 0, blocks = 0, small = 0;  // this shard's buffer lengths
  Optimizer::CompactSlice codesSlice, absmaxSlice, fp32Slice;  // ... within the whole state
};
// Throws std::logic_error naming the tensor when the shard cuts one of its 8-bit blocks (an
// arena not built with core::ZeroLayout's tensorAlign).
Adam8Layout adam8Layout(const ParamArena& arena, OptimizerShard shard);

// parallel.offload_optimizer: where the shard's state lives and its update runs.
struct OffloadOptions {
  std::string where = "none";  // cpu | nvme
  std::string dir;             // nvme: parallel.nvme_path (a subdirectory per rank)
  int rank = 0;
};
// AdamW (32-bit state) with its state in host memory or NVMe files, updated on the host
// (OffloadedOptimizer.cpp). Throws std::invalid_argument / OffloadError (the directory).
std::unique_ptr<Optimizer> makeOffloadedOptimizer(const core::OptimizerConfig& config,
                                                  ParamArena& arena, kernels::Backend* backend,
                                                  MemoryTracker* tracker, OptimizerShard shard,
                                                  const OffloadOptions& offload);

std::unique_ptr<Optimizer> makeOptimizer(const core::OptimizerConfig& config, ParamArena& arena,
                                         kernels::Backend* backend, MemoryTracker* tracker,
                                         OptimizerShard shard = {});

// Global L2 norm of all gradients (before clipping). With maxNorm > 0 and norm > maxNorm, the
// gradients are scaled by maxNorm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_.
double clipGradNorm(ParamArena& arena, kernels::Backend* backend, double maxNorm);

}  // namespace ts::engine
