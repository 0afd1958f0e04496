#include "trainscope/engine/params/ParamArena.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/kernels/Nf4.h"
#include "trainscope/kernels/Numeric.h"

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
  if (options_.align < 1 || options_.tensorAlign < 1 || options_.align % options_.tensorAlign != 0)
    throw std::invalid_argument(
        "arena alignments must be >= 1, the group's a multiple of the tensor's");
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
      if (t.trainable) off = roundUp(off, options_.tensorAlign);
      p.offset = off;
      off += p.numel;
    }
    numParams_ += p.numel;
    if (t.trainable) {
      goff = roundUp(goff, options_.tensorAlign);
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
  if (!mixed()) options_.gradWindow = options_.valueWindow = false;  // fp32: nothing to round to
  // A windowed fp32 buffer: untracked (its resident groups are counted as they open), with no
  // resident page yet.
  auto windowBuffer = [&](MemoryCategory cat, int64_t n, const char* what) {
    Tensor t(backend_, nullptr, cat, DType::F32, {n});
    if (!backend_->discard(t.data(), size_t(n) * sizeof(float)))
      throw std::invalid_argument(
          std::string("16-bit ") + what +
          " without an fp32 copy need a backend that can give pages back (" + backend_->name() +
          " cannot)");
    return t;
  };
  // A ZeRO-partitioned buffer: untracked and without a resident page (zero when read); this
  // rank's shard is counted.
  if ((options_.partitionValues || options_.partitionGrads) &&
      (options_.gradWindow || options_.valueWindow || options_.partitionRanks < 2))
    throw std::invalid_argument("a ZeRO-partitioned arena needs ranks > 1 and no windows");
  auto shardOf = [&](int64_t n) {
    return core::zeroShard(n, options_.partitionRanks, options_.partitionRank);
  };
  if (options_.partitionValues) ownedValues_ = shardOf(size_);
  auto partitioned = [&](MemoryCategory cat, DType dt, int64_t n, const char* what) {
    Tensor t(backend_, nullptr, cat, dt, {n});
    if (!backend_->discard(t.data(), size_t(t.bytes())))
      throw std::invalid_argument(std::string("ZeRO-partitioned ") + what +
                                  " need a backend that can give pages back (" + backend_->name() +
                                  " cannot)");
    const auto [lo, hi] = shardOf(n);
    const int64_t eb = kernels::dtypeBits(dt) / 8;
    backend_->commit(static_cast<char*>(t.data()) + lo * eb, size_t((hi - lo) * eb));
    ownedTracked_.emplace_back(tracker, cat);
    ownedTracked_.back().add((hi - lo) * int64_t(kernels::dtypeBits(dt) / 8));
    return t;
  };
  if (options_.partitionValues) {
    values_ = partitioned(pc, DType::F32, size_, "weights");
  } else if (options_.valueWindow) {
    values_ = windowBuffer(pc, size_, "weights");
    valueOpen_.assign(groups_.size(), 0);
    openElems_.assign(groups_.size(), 0);
    valueTracked_ = TrackedBytes(tracker, pc);
  } else {
    values_ = Tensor(backend_, tracker, pc, DType::F32, {size_});
    values_.zero();
  }
  if (options_.partitionGrads) {
    grads_ = partitioned(gc, DType::F32, gradSize_, "gradients");
  } else if (options_.gradWindow) {
    grads_ = windowBuffer(gc, gradSize_, "gradients");
    gradOpen_.assign(groups_.size(), 0);
    gradOpenElems_.assign(groups_.size(), 0);
    gradTracked_ = TrackedBytes(tracker, gc);
  } else {
    grads_ = Tensor(backend_, tracker, gc, DType::F32, {gradSize_});
    grads_.zero();
  }
  if (mixed()) {
    if (options_.partitionValues) {
      values16_ = partitioned(MemoryCategory::Parameters, options_.working, size_, "weights");
    } else {
      values16_ = Tensor(backend_, tracker, MemoryCategory::Parameters, options_.working, {size_});
      values16_.zero();
    }
    if (options_.partitionGrads) {
      grads16_ = partitioned(MemoryCategory::Gradients, options_.working, gradSize_, "gradients");
    } else {
      grads16_ =
          Tensor(backend_, tracker, MemoryCategory::Gradients, options_.working, {gradSize_});
      grads16_.zero();
    }
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
  valueBytesToHost(p, reinterpret_cast<char*>(out.data()), 0, p.numel * int64_t(sizeof(float)));
  return out;
}

size_t ParamArena::groupOf(const ParamInfo& p) const {
  for (size_t g = 0; g < groups_.size(); ++g)
    if (p.offset >= groups_[g].offset && p.offset < groups_[g].offset + groups_[g].numel) return g;
  throw std::logic_error(p.name + " is in no group of the arena");
}

bool ParamArena::f32Valid(const ParamInfo& p) const {
  if (!options_.valueWindow || p.offset < 0) return true;
  if (ownWindow(p)) {
    for (const auto& [off, n] : openWeightValues_)
      if (p.offset >= off && p.offset + p.numel <= off + n) return true;
    return false;
  }
  return valueOpen_[groupOf(p)] != 0;
}

void ParamArena::discardInner(float* p, int64_t n) {
  // 4 KiB steps: on a larger page size the backend zeroes the partial pages it is given, which
  // then still lie inside this range.
  constexpr uintptr_t kStep = 4096;
  const auto a = reinterpret_cast<uintptr_t>(p), e = a + uintptr_t(n) * sizeof(float);
  const uintptr_t lo = (a + kStep - 1) / kStep * kStep, hi = e / kStep * kStep;
  if (hi > lo) backend_->discard(reinterpret_cast<void*>(lo), hi - lo);
}

void ParamArena::openWeightValues(const ParamInfo& w) {
  if (!options_.valueWindow || !ownWindow(w)) return;
  backend_->commit(values_.f32() + w.offset, size_t(w.numel) * sizeof(float));
  toF32(static_cast<const uint16_t*>(values16_.data()) + w.offset, values_.f32() + w.offset,
        w.numel);
  openWeightValues_.push_back({w.offset, w.numel});
  valueTracked_.add(4 * w.numel);
}

void ParamArena::closeWeightValues(const ParamInfo& w) {
  if (!options_.valueWindow || !ownWindow(w)) return;
  const auto it = std::find(openWeightValues_.begin(), openWeightValues_.end(),
                            std::pair<int64_t, int64_t>{w.offset, w.numel});
  if (it == openWeightValues_.end()) throw std::logic_error(w.name + ": values not open");
  openWeightValues_.erase(it);
  discardInner(values_.f32() + w.offset, w.numel);
  valueTracked_.add(-4 * w.numel);
}

void ParamArena::storeWeightValues(const ParamInfo& w) {
  if (!options_.valueWindow || !ownWindow(w)) return;
  fromF32(values_.f32() + w.offset, static_cast<uint16_t*>(values16_.data()) + w.offset, w.numel);
  closeWeightValues(w);
}

void ParamArena::openWeightGrads(const ParamInfo& w, float scale) {
  if (!options_.gradWindow || !ownWindow(w) || !w.trainable()) return;
  float* f = grads_.f32() + w.gradOffset;
  backend_->commit(f, size_t(w.numel) * sizeof(float));
  // Upcast even from zero 16-bit gradients: see openGrads.
  toF32(static_cast<const uint16_t*>(grads16_.data()) + w.gradOffset, f, w.numel);
  if (scale != 1.f) backend_->scale(f, w.numel, scale);
  openWeightGrads_.push_back({w.gradOffset, w.numel});
  gradTracked_.add(4 * w.numel);
}

void ParamArena::closeWeightGrads(const ParamInfo& w, bool store) {
  if (!options_.gradWindow || !ownWindow(w) || !w.trainable()) return;
  const auto it = std::find(openWeightGrads_.begin(), openWeightGrads_.end(),
                            std::pair<int64_t, int64_t>{w.gradOffset, w.numel});
  if (it == openWeightGrads_.end()) throw std::logic_error(w.name + ": gradients not open");
  openWeightGrads_.erase(it);
  float* f = grads_.f32() + w.gradOffset;
  if (store) fromF32(f, static_cast<uint16_t*>(grads16_.data()) + w.gradOffset, w.numel);
  discardInner(f, w.numel);
  gradTracked_.add(-4 * w.numel);
}

void ParamArena::toF32(const uint16_t* h, float* f, int64_t n) const {
  if (options_.working == DType::BF16)
    backend_->bf16ToFloat(h, f, n);
  else
    backend_->fp16ToFloat(h, f, n);
}

void ParamArena::fromF32(const float* f, uint16_t* h, int64_t n) const {
  if (options_.working == DType::BF16)
    backend_->floatToBf16(f, h, n);
  else
    backend_->floatToFp16(f, h, n);
}

// Host memory (loaders, exporters): the CPU kernels, which round as the backends do.
void ParamArena::hostToF32(const uint16_t* h, float* f, int64_t n) const {
  if (options_.working == DType::BF16)
    kernels::cpu::bf16ToFloat(h, f, n);
  else
    kernels::cpu::fp16ToFloat(h, f, n);
}

void ParamArena::hostFromF32(const float* f, uint16_t* h, int64_t n) const {
  if (options_.working == DType::BF16)
    kernels::cpu::floatToBf16(f, h, n);
  else
    kernels::cpu::floatToFp16(f, h, n);
}

void ParamArena::roundTripRange(int64_t lo, int64_t n) {
  if (n > 0)
    roundTrip(*backend_, options_.working, values_.f32() + lo,
              static_cast<uint16_t*>(values16_.data()) + lo, n);
}

void ParamArena::openBlockValues(int l) {
  if (!options_.valueWindow) return;
  const int g = groupOfBlock(l);
  if (g >= 0) openValues(size_t(g), false);
}

void ParamArena::closeBlockValues(int l) {
  if (!options_.valueWindow) return;
  const int g = groupOfBlock(l);
  if (g >= 0) closeValues(size_t(g));
}

void ParamArena::openValues(size_t g, bool full) {
  if (!options_.valueWindow || valueOpen_[g] >= (full ? 2 : 1)) return;
  const ParamGroup& pg = groups_[g];
  const auto* h = static_cast<const uint16_t*>(values16_.data());
  float* f = values_.f32();
  closeValues(g);
  // The linear weights have windows of their own (openWeightValues).
  int64_t elems = 0;
  for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params_[i];
    if (p.offset < 0 || ownWindow(p)) continue;
    backend_->commit(f + p.offset, size_t(p.numel) * sizeof(float));
    toF32(h + p.offset, f + p.offset, p.numel);
    elems += p.numel;
  }
  valueOpen_[g] = full ? 2 : 1;
  valueTracked_.add(4 * elems);
  openElems_[g] = elems;
}

void ParamArena::closeValues(size_t g) {
  if (!options_.valueWindow || !valueOpen_[g]) return;
  const ParamGroup& pg = groups_[g];
  backend_->discard(values_.f32() + pg.offset, size_t(pg.numel) * sizeof(float));
  valueTracked_.add(-4 * openElems_[g]);
  openElems_[g] = 0;
  valueOpen_[g] = 0;
}

void ParamArena::storeValues(size_t g) {
  if (!options_.valueWindow || valueOpen_[g] != 2) return;
  const ParamGroup& pg = groups_[g];
  for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params_[i];
    if (p.offset >= 0 && !ownWindow(p)) roundTripRange(p.offset, p.numel);
  }
  closeValues(g);
}

void ParamArena::valuesToHost(float* dst) const {
  if (options_.partitionValues) {  // only the shard is here (the rest reads as zero)
    const auto [lo, hi] = ownedValues_;
    std::fill(dst, dst + size_, 0.f);
    if (hi > lo)
      backend_->copyToHost(dst + lo, values_.f32() + lo, size_t(hi - lo) * sizeof(float));
    return;
  }
  if (!options_.valueWindow) {
    backend_->copyToHost(dst, values_.data(), size_t(size_) * sizeof(float));
    return;
  }
  std::vector<uint16_t> h;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& pg = groups_[g];
    // The 16-bit weights are the values (an open copy only repeats them, or holds an
    // update not yet stored: storeValues first).
    h.resize(size_t(pg.numel));
    backend_->copyToHost(h.data(), static_cast<const uint16_t*>(values16_.data()) + pg.offset,
                         h.size() * sizeof(uint16_t));
    hostToF32(h.data(), dst + pg.offset, pg.numel);
  }
}

void ParamArena::setValuesFromHost(const float* src) {
  if (options_.partitionValues) {  // a load writes only the shard: no other page is touched
    setOwnedValuesFromHost(src, 0, size_);
    return;
  }
  if (!options_.valueWindow) {
    backend_->copyToDevice(values_.data(), src, size_t(size_) * sizeof(float));
    return;
  }
  std::vector<uint16_t> h;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& pg = groups_[g];
    closeValues(g);
    h.resize(size_t(pg.numel));
    hostFromF32(src + pg.offset, h.data(), pg.numel);
    backend_->copyToDevice(static_cast<uint16_t*>(values16_.data()) + pg.offset, h.data(),
                           h.size() * sizeof(uint16_t));
  }
}

void ParamArena::trainableRangeToHost(float* dst, int64_t lo, int64_t hi) const {
  std::fill(dst, dst + std::max<int64_t>(0, hi - lo), 0.f);
  for (const auto& p : params_) {
    if (!p.trainable()) continue;
    const int64_t a = std::max(p.gradOffset, lo), b = std::min(p.gradOffset + p.numel, hi);
    if (b > a)
      valueBytesToHost(p, reinterpret_cast<char*>(dst + (a - lo)), (a - p.gradOffset) * 4,
                       (b - a) * 4);
  }
}

void ParamArena::valueBytesToHost(const ParamInfo& p, char* dst, int64_t off, int64_t n) const {
  if (n <= 0) return;
  if (f32Valid(p)) {
    backend_->copyToHost(dst, reinterpret_cast<const char*>(values_.f32() + p.offset) + off,
                         size_t(n));
    return;
  }
  const int64_t first = off / 4, last = (off + n + 3) / 4;
  std::vector<uint16_t> h(size_t(last - first));
  std::vector<float> f(h.size());
  backend_->copyToHost(h.data(), static_cast<const uint16_t*>(values16_.data()) + p.offset + first,
                       h.size() * sizeof(uint16_t));
  hostToF32(h.data(), f.data(), int64_t(h.size()));
  std::memcpy(dst, reinterpret_cast<const char*>(f.data()) + (off - first * 4), size_t(n));
}

const ParamInfo* ParamArena::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void ParamArena::copyTrainableTo(float* dst) const {
  if (options_.valueWindow) {
    for (const auto& p : params_) {
      if (!p.trainable()) continue;
      if (f32Valid(p))
        backend_->copyOnDevice(dst + p.gradOffset, values_.f32() + p.offset,
                               p.numel * int64_t(sizeof(float)));
      else
        toF32(static_cast<const uint16_t*>(values16_.data()) + p.offset, dst + p.gradOffset,
              p.numel);
    }
    return;
  }
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
  if (options_.valueWindow) {
    // The values round straight from the master into the 16-bit weights; a group open for
    // compute is closed first (its copy was only read), one opened whole (an update in place)
    // takes its small tensors' values and is stored.
    const bool copy = master != values_.f32();  // else the copy was updated in place
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (valueOpen_[g] == 1) closeValues(g);
      const ParamGroup& pg = groups_[g];
      const bool whole = valueOpen_[g] == 2;
      for (size_t i = pg.firstParam; copy && i < pg.firstParam + pg.paramCount; ++i) {
        const ParamInfo& p = params_[i];
        if (!p.trainable()) continue;
        if (whole && !ownWindow(p))
          backend_->copyOnDevice(values_.f32() + p.offset, master + p.gradOffset,
                                 p.numel * int64_t(sizeof(float)));
        else
          fromF32(master + p.gradOffset, static_cast<uint16_t*>(values16_.data()) + p.offset,
                  p.numel);
      }
      if (whole) storeValues(g);
    }
    if (onWeightsChanged) onWeightsChanged();
    return;
  }
  // Partitioned weights: only the shard is set; the rest is gathered when a block needs it.
  const auto [lo, hi] =
      options_.partitionValues ? ownedValues_ : std::pair<int64_t, int64_t>{0, size_};
  if (master != values_.f32()) {
    if (allTrainable()) {
      if (hi > lo)
        backend_->copyOnDevice(values_.f32() + lo, master + lo, (hi - lo) * int64_t(sizeof(float)));
    } else {
      for (const auto& p : params_) {
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

void ParamArena::setOwnedValuesFromHost(const float* src, int64_t offset, int64_t n) {
  const auto [lo, hi] = ownedValues_;
  const int64_t a = std::max(offset, lo), b = std::min(offset + n, hi);
  if (b > a)
    backend_->copyToDevice(values_.f32() + a, src + (a - offset), size_t(b - a) * sizeof(float));
}

void ParamArena::roundGrads() {
  if (!mixed() || options_.gradWindow) return;  // gradWindow: rounded as each group closed
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
  if (!mixed() || options_.gradWindow || hi <= lo) return;
  roundTrip(*backend_, options_.working, grads_.f32() + lo,
            static_cast<uint16_t*>(grads16_.data()) + lo, hi - lo);
}

void ParamArena::zeroGrad() {
  if (!options_.gradWindow) {
    grads_.zero();
    return;
  }
  for (size_t g = 0; g < groups_.size(); ++g) closeGrads(g, false);
  grads16_.zero();
  gradScale_ = 1.f;
}

void ParamArena::openGrads(size_t g, float scale) {
  if (!options_.gradWindow || gradOpen_.at(g)) return;
  const ParamGroup& pg = groups_[g];
  if (pg.gradNumel == 0) return;
  gradOpen_[g] = 1;
  // Upcast even when the 16-bit gradients are all zero (after zeroGrad): writing the pages here
  // faults them in, which inside the threaded backward GEMMs cost a third of bf16's tokens/s on
  // gpt-d512 (measured: 0.53x fp32 instead of 0.80x). The linear weights have windows of their
  // own (openWeightGrads).
  const auto* h = static_cast<const uint16_t*>(grads16_.data());
  int64_t elems = 0;
  for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params_[i];
    if (!p.trainable() || ownWindow(p)) continue;
    float* f = grads_.f32() + p.gradOffset;
    backend_->commit(f, size_t(p.numel) * sizeof(float));
    toF32(h + p.gradOffset, f, p.numel);
    if (scale != 1.f) backend_->scale(f, p.numel, scale);
    elems += p.numel;
  }
  gradOpenElems_[g] = elems;
  gradTracked_.add(elems * 4);
}

void ParamArena::closeGrads(size_t g, bool store) {
  if (!options_.gradWindow || !gradOpen_.at(g)) return;
  const ParamGroup& pg = groups_[g];
  float* f = grads_.f32() + pg.gradOffset;
  for (size_t i = pg.firstParam; store && i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params_[i];
    if (p.trainable() && !ownWindow(p))
      fromF32(grads_.f32() + p.gradOffset, static_cast<uint16_t*>(grads16_.data()) + p.gradOffset,
              p.numel);
  }
  // Whole pages go back; the partial ones at the edges (shared with the neighbouring groups)
  // are zeroed, not released: the range reads as zero until the next open rewrites it.
  backend_->discard(f, size_t(pg.gradNumel) * sizeof(float));
  gradOpen_[g] = 0;
  gradTracked_.add(-gradOpenElems_[g] * 4);
  gradOpenElems_[g] = 0;
}

std::vector<size_t> ParamArena::outerGroups() const {
  std::vector<size_t> out;
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].block < 0) out.push_back(g);
  return out;
}

int ParamArena::groupOfBlock(int l) const {
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].block == l) return static_cast<int>(g);
  return -1;
}

double ParamArena::gradSumSquares() {
  if (!options_.gradWindow) return backend_->sumSquares(grads_.f32(), gradSize_);
  // Every window is closed after backward, so the 16-bit buffer holds all the gradients (its
  // padding zero): one call over it, where opening each tensor's fp32 window took a conversion
  // and, on a GPU, a synchronization per tensor. The pending factor applies to the sum.
  const double ss = backend_->sumSquaresHalf(static_cast<const uint16_t*>(grads16_.data()),
                                             gradSize_, options_.working == DType::F16);
  return ss * double(gradScale_) * double(gradScale_);
}

int64_t ParamArena::gradNonFinite() {
  if (!options_.gradWindow) return backend_->countNonFinite(grads_.f32(), gradSize_);
  // As gradSumSquares: the 16-bit buffer in one call (a pending factor is finite, so it
  // changes no count).
  return backend_->countNonFiniteHalf(static_cast<const uint16_t*>(grads16_.data()), gradSize_,
                                      options_.working == DType::F16);
}

void ParamArena::scaleGrads(float s) {
  if (options_.gradWindow)
    gradScale_ *= s;
  else
    backend_->scale(grads_.f32(), gradSize_, s);
}

std::vector<float> ParamArena::gradsToHost() {
  std::vector<float> out(size_t(gradSize_), 0.f);
  forEachGradTensor([&](const ParamInfo& p) {
    backend_->copyToHost(out.data() + p.gradOffset, grad(p), size_t(p.numel) * sizeof(float));
  });
  return out;
}

}  // namespace ts::engine
