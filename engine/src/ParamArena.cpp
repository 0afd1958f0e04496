#include "trainscope/engine/ParamArena.h"

#include <stdexcept>

namespace ts::engine {

using core::MemoryCategory;

namespace {
int64_t roundUp(int64_t n, int64_t a) {
  return a > 1 ? (n + a - 1) / a * a : n;
}
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
  if (options_.align < 1) throw std::invalid_argument("arena alignment must be >= 1");
  if (mixed() && options_.working != DType::BF16 && options_.working != DType::F16)
    throw std::invalid_argument("working precision must be fp32, bf16 or fp16");
  // Groups: runs of consecutive tensors of the same block (the description stores block by
  // block, so each block is one run; the embeddings and the head are runs of block -1).
  int64_t off = 0, goff = 0;
  auto closeGroup = [&] {  // pad to the alignment; the padding belongs to the group it ends
    if (groups_.empty()) return;
    auto& g = groups_.back();
    off = roundUp(off, options_.align);
    goff = roundUp(goff, options_.align);
    g.numel = off - g.offset;
    g.gradNumel = goff - g.gradOffset;
  };
  for (auto& t : tensors) {
    if (groups_.empty() || groups_.back().block != t.block) {
      closeGroup();
      ParamGroup g;
      g.block = t.block;
      g.firstParam = params_.size();
      g.offset = off;
      g.gradOffset = goff;
      groups_.push_back(g);
    }
    ParamInfo p;
    p.name = t.name;
    p.shape = t.shape;
    p.numel = t.numel();
    p.decay = t.decay();
    p.offset = off;
    off += p.numel;
    numParams_ += p.numel;
    if (t.trainable) {
      p.gradOffset = goff;
      goff += p.numel;
      trainable_ += p.numel;
    }
    p.spec = std::move(t);
    params_.push_back(std::move(p));
    ++groups_.back().paramCount;
  }
  closeGroup();
  size_ = off;
  gradSize_ = goff;
  // In 16-bit mode the fp32 buffers are compute copies (workspace); the stored weights and
  // gradients are the 16-bit ones.
  const auto pc = mixed() ? MemoryCategory::Workspace : MemoryCategory::Parameters;
  const auto gc = mixed() ? MemoryCategory::Workspace : MemoryCategory::Gradients;
  values_ = Tensor(backend_, tracker, pc, DType::F32, {size_});
  grads_ = Tensor(backend_, tracker, gc, DType::F32, {gradSize_});
  values_.zero();
  grads_.zero();
  if (mixed()) {
    values16_ = Tensor(backend_, tracker, MemoryCategory::Parameters, options_.working, {size_});
    grads16_ = Tensor(backend_, tracker, MemoryCategory::Gradients, options_.working, {gradSize_});
    values16_.zero();
    grads16_.zero();
  }
}

const ParamInfo* ParamArena::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void ParamArena::copyTrainableTo(float* dst) const {
  if (allTrainable()) {
    backend_->copyOnDevice(dst, values_.f32(), size_ * int64_t(sizeof(float)));
    return;
  }
  for (const auto& p : params_)
    if (p.trainable())
      backend_->copyOnDevice(dst + p.gradOffset, values_.f32() + p.offset,
                             p.numel * int64_t(sizeof(float)));
}

void ParamArena::setWeightsFrom(const float* master) {
  if (master != values_.f32()) {
    if (allTrainable()) {
      backend_->copyOnDevice(values_.f32(), master, size_ * int64_t(sizeof(float)));
    } else {
      for (const auto& p : params_)
        if (p.trainable())
          backend_->copyOnDevice(values_.f32() + p.offset, master + p.gradOffset,
                                 p.numel * int64_t(sizeof(float)));
    }
  }
  if (mixed())
    roundTrip(*backend_, options_.working, values_.f32(), static_cast<uint16_t*>(values16_.data()),
              size_);
  if (onWeightsChanged) onWeightsChanged();
}

void ParamArena::roundWeights() {
  setWeightsFrom(values_.f32());
}

void ParamArena::roundGrads() {
  if (!mixed()) return;
  roundTrip(*backend_, options_.working, grads_.f32(), static_cast<uint16_t*>(grads16_.data()),
            gradSize_);
}

void ParamArena::zeroGrad() {
  grads_.zero();
}

}  // namespace ts::engine
