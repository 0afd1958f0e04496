#pragma once
// The parameter arena: every parameter tensor of a model as a named view into flat buffers, one
// per dtype (fp32 values and gradients; the stored 16-bit weights and gradients under a 16-bit
// policy). Built from the model description (core/ModelSpec.h), in its storage order.
//
// Its parts, each in a file of its own:
// - the layout (ArenaLayout.h): offsets, groups by block, padding, gradient space;
// - the NF4 storage of a QLoRA base (Nf4Store.h);
// - the fp32 windows over 16-bit storage (Fp32Window.h; the arena's open*/close* below,
//   ArenaWindows.cpp) and host I/O (valuesToHost, setValuesFromHost ...; ArenaHostIo.cpp).
//
// Values and gradients live in the backend's memory: host code reaches them only through the
// backend (kernels, copies).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/params/ArenaLayout.h"
#include "trainscope/engine/params/ArenaOptions.h"
#include "trainscope/engine/params/Fp32Window.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/engine/params/Nf4Store.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

class ParamArena {
 public:
  ParamArena() = default;
  ParamArena(std::vector<core::TensorSpec> tensors, kernels::Backend* backend,
             MemoryTracker* tracker, ArenaOptions options);
  ParamArena(ParamArena&&) = default;
  ParamArena& operator=(ParamArena&&) = default;

  const std::vector<ParamInfo>& params() const { return layout_.params(); }
  const std::vector<ParamGroup>& groups() const { return layout_.groups(); }
  const ParamInfo* find(const std::string& name) const { return layout_.find(name); }
  const ArenaOptions& options() const { return options_; }

  int64_t numParams() const { return layout_.numParams(); }        // elements of all tensors
  int64_t trainableParams() const { return layout_.trainable(); }  // of trainable tensors
  int64_t size() const { return layout_.size(); }          // value buffer length (padding; not NF4)
  int64_t gradSize() const { return layout_.gradSize(); }  // gradient buffer length
  // Every tensor trainable: gradient space equals value space, one copy moves the whole arena.
  bool allTrainable() const { return layout_.trainable() == layout_.numParams(); }

  bool mixed() const { return options_.working != DType::F32; }
  DType working() const { return options_.working; }

  Tensor& values() { return values_; }  // fp32 (the compute copy under a 16-bit policy)
  Tensor& grads() { return grads_; }    // fp32, gradSize()
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }
  Tensor& values16() { return values16_; }  // the stored 16-bit weights (mixed only)
  Tensor& grads16() { return grads16_; }    // the stored 16-bit gradients (mixed only)
  float* value(const ParamInfo& p) { return values_.f32() + p.offset; }
  const float* value(const ParamInfo& p) const { return values_.f32() + p.offset; }
  // Null for a frozen tensor.
  float* grad(const ParamInfo& p) { return p.trainable() ? grads_.f32() + p.gradOffset : nullptr; }
  const uint16_t* value16(const ParamInfo& p) const {
    return static_cast<const uint16_t*>(values16_.data()) + p.offset;
  }

  // NF4 tensors: quantizes fp32 host values (p.numel) into p's storage (bit for bit as
  // bitsandbytes); host values of p dequantized (fp32); p dequantized into backend memory as bf16
  // (a GEMM operand).
  void setQuantized(const ParamInfo& p, const float* host) { nf4_.quantize(p, host); }
  std::vector<float> dequantizedToHost(const ParamInfo& p) const { return nf4_.toHost(p); }
  void dequantizeBf16(const ParamInfo& p, uint16_t* dst) const { nf4_.dequantizeBf16(p, dst); }
  int64_t nf4Bytes() const { return nf4_.bytes(); }  // all three NF4 buffers
  // Host copy of any tensor's fp32 values (dequantized when NF4).
  std::vector<float> hostValues(const ParamInfo& p) const;

  // Copies the trainable values into `dst` (gradient space, gradSize() floats, backend memory):
  // how an optimizer's fp32 master copy starts.
  void copyTrainableTo(float* dst) const;
  // Sets the trainable values from `master` (gradient space, backend memory; may be
  // values().f32() itself when allTrainable()), rounds them to the working dtype under a 16-bit
  // policy and refreshes the fp32 compute copy, so forward sees exactly the stored weights.
  // Then runs onWeightsChanged (the model re-quantizes its fp8 copies there). Partitioned
  // weights: only this rank's shard is set (as by every whole-buffer call below).
  void setWeightsFrom(const float* master);
  // Rounds the fp32 values in place to the working dtype (pure_bf16: the optimizer updated the
  // compute copy directly) and refreshes the stored weights.
  void roundWeights();
  // Rounds the fp32 gradients to the working dtype (fp16 overflows to inf, as on hardware) and
  // upcasts them back. No-op in fp32.
  void roundGrads();
  void zeroGrad();

  // Reading the gradients in every mode (the fp32 buffer, or the 16-bit gradients group by
  // group under gradWindow). The loss scaler and clipping scale through scaleGrads: under
  // gradWindow it is a pending factor the optimizer's reads apply (16-bit storage could not
  // hold the unscaled values), reset by zeroGrad.
  bool gradWindow() const { return options_.gradWindow; }
  // ZeRO partitioned buffers (ArenaOptions::partitionValues / partitionGrads) and this rank's
  // shard of value space.
  bool partitionedValues() const { return options_.partitionValues; }
  bool partitionedGrads() const { return options_.partitionGrads; }
  std::pair<int64_t, int64_t> ownedValues() const { return ownedValues_; }
  // Partitioned weights: host values of [offset, offset + n) of value space, of which only the
  // owned part is written (initialization, one tensor at a time).
  void setOwnedValuesFromHost(const float* src, int64_t offset, int64_t n);
  // The gradients' sum of squares and inf/NaN count, one backend call each (one host read on a
  // GPU): over the fp32 buffer, or under gradWindow over the 16-bit one.
  double gradSumSquares();
  int64_t gradNonFinite();
  void scaleGrads(float s);
  // Runs f(p) for every trainable tensor in arena order with p's fp32 gradients readable
  // (grad(p)): under gradWindow its group's, and a block linear weight's own window, open
  // only for it. updatesValues (pure_bf16's optimizer, which updates the fp32 values in
  // place): under valueWindow p's fp32 values are open whole too and rounded into the 16-bit
  // weights after f.
  template <class F>
  void forEachGradTensor(F f, bool updatesValues = false) {
    visitGradTensors(gradScale_, f, updatesValues);
  }
  // gradWindow: makes group g's fp32 gradients resident, holding its 16-bit gradients times
  // `scale`; closeGrads rounds them into the 16-bit gradients (store) and gives the pages
  // back. No-ops otherwise. The model opens a group before the first gradient of it is
  // accumulated and closes it when the group's gradients are complete.
  void openGrads(size_t g, float scale = 1.f);
  void closeGrads(size_t g, bool store);
  // Tensor windows: a block's linear weights are not part of their group's windows. The
  // linear opens its weight's fp32 gradient only around the GEMM that accumulates into it
  // (openWeightGrads .. closeWeightGrads(store)), and under valueWindow its fp32 values only
  // around each GEMM that reads them, so at most one linear weight of a block is upcast at a
  // time. `w` may span consecutive tensors of one block (a fused q|k|v or gate|up weight). An
  // untied LM head has such windows too. No-ops without the windows, for NF4 weights and for
  // the other tensors outside the blocks.
  void openWeightValues(const ParamInfo& w);
  void closeWeightValues(const ParamInfo& w);
  void openWeightGrads(const ParamInfo& w, float scale = 1.f);
  void closeWeightGrads(const ParamInfo& w, bool store);
  // The groups of the tensors before and after the blocks (block -1), and that of block l.
  std::vector<size_t> outerGroups() const { return layout_.outerGroups(); }
  int groupOfBlock(int l) const { return layout_.groupOfBlock(l); }
  // The gradients (gradient space, fp32, scaled as the optimizer would read them) on the host.
  std::vector<float> gradsToHost();

  // valueWindow: block l's fp32 compute copy (all but its linear weights, which have windows of
  // their own) around its forward or backward; openValues(g) / closeValues(g) any group's (the
  // model opens the embeddings' and the head's around the ops that read them). No-ops
  // otherwise. openValues(g, true) upcasts them for an update in place (pure_bf16's
  // optimizer); storeValues rounds such a group into the 16-bit weights and closes it.
  bool valueWindow() const { return options_.valueWindow; }
  void openBlockValues(int l);
  void closeBlockValues(int l);
  void openValues(size_t g, bool full);
  void closeValues(size_t g);
  void storeValues(size_t g);
  // Every tensor's fp32 values (value space, size() floats) on the host, and setting them from
  // host values: how initializers, loaders and exporters reach the weights in every mode. Under
  // valueWindow a block's values go straight into its 16-bit weights (rounded to nearest even,
  // as roundWeights() rounds); the rest into the fp32 copy, which roundWeights() rounds as ever.
  // Partitioned weights: only the shard is read (the rest reads as zero) and written, so a
  // whole load never touches another rank's pages (on a GPU they are not mapped).
  void valuesToHost(float* dst) const;
  void setValuesFromHost(const float* src);
  // n bytes from byte `off` of p's fp32 values, on the host (checkpoints stream them).
  void valueBytesToHost(const ParamInfo& p, char* dst, int64_t off, int64_t n) const;
  // The trainable weights at gradient-space elements [lo, hi) (an optimizer shard's master) as
  // fp32 host values, dst[i - lo] (0 where no trainable tensor lies); reads only those
  // elements, which this rank holds (under ZeRO the rest may have been given back).
  void trainableRangeToHost(float* dst, int64_t lo, int64_t hi) const;

  // ZeRO (allTrainable() only: value space is gradient space). Sets the values of [lo, hi) from
  // src[0, hi - lo) and rounds them to the stored 16-bit weights (mixed); then the stored
  // weights are all-gathered and finishWeightUpdate() refreshes the fp32 compute copy of
  // [lo, hi) from them (the whole arena by default) and runs onWeightsChanged.
  void setWeightsRange(const float* src, int64_t lo, int64_t hi);
  void roundWeightsRange(int64_t lo, int64_t hi);  // pure_bf16: the values updated in place
  void finishWeightUpdate(int64_t lo = 0, int64_t hi = -1, bool notify = true);
  // Rounds the fp32 gradients of [lo, hi) to the working dtype and back (roundGrads of a shard).
  void roundGradsRange(int64_t lo, int64_t hi);
  // The stored weights (16-bit when mixed, else the fp32 values) and their element size: the
  // buffer ZeRO all-gathers.
  void* storedValues() { return mixed() ? values16_.data() : values_.data(); }
  size_t storedElementBytes() const { return mixed() ? 2 : 4; }

  std::function<void()> onWeightsChanged;

 private:
  // Construction: the options' checks, then the buffers in the order they are counted.
  void checkOptions() const;
  void allocateValues(MemoryTracker* tracker, core::MemoryCategory category);
  void allocateGrads(MemoryTracker* tracker, core::MemoryCategory category);
  void allocate16Bit(MemoryTracker* tracker);
  // A ZeRO-partitioned buffer: no resident page (zero when read) but this rank's shard, whose
  // bytes are counted for as long as the arena lives. A windowed fp32 buffer: untracked (its
  // resident groups are counted as they open), with no resident page yet.
  Tensor partitionedBuffer(MemoryTracker* tracker, core::MemoryCategory category, DType dtype,
                           int64_t n, const char* what);
  Tensor windowBuffer(core::MemoryCategory category, int64_t n, const char* what);

  // Runs f(p) for every trainable tensor, its fp32 gradients open (under gradWindow read from
  // the 16-bit ones times `scale`, closed again without storing); updatesValues: see
  // forEachGradTensor.
  template <class F>
  void visitGradTensors(float scale, F f, bool updatesValues = false) {
    const auto& groups = layout_.groups();
    const auto& params = layout_.params();
    for (size_t g = 0; g < groups.size(); ++g) {
      const ParamGroup& pg = groups[g];
      if (pg.gradNumel == 0) continue;
      openGrads(g, scale);
      if (updatesValues) openValues(g, true);
      for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
        const ParamInfo& p = params[i];
        if (!p.trainable()) continue;  // frozen: no gradient
        const bool own = weightWindowed(p);
        if (own) {
          openWeightGrads(p, scale);
          if (updatesValues) openWeightValues(p);
        }
        f(p);
        if (own) {
          if (updatesValues) storeWeightValues(p);
          closeWeightGrads(p, false);
        }
      }
      if (updatesValues) storeValues(g);
      closeGrads(g, false);
    }
  }
  // A block's linear weight, or an untied LM head: windows of their own (when gradWindow /
  // valueWindow are on).
  static bool ownWindow(const ParamInfo& p) {
    return ((p.spec.block >= 0 && p.spec.role == core::TensorRole::LinearWeight) ||
            p.spec.role == core::TensorRole::Head) &&
           p.offset >= 0;
  }
  bool weightWindowed(const ParamInfo& p) const {
    return (options_.gradWindow || options_.valueWindow) && ownWindow(p);
  }
  void storeWeightValues(const ParamInfo& w);  // rounds an open weight window, then closes it
  // p's fp32 compute copy holds its values now (not a closed block under valueWindow).
  bool f32Valid(const ParamInfo& p) const;
  // setWeightsFrom under valueWindow: the master rounded straight into the 16-bit weights.
  void setWindowedWeightsFrom(const float* master);

  kernels::Backend* backend_ = nullptr;
  ArenaOptions options_;
  ArenaLayout layout_;
  Tensor values_, grads_, values16_, grads16_;
  Fp32Window gradWindow_;   // gradWindow: the fp32 gradients' resident groups and weights
  Fp32Window valueWindow_;  // valueWindow: the fp32 values' (groups open 1 for compute, 2 whole)
  // Partitioned buffers: the owned shards' bytes, counted for as long as the arena lives.
  std::pair<int64_t, int64_t> ownedValues_{0, -1};
  std::vector<TrackedBytes> ownedTracked_;
  float gradScale_ = 1.f;  // gradWindow: the pending factor of scaleGrads
  Nf4Store nf4_;
};

// A weight's own window around one GEMM (no-ops where it has none): its fp32 values for a read,
// or its fp32 gradient for an accumulation, rounded into the 16-bit gradient when it closes.
class WeightWindow {
 public:
  enum class Kind { Values, Grads };
  WeightWindow(ParamArena& arena, const ParamInfo& w, Kind kind)
      : arena_(arena), w_(w), kind_(kind) {
    if (kind_ == Kind::Grads)
      arena_.openWeightGrads(w_);
    else
      arena_.openWeightValues(w_);
  }
  ~WeightWindow() {
    if (kind_ == Kind::Grads)
      arena_.closeWeightGrads(w_, true);
    else
      arena_.closeWeightValues(w_);
  }
  WeightWindow(const WeightWindow&) = delete;
  WeightWindow& operator=(const WeightWindow&) = delete;

 private:
  ParamArena& arena_;
  const ParamInfo& w_;
  Kind kind_;
};

}  // namespace ts::engine
