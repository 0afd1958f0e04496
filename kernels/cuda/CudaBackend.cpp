// The CUDA backend: device memory, copies and the ops in kernels/cuda/*.cu. Created only when
// cudaGetDeviceCount reports at least one usable device; otherwise the reason is returned.
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "CudaCheck.h"
#include "VmmAllocator.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    int major = 0;
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
          "cudaDeviceGetAttribute");
    bf16_ = major >= 8;
    try {
      vmm_ = std::make_unique<VmmAllocator>(device);
    } catch (const std::exception& e) {
      vmmWhy_ = e.what();  // plain cudaMalloc: no pages given back (ZeRO 2/3, 16-bit windows)
    }
  }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return "cuda"; }
  DeviceInfo device() const override {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    DeviceInfo info;
    info.kind = DeviceKind::Cuda;
    info.name = prop.name;
    info.memory_bytes = int64_t(prop.totalGlobalMem);
    info.features.push_back("sm_" + std::to_string(prop.major) + std::to_string(prop.minor));
    if (prop.major >= 8) info.features.push_back("bf16");
    if (prop.major > 8 || (prop.major == 8 && prop.minor >= 9)) info.features.push_back("fp8");
    return info;
  }
  bool deviceMemory(int64_t* used, int64_t* total) const override {
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) return false;
    *used = int64_t(tot - fr);
    *total = int64_t(tot);
    return true;
  }
  // bf16 GEMMs and the tensor-core flash attention need bf16 tensor cores (sm_80 and newer);
  // every other op runs everywhere.
  bool supports(Op op) const override {
    return (op != Op::MatmulBF16 && op != Op::FlashAttentionBf16) || bf16_;
  }
  bool supports(Op op, DType dtype) const override {
    if (op == Op::MatmulBF16) return bf16_ && dtype == DType::BF16;
    if (op == Op::Convert) return convertsTo(dtype);
    return supports(op) && dtype == DType::F32;
  }
  void setThreads(int) override {}  // host threads do not apply to the GPU
  int threads() const override { return 1; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    if (vmm_) return vmm_->allocate(bytes);
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      throw std::bad_alloc();
    }
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    if (vmm_)
      vmm_->release(p);
    else
      cudaFree(p);
  }
  bool discard(void* p, size_t bytes) override { return vmm_ && vmm_->discard(p, bytes); }
  void commit(void* p, size_t bytes) override {
    if (vmm_) vmm_->commit(p, bytes);
  }
  void copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copyToDevice");
  }
  void copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copyToHost");
  }
  void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  // One forwarder per OpList.h entry.
#define TS_OP(kind, ret, name, params, args) \
  ret name params override {                 \
    return cuda::name args;                  \
  }
#include "trainscope/kernels/OpList.h"

 private:
  int device_;
  bool bf16_ = false;
  std::unique_ptr<VmmAllocator> vmm_;  // null where the driver has no VMM (vmmWhy_ says why)
  std::string vmmWhy_;
};

}  // namespace

std::unique_ptr<Backend> createBackend(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why)
      *why = std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
             cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return nullptr;
  }
  if (count == 0) {
    if (why) *why = "no usable CUDA device: cudaGetDeviceCount reports 0 devices";
    return nullptr;
  }
  try {
    return std::make_unique<CudaBackend>(0);
  } catch (const std::exception& ex) {
    if (why) *why = std::string("CUDA device 0 unusable: ") + ex.what();
    return nullptr;
  }
}

}  // namespace ts::kernels::cuda
