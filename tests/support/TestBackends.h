#pragma once
// The backends the engine's tests run on: the CPU backend and the guarded CPU backend
// (GuardedCpuBackend.h), whose memory the host cannot touch outside backend calls. A test that
// passes on both reaches tensor memory only through the backend, as a CUDA run must. Helpers to
// make one by name and to read tensors back to the host through it.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/GuardedCpuBackend.h"
#ifdef TS_EMULATED_CUDA
#include "emu/EmulatedCudaBackend.h"  // tests/kernels: the CUDA twins under emulation
#endif

namespace ts::kernels {

// The CPU backend without Backend::discard (as CUDA where the driver has no virtual memory
// management): what needs pages given back must refuse on it, saying why.
class NoDiscardBackend final : public Backend {
 public:
  NoDiscardBackend() : cpu_(makeCpuBackend()) {}
  DeviceKind kind() const override { return cpu_->kind(); }
  std::string name() const override { return "cpu-no-discard"; }
  DeviceInfo device() const override { return cpu_->device(); }
  bool supports(Op op) const override { return cpu_->supports(op); }
  bool supports(Op op, DType d) const override { return cpu_->supports(op, d); }
  bool emulates(Op op) const override { return cpu_->emulates(op); }
  void setThreads(int n) override { cpu_->setThreads(n); }
  int threads() const override { return cpu_->threads(); }
  int scratchThreads() const override { return cpu_->scratchThreads(); }
  void bindScratch(float* base, int64_t floatsPerThread, int threads) override {
    cpu_->bindScratch(base, floatsPerThread, threads);
  }
  void unbindScratch(const float* base) override { cpu_->unbindScratch(base); }
  void* allocate(size_t bytes) override { return cpu_->allocate(bytes); }
  void release(void* p) override { cpu_->release(p); }
  void copyToDevice(void* d, const void* s, size_t n) override { cpu_->copyToDevice(d, s, n); }
  void copyToHost(void* d, const void* s, size_t n) override { cpu_->copyToHost(d, s, n); }
  void synchronize() override {}
#define TS_OP(kind, ret, name, params, args) \
  ret name params override {                 \
    return cpu_->name args;                  \
  }
#include "trainscope/kernels/OpList.h"

 private:
  std::unique_ptr<Backend> cpu_;
};

}  // namespace ts::kernels

namespace ts::testsupport {

inline std::vector<std::string> engineTestBackends() {
  return {"cpu", "cpu-guarded"};
}

inline std::unique_ptr<kernels::Backend> makeTestBackend(const std::string& name) {
  if (name == "cpu-no-discard") return std::make_unique<kernels::NoDiscardBackend>();
  if (name == "cpu") return kernels::makeCpuBackend();
  if (name == "cpu-guarded") return kernels::makeGuardedCpuBackend();
#ifdef TS_EMULATED_CUDA
  if (name == "cuda-emulated") return kernels::makeEmulatedCudaBackend();
#endif
  if (name == "cuda") {  // tests skip first where none answers (cudaAvailable)
    std::string why;
    auto b = kernels::makeCudaBackend(&why);
    if (!b) throw std::runtime_error("no CUDA backend: " + why);
    return b;
  }
  throw std::invalid_argument("no test backend '" + name + "'");
}

// Whether a CUDA backend answers here; `why` says why not.
inline bool cudaAvailable(std::string* why) {
  return kernels::makeCudaBackend(why) != nullptr;
}

// "cpu-guarded" -> "cpu_guarded" (gtest parameter names are identifiers).
inline std::string backendTestName(const std::string& backend) {
  std::string s = backend;
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}
inline std::string backendParamName(const ::testing::TestParamInfo<std::string>& info) {
  return backendTestName(info.param);
}

// A tensor's storage as host values of type T (through its backend).
template <class T = float>
std::vector<T> hostCopy(const engine::Tensor& t) {
  std::vector<T> h(static_cast<size_t>(t.bytes()) / sizeof(T));
  t.copyToHost(h.data());
  return h;
}
// n values at p (in `backend`'s memory) as host values.
template <class T>
std::vector<T> hostCopy(kernels::Backend& backend, const T* p, int64_t n) {
  std::vector<T> h(static_cast<size_t>(n));
  backend.copyToHost(h.data(), p, h.size() * sizeof(T));
  return h;
}

}  // namespace ts::testsupport
