#pragma once
// The parameter arena: every parameter tensor of a model as a named view into flat buffers, one
// per dtype (fp32 values and gradients; the stored 16-bit weights and gradients under a 16-bit
// policy). Built from the model description (core/ModelSpec.h), in its storage order.
//
// - Gradient storage only for trainable tensors: the gradient buffer holds the trainable views
//   back to back (frozen tensors have no gradient, no optimizer state and no master copy), so
//   the optimizer, clipping and checkpoints work in "gradient space" (ParamInfo::gradOffset).
// - Grouped by block: the tensors of the embeddings, each block and the head form groups
//   (ParamGroup), each one contiguous slice of both buffers. With `align` > 1 every group starts
//   at a multiple of `align` elements (zero padding between groups), so a block or a rank's
//   shard is one aligned slice.
//
// - NF4 (QLoRA, ArenaOptions::nf4FrozenLinears): frozen block linear weights are stored only as
//   NF4 with double quantization (kernels/Nf4.h), in three byte/scale buffers of their own
//   (category parameters); they have no fp32 or 16-bit value (ParamInfo::offset -1) and the
//   linears dequantize them on the fly. Loaders hand their fp32 values to setQuantized().
//
// Values and gradients live in the backend's memory: host code reaches them only through the
// backend (kernels, copies).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

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

class ParamArena {
 public:
  ParamArena() = default;
  ParamArena(std::vector<core::TensorSpec> tensors, kernels::Backend* backend,
             MemoryTracker* tracker, ArenaOptions options);
  ParamArena(ParamArena&&) = default;
  ParamArena& operator=(ParamArena&&) = default;

  const std::vector<ParamInfo>& params() const { return params_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  const ParamInfo* find(const std::string& name) const;
  const ArenaOptions& options() const { return options_; }

  int64_t numParams() const { return numParams_; }        // elements of all tensors
  int64_t trainableParams() const { return trainable_; }  // elements of trainable tensors
  int64_t size() const { return size_; }  // value buffer length (padding incl.; not NF4 tensors)
  int64_t gradSize() const { return gradSize_; }  // gradient buffer length
  // Every tensor trainable: gradient space equals value space, one copy moves the whole arena.
  bool allTrainable() const { return trainable_ == numParams_; }

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
  void setQuantized(const ParamInfo& p, const float* host);
  std::vector<float> dequantizedToHost(const ParamInfo& p) const;
  void dequantizeBf16(const ParamInfo& p, uint16_t* dst) const;
  int64_t nf4Bytes() const;  // all three NF4 buffers
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
  std::vector<size_t> outerGroups() const;
  int groupOfBlock(int l) const;
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
  kernels::Backend* backend_ = nullptr;
  ArenaOptions options_;
  std::vector<ParamInfo> params_;
  std::vector<ParamGroup> groups_;
  int64_t numParams_ = 0, trainable_ = 0, size_ = 0, gradSize_ = 0;
  Tensor values_, grads_, values16_, grads16_;
  std::vector<char> gradOpen_;          // gradWindow: which groups' fp32 pages are resident
  std::vector<int64_t> gradOpenElems_;  // and the elements each holds
  TrackedBytes gradTracked_;            // gradWindow: the resident groups' bytes
  // valueWindow: per group 0 closed, 1 open for compute, 2 open whole; the bytes resident.
  std::vector<char> valueOpen_;
  std::vector<int64_t> openElems_;
  TrackedBytes valueTracked_;
  // Partitioned buffers: the owned shards' bytes, counted for as long as the arena lives.
  std::pair<int64_t, int64_t> ownedValues_{0, -1};
  std::vector<TrackedBytes> ownedTracked_;
  // Runs f(p) for every trainable tensor, its fp32 gradients open (under gradWindow read from
  // the 16-bit ones times `scale`, closed again without storing); updatesValues: see
  // forEachGradTensor.
  template <class F>
  void visitGradTensors(float scale, F f, bool updatesValues = false) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      const ParamGroup& pg = groups_[g];
      if (pg.gradNumel == 0) continue;
      openGrads(g, scale);
      if (updatesValues) openValues(g, true);
      for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
        const ParamInfo& p = params_[i];
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
  size_t groupOf(const ParamInfo& p) const;
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
  // Open weight windows (offset, elements): values, and gradients (gradient offsets).
  std::vector<std::pair<int64_t, int64_t>> openWeightValues_, openWeightGrads_;
  // Gives back the whole pages inside [p, p + n) only: the partial ones at the edges belong to
  // neighbouring tensors that may be open (they are released with their group).
  void discardInner(float* p, int64_t n);
  // p's fp32 compute copy holds its values now (not a closed block under valueWindow).
  bool f32Valid(const ParamInfo& p) const;
  // Working 16-bit <-> fp32, on the backend (toF32, fromF32) or on host memory.
  void toF32(const uint16_t* h, float* f, int64_t n) const;
  void fromF32(const float* f, uint16_t* h, int64_t n) const;
  void hostToF32(const uint16_t* h, float* f, int64_t n) const;
  void hostFromF32(const float* f, uint16_t* h, int64_t n) const;
  void roundTripRange(int64_t lo, int64_t n);
  float gradScale_ = 1.f;  // gradWindow: the pending factor of scaleGrads
  Tensor nf4Packed_, nf4Codes_, nf4Scales_, nf4Map_;
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
