#include "trainscope/engine/params/Tensor.h"

#include <stdexcept>
#include <utility>

namespace ts::engine {

int64_t storageBytes(DType dtype, int64_t numel) {
  return (numel * kernels::dtypeBits(dtype) + 7) / 8;
}

Tensor::Tensor(kernels::Backend* backend, MemoryTracker* tracker, core::MemoryCategory category,
               DType dtype, std::vector<int64_t> shape, core::MemoryTier tier)
    : backend_(backend),
      tracker_(tracker),
      category_(category),
      tier_(tier),
      dtype_(dtype),
      shape_(std::move(shape)) {
  numel_ = 1;
  for (int64_t d : shape_) {
    if (d < 0) throw std::invalid_argument("tensor dimension is negative");
    numel_ *= d;
  }
  bytes_ = storageBytes(dtype_, numel_);
  // Zero-sized tensors still get a (tiny) allocation so data() is never null for a live tensor,
  // but only the requested bytes are counted.
  data_ = backend_->allocate(bytes_ > 0 ? static_cast<size_t>(bytes_) : 64);
  if (!data_) throw std::bad_alloc();
  if (tracker_) tracker_->add(tier_, category_, bytes_);
}

Tensor::~Tensor() {
  reset();
}

Tensor::Tensor(Tensor&& o) noexcept {
  *this = std::move(o);
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    reset();
    backend_ = o.backend_;
    tracker_ = o.tracker_;
    category_ = o.category_;
    tier_ = o.tier_;
    dtype_ = o.dtype_;
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    bytes_ = o.bytes_;
    data_ = o.data_;
    o.data_ = nullptr;
    o.numel_ = o.bytes_ = 0;
  }
  return *this;
}

kernels::DeviceKind Tensor::device() const {
  return backend_ ? backend_->kind() : kernels::DeviceKind::Cpu;
}

void Tensor::zero() {
  if (!data_ || bytes_ == 0) return;
  backend_->fill(data_, 0, bytes_);
}

void Tensor::copyToHost(void* dst) const {
  if (data_ && bytes_ > 0) backend_->copyToHost(dst, data_, static_cast<size_t>(bytes_));
}

void Tensor::copyRangeToHost(void* dst, int64_t offset, int64_t n) const {
  if (offset < 0 || n < 0 || offset + n > bytes_)
    throw std::out_of_range("Tensor::copyRangeToHost: bytes [" + std::to_string(offset) + ", " +
                            std::to_string(offset + n) + ") outside a tensor of " +
                            std::to_string(bytes_));
  if (data_ && n > 0)
    backend_->copyToHost(dst, static_cast<const char*>(data_) + offset, static_cast<size_t>(n));
}

void Tensor::copyFromHost(const void* src) {
  if (data_ && bytes_ > 0) backend_->copyToDevice(data_, src, static_cast<size_t>(bytes_));
}

void Tensor::reset() {
  if (data_) {
    backend_->release(data_);
    if (tracker_) tracker_->remove(tier_, category_, bytes_);
    data_ = nullptr;
  }
  numel_ = bytes_ = 0;
}

}  // namespace ts::engine
