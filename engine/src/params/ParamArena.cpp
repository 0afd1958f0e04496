#include "trainscope/engine/params/ParamArena.h"

#include <algorithm>
#include <stdexcept>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::engine {

using core::MemoryCategory;

namespace {
void roundTrip(kernels::Backend& be, DType dt, float* f32, uint16_t* h, int64_t n) {
  if (dt == DType::BF16) {
    be.floatToBf16(f32, h, n);
    be.bf16ToFloat(h, f32, n);
  } else {
    be.floatToFp16(f32, h, n);
    be.fp16ToFloat(h, f32, n);
  }
}
}  // namespace

ParamArena::ParamArena(std::vector<core::TensorSpec> tensors, kernels::Backend* backend,
                       MemoryTracker* tracker, ArenaOptions options)
    : backend_(backend), options_(options) {
  if (options_.align < 1 || options_.tensorAlign < 1 || options_.align % options_.tensorAlign != 0)
    throw std::invalid_argument(
        "arena alignments must be >= 1, the group's a multiple of the tensor's");
  if (mixed() && options_.working != DType::BF16 && options_.working != DType::F16)
    throw std::invalid_argument("working precision must be fp32, bf16 or fp16");
  layout_ = ArenaLayout(std::move(tensors), options_);
  if (!mixed()) options_.gradWindow = options_.valueWindow = false;  // fp32: nothing to round to
  checkOptions();
  if (options_.partitionValues)
    ownedValues_ = core::zeroShard(layout_.size(), options_.partitionRanks, options_.partitionRank);
  // In 16-bit mode the fp32 buffers are compute copies (workspace); the stored weights and
  // gradients are the 16-bit ones.
  allocateValues(tracker, mixed() ? MemoryCategory::Workspace : MemoryCategory::Parameters);
  allocateGrads(tracker, mixed() ? MemoryCategory::Workspace : MemoryCategory::Gradients);
  if (mixed()) allocate16Bit(tracker);
  nf4_ = Nf4Store(backend_, tracker, layout_.nf4());
}

void ParamArena::checkOptions() const {
  if ((options_.partitionValues || options_.partitionGrads) &&
      (options_.gradWindow || options_.valueWindow || options_.partitionRanks < 2))
    throw std::invalid_argument("a ZeRO-partitioned arena needs ranks > 1 and no windows");
}

Tensor ParamArena::windowBuffer(MemoryCategory category, int64_t n, const char* what) {
  Tensor t(backend_, nullptr, category, DType::F32, {n});
  if (!backend_->discard(t.data(), size_t(n) * sizeof(float)))
    throw std::invalid_argument(std::string("16-bit ") + what +
                                " without an fp32 copy need a backend that can give pages back (" +
                                backend_->name() + " cannot)");
  return t;
}

Tensor ParamArena::partitionedBuffer(MemoryTracker* tracker, MemoryCategory category, DType dtype,
                                     int64_t n, const char* what) {
  Tensor t(backend_, nullptr, category, dtype, {n});
  if (!backend_->discard(t.data(), size_t(t.bytes())))
    throw std::invalid_argument(std::string("ZeRO-partitioned ") + what +
                                " need a backend that can give pages back (" + backend_->name() +
                                " cannot)");
  const auto [lo, hi] = core::zeroShard(n, options_.partitionRanks, options_.partitionRank);
  const int64_t eb = kernels::dtypeBits(dtype) / 8;
  backend_->commit(static_cast<char*>(t.data()) + lo * eb, size_t((hi - lo) * eb));
  ownedTracked_.emplace_back(tracker, category);
  ownedTracked_.back().add((hi - lo) * int64_t(kernels::dtypeBits(dtype) / 8));
  return t;
}

void ParamArena::allocateValues(MemoryTracker* tracker, MemoryCategory category) {
  if (options_.partitionValues) {
    values_ = partitionedBuffer(tracker, category, DType::F32, size(), "weights");
  } else if (options_.valueWindow) {
    values_ = windowBuffer(category, size(), "weights");
  } else {
    values_ = Tensor(backend_, tracker, category, DType::F32, {size()});
    values_.zero();
  }
}

void ParamArena::allocateGrads(MemoryTracker* tracker, MemoryCategory category) {
  if (options_.partitionGrads) {
    grads_ = partitionedBuffer(tracker, category, DType::F32, gradSize(), "gradients");
  } else if (options_.gradWindow) {
    grads_ = windowBuffer(category, gradSize(), "gradients");
  } else {
    grads_ = Tensor(backend_, tracker, category, DType::F32, {gradSize()});
    grads_.zero();
  }
}

void ParamArena::allocate16Bit(MemoryTracker* tracker) {
  const DType w = options_.working;
  if (options_.partitionValues) {
    values16_ = partitionedBuffer(tracker, MemoryCategory::Parameters, w, size(), "weights");
  } else {
    values16_ = Tensor(backend_, tracker, MemoryCategory::Parameters, w, {size()});
    values16_.zero();
  }
  if (options_.partitionGrads) {
    grads16_ = partitionedBuffer(tracker, MemoryCategory::Gradients, w, gradSize(), "gradients");
  } else {
    grads16_ = Tensor(backend_, tracker, MemoryCategory::Gradients, w, {gradSize()});
    grads16_.zero();
  }
  // The windows over them (the fp32 buffers are workspace under a 16-bit policy).
  const size_t groups = layout_.groups().size();
  if (options_.valueWindow)
    valueWindow_ = Fp32Window(backend_, w, values_.f32(), static_cast<uint16_t*>(values16_.data()),
                              groups, tracker, MemoryCategory::Workspace);
  if (options_.gradWindow)
    gradWindow_ = Fp32Window(backend_, w, grads_.f32(), static_cast<uint16_t*>(grads16_.data()),
                             groups, tracker, MemoryCategory::Workspace);
}

void ParamArena::copyTrainableTo(float* dst) const {
  if (options_.valueWindow) {
    for (const auto& p : params()) {
      if (!p.trainable()) continue;
      if (f32Valid(p))
        backend_->copyOnDevice(dst + p.gradOffset, values_.f32() + p.offset,
                               p.numel * int64_t(sizeof(float)));
      else
        valueWindow_.upcastInto(p.offset, p.numel, dst + p.gradOffset);
    }
    return;
  }
  if (allTrainable()) {
    backend_->copyOnDevice(dst, values_.f32(), size() * int64_t(sizeof(float)));
    return;
  }
  for (const auto& p : params())
    if (p.trainable())
      backend_->copyOnDevice(dst + p.gradOffset, values_.f32() + p.offset,
                             p.numel * int64_t(sizeof(float)));
}

void ParamArena::setWindowedWeightsFrom(const float* master) {
  // The values round straight from the master into the 16-bit weights; a group open for
  // compute is closed first (its copy was only read), one opened whole (an update in place)
  // takes its small tensors' values and is stored.
  const bool copy = master != values_.f32();  // else the copy was updated in place
  const auto& groups = layout_.groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    if (valueWindow_.level(g) == 1) closeValues(g);
    const ParamGroup& pg = groups[g];
    const bool whole = valueWindow_.level(g) == 2;
    for (size_t i = pg.firstParam; copy && i < pg.firstParam + pg.paramCount; ++i) {
      const ParamInfo& p = params()[i];
      if (!p.trainable()) continue;
      if (whole && !ownWindow(p))
        backend_->copyOnDevice(values_.f32() + p.offset, master + p.gradOffset,
                               p.numel * int64_t(sizeof(float)));
      else
        valueWindow_.storeFrom(master + p.gradOffset, p.offset, p.numel);
    }
    if (whole) storeValues(g);
  }
}

void ParamArena::setWeightsFrom(const float* master) {
  if (options_.valueWindow) {
    setWindowedWeightsFrom(master);
    if (onWeightsChanged) onWeightsChanged();
    return;
  }
  // Partitioned weights: only the shard is set; the rest is gathered when a block needs it.
  const auto [lo, hi] =
      options_.partitionValues ? ownedValues_ : std::pair<int64_t, int64_t>{0, size()};
  if (master != values_.f32()) {
    if (allTrainable()) {
      if (hi > lo)
        backend_->copyOnDevice(values_.f32() + lo, master + lo, (hi - lo) * int64_t(sizeof(float)));
    } else {
      for (const auto& p : params()) {
        const int64_t a = std::max(p.offset, lo), b = std::min(p.offset + p.numel, hi);
        if (p.trainable() && b > a)
          backend_->copyOnDevice(values_.f32() + a, master + p.gradOffset + (a - p.offset),
                                 (b - a) * int64_t(sizeof(float)));
      }
    }
  }
  if (mixed() && hi > lo)
    roundTrip(*backend_, options_.working, values_.f32() + lo,
              static_cast<uint16_t*>(values16_.data()) + lo, hi - lo);
  if (onWeightsChanged) onWeightsChanged();
}

void ParamArena::roundWeights() {
  setWeightsFrom(values_.f32());
}

void ParamArena::roundGrads() {
  if (!mixed() || options_.gradWindow) return;  // gradWindow: rounded as each group closed
  roundTrip(*backend_, options_.working, grads_.f32(), static_cast<uint16_t*>(grads16_.data()),
            gradSize());
}

void ParamArena::setWeightsRange(const float* src, int64_t lo, int64_t hi) {
  if (!allTrainable()) throw std::logic_error("setWeightsRange needs every tensor trainable");
  if (src != values_.f32() + lo)
    backend_->copyOnDevice(values_.f32() + lo, src, (hi - lo) * int64_t(sizeof(float)));
  roundWeightsRange(lo, hi);
}

void ParamArena::roundWeightsRange(int64_t lo, int64_t hi) {
  if (!mixed() || hi <= lo) return;
  auto* h = static_cast<uint16_t*>(values16_.data()) + lo;
  if (options_.working == DType::BF16)
    backend_->floatToBf16(values_.f32() + lo, h, hi - lo);
  else
    backend_->floatToFp16(values_.f32() + lo, h, hi - lo);
}

void ParamArena::finishWeightUpdate(int64_t lo, int64_t hi, bool notify) {
  if (hi < 0) hi = size();
  if (mixed() && hi > lo) {
    const auto* h = static_cast<const uint16_t*>(values16_.data()) + lo;
    if (options_.working == DType::BF16)
      backend_->bf16ToFloat(h, values_.f32() + lo, hi - lo);
    else
      backend_->fp16ToFloat(h, values_.f32() + lo, hi - lo);
  }
  if (notify && onWeightsChanged) onWeightsChanged();
}

void ParamArena::roundGradsRange(int64_t lo, int64_t hi) {
  if (!mixed() || options_.gradWindow || hi <= lo) return;
  roundTrip(*backend_, options_.working, grads_.f32() + lo,
            static_cast<uint16_t*>(grads16_.data()) + lo, hi - lo);
}

void ParamArena::zeroGrad() {
  if (!options_.gradWindow) {
    grads_.zero();
    return;
  }
  for (size_t g = 0; g < groups().size(); ++g) closeGrads(g, false);
  grads16_.zero();
  gradScale_ = 1.f;
}

double ParamArena::gradSumSquares() {
  if (!options_.gradWindow) return backend_->sumSquares(grads_.f32(), gradSize());
  // Every window is closed after backward, so the 16-bit buffer holds all the gradients (its
  // padding zero): one call over it, where opening each tensor's fp32 window took a conversion
  // and, on a GPU, a synchronization per tensor. The pending factor applies to the sum.
  const double ss = backend_->sumSquaresHalf(static_cast<const uint16_t*>(grads16_.data()),
                                             gradSize(), options_.working == DType::F16);
  return ss * double(gradScale_) * double(gradScale_);
}

int64_t ParamArena::gradNonFinite() {
  if (!options_.gradWindow) return backend_->countNonFinite(grads_.f32(), gradSize());
  // As gradSumSquares: the 16-bit buffer in one call (a pending factor is finite, so it
  // changes no count).
  return backend_->countNonFiniteHalf(static_cast<const uint16_t*>(grads16_.data()), gradSize(),
                                      options_.working == DType::F16);
}

void ParamArena::scaleGrads(float s) {
  if (options_.gradWindow)
    gradScale_ *= s;
  else
    backend_->scale(grads_.f32(), gradSize(), s);
}

}  // namespace ts::engine
