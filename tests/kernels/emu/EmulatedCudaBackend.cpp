// Built with the emulated kernels (tests/kernels/CMakeLists.txt: cuda_emu_ops), where `cuda`
// names their namespace cuda_emu: the forwarders below call the emulated twins. supports() and
// supports(op, dtype) are CudaBackend's on an sm_90 device.
#include "EmulatedCudaBackend.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "trainscope/kernels/CudaOps.h"

#include <map>

namespace ts::kernels {

namespace {

class EmulatedCudaBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return "cuda-emulated"; }
  DeviceInfo device() const override {
    DeviceInfo info;
    info.kind = DeviceKind::Cuda;
    info.name = "emulated sm_90";
    info.memory_bytes = int64_t(1) << 30;  // nominal: host memory backs it
    info.features = {"sm_90", "bf16", "fp8"};
    return info;
  }
  bool supports(Op) const override { return true; }
  bool supports(Op op, DType dtype) const override {
    if (op == Op::MatmulBF16) return dtype == DType::BF16;
    if (op == Op::Convert) return convertsTo(dtype);
    return dtype == DType::F32;
  }
  void setThreads(int) override {}
  int threads() const override { return 1; }
  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0xFF, rounded);  // NaN until written, as fresh device memory may hold anything
    sizes_[p] = rounded;
    used_ += int64_t(rounded);
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    used_ -= int64_t(sizes_.at(p));
    sizes_.erase(p);
    std::free(p);
  }
  // Pages given back read as zero once committed (the VMM allocator's contract): zeroed here.
  bool discard(void* p, size_t bytes) override {
    std::memset(p, 0, bytes);
    return true;
  }
  bool deviceMemory(int64_t* used, int64_t* total) const override {
    *used = used_;
    *total = int64_t(1) << 34;  // nominal
    return true;
  }
  void copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

#define TS_OP(kind, ret, name, params, args) \
  ret name params override {                 \
    return cuda::name args;                  \
  }
#include "trainscope/kernels/OpList.h"

 private:
  std::map<void*, size_t> sizes_;
  int64_t used_ = 0;
};

}  // namespace

std::unique_ptr<Backend> makeEmulatedCudaBackend() {
  return std::make_unique<EmulatedCudaBackend>();
}

}  // namespace ts::kernels
