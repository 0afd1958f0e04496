#include "trainscope/engine/ParamArena.h"

#include <stdexcept>

#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/kernels/Nf4.h"

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
  int64_t qPacked = 0, qCodes = 0, qScales = 0;  // NF4 buffers
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
    if (options_.nf4FrozenLinears && !t.trainable && t.block >= 0 &&
        t.role == core::TensorRole::LinearWeight) {
      const kernels::Nf4Layout q{p.numel};
      p.offset = -1;
      p.nf4 = {qPacked, qCodes, qScales};
      qPacked += q.packedBytes();
      qCodes += q.blocks();
      qScales += q.scaleCount();
    } else {
      p.offset = off;
      off += p.numel;
    }
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
  if (options_.padTo > 1 && !groups_.empty()) {
    auto& g = groups_.back();
    off = roundUp(off, options_.padTo);
    goff = roundUp(goff, options_.padTo);
    g.numel = off - g.offset;
    g.gradNumel = goff - g.gradOffset;
  }
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
  if (qPacked > 0) {
    nf4Packed_ = Tensor(backend_, tracker, MemoryCategory::Parameters, DType::I8, {qPacked});
    nf4Codes_ = Tensor(backend_, tracker, MemoryCategory::Parameters, DType::I8, {qCodes});
    nf4Scales_ = Tensor(backend_, tracker, MemoryCategory::Parameters, DType::F32, {qScales});
    nf4Packed_.zero();
    nf4Codes_.zero();
    nf4Scales_.zero();
    // The 256-entry map: 1 KiB, uncounted (a constant, as bitsandbytes does not count it).
    const auto map = kernels::dynamicMap(true);
    nf4Map_ = Tensor(backend_, nullptr, MemoryCategory::Workspace, DType::F32, {256});
    nf4Map_.copyFromHost(map.data());
  }
}

int64_t ParamArena::nf4Bytes() const {
  return nf4Packed_.bytes() + nf4Codes_.bytes() + nf4Scales_.bytes();
}

void ParamArena::setQuantized(const ParamInfo& p, const float* host) {
  if (!p.quantized()) throw std::logic_error(p.name + " is not stored as NF4");
  const kernels::Nf4Layout q{p.numel};
  std::vector<uint8_t> packed(size_t(q.packedBytes())), codes(size_t(q.blocks()));
  std::vector<float> scales(size_t(q.scaleCount()));
  kernels::quantizeNf4(host, p.numel, packed.data(), codes.data(), scales.data());
  backend_->copyToDevice(static_cast<uint8_t*>(nf4Packed_.data()) + p.nf4.packed, packed.data(),
                         packed.size());
  backend_->copyToDevice(static_cast<uint8_t*>(nf4Codes_.data()) + p.nf4.codes, codes.data(),
                         codes.size());
  backend_->copyToDevice(nf4Scales_.f32() + p.nf4.scales, scales.data(),
                         scales.size() * sizeof(float));
}

std::vector<float> ParamArena::dequantizedToHost(const ParamInfo& p) const {
  if (!p.quantized()) throw std::logic_error(p.name + " is not stored as NF4");
  const kernels::Nf4Layout q{p.numel};
  std::vector<uint8_t> packed(size_t(q.packedBytes())), codes(size_t(q.blocks()));
  std::vector<float> scales(size_t(q.scaleCount())), map(256), out(size_t(p.numel));
  backend_->copyToHost(packed.data(), static_cast<const uint8_t*>(nf4Packed_.data()) + p.nf4.packed,
                       packed.size());
  backend_->copyToHost(codes.data(), static_cast<const uint8_t*>(nf4Codes_.data()) + p.nf4.codes,
                       codes.size());
  backend_->copyToHost(scales.data(), nf4Scales_.f32() + p.nf4.scales,
                       scales.size() * sizeof(float));
  nf4Map_.copyToHost(map.data());
  for (int64_t i = 0; i < p.numel; ++i)
    out[size_t(i)] = kernels::nf4Dequant(packed.data(), codes.data(), scales.data(), map.data(), i);
  return out;
}

void ParamArena::dequantizeBf16(const ParamInfo& p, uint16_t* dst) const {
  backend_->dequantizeNf4Bf16(dst, static_cast<const uint8_t*>(nf4Packed_.data()) + p.nf4.packed,
                              static_cast<const uint8_t*>(nf4Codes_.data()) + p.nf4.codes,
                              nf4Scales_.f32() + p.nf4.scales, nf4Map_.f32(), p.numel);
}

std::vector<float> ParamArena::hostValues(const ParamInfo& p) const {
  if (p.quantized()) return dequantizedToHost(p);
  std::vector<float> out(size_t(p.numel));
  backend_->copyToHost(out.data(), values_.f32() + p.offset, out.size() * sizeof(float));
  return out;
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
  if (hi < 0) hi = size_;
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
  if (!mixed() || hi <= lo) return;
  roundTrip(*backend_, options_.working, grads_.f32() + lo,
            static_cast<uint16_t*>(grads16_.data()) + lo, hi - lo);
}

void ParamArena::zeroGrad() {
  grads_.zero();
}

}  // namespace ts::engine
