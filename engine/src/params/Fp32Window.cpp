#include "trainscope/engine/params/Fp32Window.h"

#include <algorithm>

namespace ts::engine {

Fp32Window::Fp32Window(kernels::Backend* backend, DType working, float* f32, uint16_t* h16,
                       size_t groups, MemoryTracker* tracker, core::MemoryCategory category)
    : backend_(backend),
      working_(working),
      f32_(f32),
      h16_(h16),
      open_(groups, 0),
      openElems_(groups, 0),
      tracked_(tracker, category) {}

void Fp32Window::toF32(const uint16_t* h, float* f, int64_t n) const {
  if (working_ == DType::BF16)
    backend_->bf16ToFloat(h, f, n);
  else
    backend_->fp16ToFloat(h, f, n);
}

void Fp32Window::fromF32(const float* f, uint16_t* h, int64_t n) const {
  if (working_ == DType::BF16)
    backend_->floatToBf16(f, h, n);
  else
    backend_->floatToFp16(f, h, n);
}

void Fp32Window::upcast(int64_t off, int64_t n, float scale) {
  float* f = f32_ + off;
  backend_->commit(f, size_t(n) * sizeof(float));
  toF32(h16_ + off, f, n);
  if (scale != 1.f) backend_->scale(f, n, scale);
}

void Fp32Window::store(int64_t off, int64_t n) {
  fromF32(f32_ + off, h16_ + off, n);
}

void Fp32Window::roundTrip(int64_t off, int64_t n) {
  if (n <= 0) return;
  store(off, n);
  toF32(h16_ + off, f32_ + off, n);
}

void Fp32Window::storeFrom(const float* src, int64_t off, int64_t n) {
  fromF32(src, h16_ + off, n);
}

void Fp32Window::upcastInto(int64_t off, int64_t n, float* dst) const {
  toF32(h16_ + off, dst, n);
}

void Fp32Window::discard(int64_t off, int64_t n) {
  backend_->discard(f32_ + off, size_t(n) * sizeof(float));
}

void Fp32Window::discardInner(int64_t off, int64_t n) {
  // 4 KiB steps: on a larger page size the backend zeroes the partial pages it is given, which
  // then still lie inside this range.
  constexpr uintptr_t kStep = 4096;
  const auto a = reinterpret_cast<uintptr_t>(f32_ + off), e = a + uintptr_t(n) * sizeof(float);
  const uintptr_t lo = (a + kStep - 1) / kStep * kStep, hi = e / kStep * kStep;
  if (hi > lo) backend_->discard(reinterpret_cast<void*>(lo), hi - lo);
}

void Fp32Window::groupOpened(size_t g, char level, int64_t elems) {
  open_[g] = level;
  tracked_.add(4 * elems);
  openElems_[g] = elems;
}

void Fp32Window::closeGroup(size_t g, int64_t off, int64_t n) {
  discard(off, n);
  tracked_.add(-4 * openElems_[g]);
  openElems_[g] = 0;
  open_[g] = 0;
}

void Fp32Window::openWeight(int64_t off, int64_t n, float scale) {
  upcast(off, n, scale);
  openWeights_.push_back({off, n});
  tracked_.add(4 * n);
}

bool Fp32Window::closeWeight(int64_t off, int64_t n, bool store) {
  const auto it =
      std::find(openWeights_.begin(), openWeights_.end(), std::pair<int64_t, int64_t>{off, n});
  if (it == openWeights_.end()) return false;
  openWeights_.erase(it);
  if (store) this->store(off, n);
  discardInner(off, n);
  tracked_.add(-4 * n);
  return true;
}

bool Fp32Window::weightCovers(int64_t off, int64_t n) const {
  for (const auto& [o, m] : openWeights_)
    if (off >= o && off + n <= o + m) return true;
  return false;
}

}  // namespace ts::engine
