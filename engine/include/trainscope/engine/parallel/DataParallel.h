#pragma once
// Data parallelism and ZeRO stages 1-3 over a Communicator, as the decoder's hooks plus an
// optimizer on the rank's shard (design.md). The parameter arena keeps its layout on every rank;
// under ZeRO (core/ZeroLayout.h) its buffers split into equal, page-aligned shards, and the
// pages of what a rank does not own are given back to the system (Backend::discard) when the
// stage shards them, so measured memory is what the rank really holds:
//
// - stage 0: every rank keeps everything; gradients are all-reduced in buckets (one per block,
//   started as soon as the block's backward is done, then the embeddings and head) on the last
//   micro-batch of a step, and every rank runs the whole optimizer.
// - stage 1: the optimizer state (and fp32 master) covers the rank's shard only: gradients are
//   reduce-scattered per block on the last micro-batch (the buffers stay whole), and after the
//   update the shards' stored weights are all-gathered (2Ψ per step, as stage 0).
// - stage 2: + gradients: each block's gradients are reduce-scattered when its backward is done
//   (every micro-batch), the rank keeps its shard, the rest of the block's pages go back.
// - stage 3: + parameters: a block's weights are all-gathered before its forward and again
//   before its backward (the next one prefetched), and given back after; the embeddings, final
//   norm and head (the groups outside the blocks) are gathered for the whole step.
//
// The loss is normalized by the target tokens of the global batch, so the summed gradients equal
// those of one rank running the whole batch (up to fp32 summation order).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "trainscope/engine/model/Decoder.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/engine/params/ParamArena.h"

namespace ts::engine {

class DataParallel {
 public:
  // Throws std::invalid_argument for a combination the stage cannot run (frozen tensors with
  // stage >= 1, a backend that cannot give pages back with stage >= 2).
  DataParallel(Communicator* comm, ParamArena* arena, kernels::Backend* backend,
               MemoryTracker* tracker, int stage);
  ~DataParallel();

  int stage() const { return stage_; }
  int rank() const { return comm_->rank(); }
  int ranks() const { return comm_->size(); }
  Communicator& comm() { return *comm_; }
  // The optimizer's part of gradient space: everything for stage 0, the shard from stage 1.
  OptimizerShard optimizerShard() const;
  // Gradient space that holds reduced gradients after a step's backward: all (stage 0) or the
  // shard (stages 1-3: reduce-scattered).
  int64_t gradLo() const { return stage_ >= 1 ? lo_ : 0; }
  int64_t gradHi() const { return stage_ >= 1 ? hi_ : arena_->gradSize(); }
  int64_t shardLo() const { return lo_; }
  int64_t shardHi() const { return hi_; }

  Decoder::Hooks hooks();
  // Stage 3: runs after a block's weights were gathered (the model makes its fp8 copies then).
  std::function<void(int block)> onGathered;
  // Stage 3: runs after a block was given back (the model gives its fp8 copies back then).
  std::function<void(int block)> onReleased;

  // Per step, in order: beginStep, then per micro-batch beginMicroBatch(last) before its
  // forward and endMicroBatch after its backward; then the gradient helpers and optimizerStep.
  void beginStep();
  void beginMicroBatch(bool last);
  void beginBackward();
  void endMicroBatch();
  void zeroGrad();
  void roundGrads();
  void scaleGrads(float s);
  int64_t countNonFinite();             // over the ranks
  double clipGradNorm(double maxNorm);  // global norm, as clipGradNorm on one rank
  void optimizerStep(Optimizer& opt, float lr);
  void endStep();
  // Stage 3 outside a training step (evaluation, checkpoints): the groups outside the blocks
  // gathered, or given back.
  void gatherResident();
  void releaseResident();
  // ZeRO-3 parameter offload (parallel.offload_params cpu | nvme): the shard's stored weights
  // live in host memory or a file (dir/rank<r>/params.bin) between uses; a group's part comes to
  // the device when the group is gathered and leaves with it, all of it around the optimizer
  // step. Call once after construction. Throws OffloadError for a bad directory.
  void offloadParams(const std::string& where, const std::string& dir);
  // Per-step numbers for step events (nvme parameter offload: bytes read and written, seconds
  // in I/O and waited for it); empty without parameter offload.
  nlohmann::json takeStepStats();

  // Checkpoints: stage 3 gathers every group (all weights whole on every rank), then gives the
  // unowned pages back. A load writes only the shard; reshard() then moves it to its offload
  // tier (parameter offload).
  void gatherAll();
  void releaseAll();
  void reshard();
  // Stage >= 1: the optimizer's state tensors, full length in this run's layout, on `root`
  // (counted as workspace while they live); empty on the other ranks.
  std::vector<std::pair<std::string, Tensor>> gatherOptimizerState(Optimizer& opt, int root);

 private:
  struct Group {
    int block = -1;
    int64_t lo = 0, hi = 0;    // gradient space
    int64_t vlo = 0, vhi = 0;  // value space (the same when every tensor is trainable)
    bool gathered = true;      // stage 3: parameters present
    std::unique_ptr<Communicator::Pending> pendingGather;
    bool gradsLive = false;  // stage 2/3: non-owned gradient pages in use
    bool reduced = false;    // this micro-batch's reduction started/done
    // nvme parameter offload: its part read ahead into readBuf, or written behind from
    // writeBuf (OffloadStore tickets; 0 = none in flight).
    uint64_t readTicket = 0, writeTicket = 0;
    bool readIssued = false;
    std::vector<char> readBuf, writeBuf;
  };
  std::vector<int64_t> countsOf(const Group& g, bool values = false) const;
  int64_t ownedIn(const Group& g, bool values = false) const;
  void reduceGroup(Group& g);
  void finishReduceScatter();  // the one in flight: wait, copy its result, give pages back
  void gather(Group& g, bool async);
  void awaitGather(Group& g);
  void release(Group& g);
  std::array<std::pair<int64_t, int64_t>, 2> outside(const Group& g, bool values) const;
  void discardOutside(void* base, size_t elemBytes, const Group& g, core::MemoryCategory cat,
                      bool values = false, bool track = true);
  // Takes the pages discardOutside gave back again (Backend::commit) and counts them.
  void commitOutside(void* base, size_t elemBytes, const Group& g, core::MemoryCategory cat,
                     bool values = false);
  void gradsLive(Group& g);
  void gradsDone(Group& g);
  void waitPending();
  Group* blockGroup(int layer);

  Communicator* comm_;
  ParamArena* arena_;
  kernels::Backend* backend_;
  MemoryTracker* tracker_;
  int stage_;
  int64_t lo_ = 0, hi_ = 0;    // the gradient shard
  int64_t vlo_ = 0, vhi_ = 0;  // the value shard (stage 3)
  bool reduceThisMicro_ = true;
  std::vector<Group> groups_;
  std::vector<std::unique_ptr<Communicator::Pending>> pending_;
  Tensor scratch_;  // reduce-scatter output of one group
  // The reduce-scatter in flight (stages 1-3) and its group.
  std::unique_ptr<Communicator::Pending> scatter_;
  Group* scattering_ = nullptr;
  // Parameter offload, a group's part of the value shard at a time.
  std::pair<int64_t, int64_t> ownedRange(const Group& g) const;
  void stage(std::vector<char>& buf, size_t bytes);
  void unstage(std::vector<char>& buf);
  void fetchOwned(Group& g);  // host -> device (from a read-ahead when one was started)
  void readAhead(Group* g);   // nvme: starts reading its part into host memory
  void storeOwned(Group& g);  // device -> host (nvme: written behind)
  void dropOwned(Group& g, bool track = true);
  bool paramsOffloaded() const { return !paramWhere_.empty(); }
  std::string paramWhere_;
  std::unique_ptr<kernels::Backend> hostBackend_;  // before hostParams_: it must outlive it
  Tensor hostParams_;
  std::unique_ptr<class OffloadStore> paramStore_;
};

}  // namespace ts::engine
