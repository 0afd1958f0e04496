// ParamArena's host I/O: how initializers, loaders, exporters and checkpoints read and write
// the weights (and read the gradients) in every mode: whole, ZeRO-partitioned, or windowed
// over 16-bit storage.
#include <algorithm>
#include <cstring>

#include "trainscope/engine/params/ParamArena.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::engine {

namespace {
// Working 16-bit <-> fp32 on host memory: the CPU kernels, which round as the backends do.
void hostToF32(DType working, const uint16_t* h, float* f, int64_t n) {
  if (working == DType::BF16)
    kernels::cpu::bf16ToFloat(h, f, n);
  else
    kernels::cpu::fp16ToFloat(h, f, n);
}

void hostFromF32(DType working, const float* f, uint16_t* h, int64_t n) {
  if (working == DType::BF16)
    kernels::cpu::floatToBf16(f, h, n);
  else
    kernels::cpu::floatToFp16(f, h, n);
}
}  // namespace

std::vector<float> ParamArena::hostValues(const ParamInfo& p) const {
  if (p.quantized()) return dequantizedToHost(p);
  std::vector<float> out(size_t(p.numel));
  valueBytesToHost(p, reinterpret_cast<char*>(out.data()), 0, p.numel * int64_t(sizeof(float)));
  return out;
}

void ParamArena::valuesToHost(float* dst) const {
  if (options_.partitionValues) {  // only the shard is here (the rest reads as zero)
    const auto [lo, hi] = ownedValues_;
    std::fill(dst, dst + size(), 0.f);
    if (hi > lo)
      backend_->copyToHost(dst + lo, values_.f32() + lo, size_t(hi - lo) * sizeof(float));
    return;
  }
  if (!options_.valueWindow) {
    backend_->copyToHost(dst, values_.data(), size_t(size()) * sizeof(float));
    return;
  }
  std::vector<uint16_t> h;
  for (const ParamGroup& pg : groups()) {
    // The 16-bit weights are the values (an open copy only repeats them, or holds an
    // update not yet stored: storeValues first).
    h.resize(size_t(pg.numel));
    backend_->copyToHost(h.data(), static_cast<const uint16_t*>(values16_.data()) + pg.offset,
                         h.size() * sizeof(uint16_t));
    hostToF32(options_.working, h.data(), dst + pg.offset, pg.numel);
  }
}

void ParamArena::setValuesFromHost(const float* src) {
  if (options_.partitionValues) {  // a load writes only the shard: no other page is touched
    setOwnedValuesFromHost(src, 0, size());
    return;
  }
  if (!options_.valueWindow) {
    backend_->copyToDevice(values_.data(), src, size_t(size()) * sizeof(float));
    return;
  }
  std::vector<uint16_t> h;
  for (size_t g = 0; g < groups().size(); ++g) {
    const ParamGroup& pg = groups()[g];
    closeValues(g);
    h.resize(size_t(pg.numel));
    hostFromF32(options_.working, src + pg.offset, h.data(), pg.numel);
    backend_->copyToDevice(static_cast<uint16_t*>(values16_.data()) + pg.offset, h.data(),
                           h.size() * sizeof(uint16_t));
  }
}

void ParamArena::setOwnedValuesFromHost(const float* src, int64_t offset, int64_t n) {
  const auto [lo, hi] = ownedValues_;
  const int64_t a = std::max(offset, lo), b = std::min(offset + n, hi);
  if (b > a)
    backend_->copyToDevice(values_.f32() + a, src + (a - offset), size_t(b - a) * sizeof(float));
}

void ParamArena::trainableRangeToHost(float* dst, int64_t lo, int64_t hi) const {
  std::fill(dst, dst + std::max<int64_t>(0, hi - lo), 0.f);
  for (const auto& p : params()) {
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
  hostToF32(options_.working, h.data(), f.data(), int64_t(h.size()));
  std::memcpy(dst, reinterpret_cast<const char*>(f.data()) + (off - first * 4), size_t(n));
}

std::vector<float> ParamArena::gradsToHost() {
  std::vector<float> out(size_t(gradSize()), 0.f);
  forEachGradTensor([&](const ParamInfo& p) {
    backend_->copyToHost(out.data() + p.gradOffset, grad(p), size_t(p.numel) * sizeof(float));
  });
  return out;
}

}  // namespace ts::engine
