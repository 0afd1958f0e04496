#pragma once
// A dense tensor: dtype, shape, device, and storage that is counted by a MemoryTracker for as
// long as it lives. Storage sizes are real for every dtype (bf16 2 bytes, fp8/int8 1, NF4 half a
// byte), so memory numbers mean on CPU what they mean on a GPU. Move-only.
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/plan/MemoryTable.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

using kernels::DType;

// Bytes needed to store `numel` elements of `dtype` (rounded up to whole bytes for NF4).
int64_t storageBytes(DType dtype, int64_t numel);

class Tensor {
 public:
  Tensor() = default;
  // Allocates (uninitialised) storage through the backend and counts it in the tracker.
  Tensor(kernels::Backend* backend, MemoryTracker* tracker, core::MemoryCategory category,
         DType dtype, std::vector<int64_t> shape, core::MemoryTier tier = core::MemoryTier::Device);
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  bool empty() const { return data_ == nullptr; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return bytes_; }
  core::MemoryCategory category() const { return category_; }
  core::MemoryTier tier() const { return tier_; }
  kernels::DeviceKind device() const;
  kernels::Backend* backend() const { return backend_; }

  // The storage lives in the backend's memory (device memory on a GPU): host code reads and
  // writes it only through the backend (ops, copies), never by dereferencing these.
  void* data() { return data_; }
  const void* data() const { return data_; }
  float* f32() { return static_cast<float*>(data_); }
  const float* f32() const { return static_cast<const float*>(data_); }
  int32_t* i32() { return static_cast<int32_t*>(data_); }
  const int32_t* i32() const { return static_cast<const int32_t*>(data_); }

  void zero();   // through the backend (a fill), for every dtype
  void reset();  // releases the storage
  // The whole storage (bytes() bytes) to or from host memory, through the backend.
  void copyToHost(void* dst) const;
  void copyFromHost(const void* src);
  // bytes [offset, offset + n) of the storage to host memory (a checkpoint streams big tensors).
  void copyRangeToHost(void* dst, int64_t offset, int64_t n) const;

 private:
  kernels::Backend* backend_ = nullptr;
  MemoryTracker* tracker_ = nullptr;
  core::MemoryCategory category_ = core::MemoryCategory::Workspace;
  core::MemoryTier tier_ = core::MemoryTier::Device;
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  int64_t bytes_ = 0;
  void* data_ = nullptr;
};

}  // namespace ts::engine
