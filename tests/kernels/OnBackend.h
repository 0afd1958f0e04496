#pragma once
// A test body shared by the CPU ops and their CUDA twins: TEST_P(Suite, Name) on a fixture
// derived from OnBackend, instantiated with TS_ON_BACKEND(Suite), runs on the backends its
// binary tests ("cpu" and "cpu_guarded" in kernels_tests, label unit; "cuda" in
// kernels_gpu_tests, label gpu, skipped with makeCudaBackend's reason when no GPU answers). The
// guarded CPU backend (GuardedCpuBackend.h) faults on any host access to its memory outside a
// backend call, so a body that passes there reaches memory only as it would on a GPU. Inputs go
// through the backend's own memory; outputs start as 0xFF bytes (a NaN), so an element the op
// should write but does not shows up. On CUDA the same body also runs the op on the CPU twin and
// compares the two.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/GuardedCpuBackend.h"
#ifdef TS_EMULATED_CUDA
#include "emu/EmulatedCudaBackend.h"
#endif

namespace ts::kernels::test {

// Buffers in one backend's memory, released with it.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(Backend& b) : b_(b) {}
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : owned_) b_.release(p);
  }

  // A device copy of h.
  template <class T>
  T* up(const std::vector<T>& h) {
    T* p = static_cast<T*>(alloc(h.size() * sizeof(T)));
    b_.copyToDevice(p, h.data(), h.size() * sizeof(T));
    return p;
  }
  // n floats of 0xFF bytes (a quiet NaN with the sign set).
  float* poisoned(size_t n) { return up(std::vector<float>(n, poison())); }
  std::vector<float> down(const float* d, size_t n) { return downAs(d, n); }
  // n values of any element type back to the host.
  template <class T>
  std::vector<T> downAs(const T* d, size_t n) {
    std::vector<T> h(n);
    b_.synchronize();
    b_.copyToHost(h.data(), d, n * sizeof(T));
    return h;
  }

  static float poison() {
    const uint32_t bits = 0xFFFFFFFFu;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static bool isPoison(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits == 0xFFFFFFFFu;
  }

 private:
  void* alloc(size_t bytes) {
    void* p = b_.allocate(bytes ? bytes : 1);
    owned_.push_back(p);
    return p;
  }
  Backend& b_;
  std::vector<void*> owned_;
};

class OnBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    cpu_ = makeCpuBackend();
    if (GetParam() == "cpu") return;
    if (GetParam() == "cpu_guarded") {
      guarded_ = makeGuardedCpuBackend();
      return;
    }
    std::string why;
#ifdef TS_EMULATED_CUDA
    if (GetParam() == "cuda_emulated") {  // the CUDA twins' kernels under emulation
      gpu_ = makeEmulatedCudaBackend();
      return;
    }
#endif
    gpu_ = makeCudaBackend(&why);
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << why;
  }
  // The backend under test.
  Backend& be() {
    return gpu_ ? *gpu_ : guarded_ ? *guarded_ : *cpu_;
  }
  // The CPU twin, to compare against when the backend under test is not the CPU.
  Backend& cpu() {
    return *cpu_;
  }
  bool hasTwin() const {
    return gpu_ != nullptr;
  }

 private:
  std::unique_ptr<Backend> cpu_, gpu_, guarded_;
};

inline std::string backendParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

// The backends a binary instantiates its suites for: the CPU build runs each body on the plain
// and on the guarded CPU backend, the CUDA build on CUDA.
inline std::vector<std::string> testBackends(const std::string& binary) {
  if (binary == "cpu") return {"cpu", "cpu_guarded"};
  return {binary};
}

}  // namespace ts::kernels::test

// Instantiates an OnBackend suite for the backends this binary tests: TS_TEST_BACKEND is "cpu"
// or "cuda", set per test target in tests/kernels/CMakeLists.txt (the same test file is
// compiled into both binaries). Test names end in /cpu, /cpu_guarded or /cuda.
#ifndef TS_TEST_BACKEND
#error "TS_TEST_BACKEND (\"cpu\" or \"cuda\") must be defined by the test target"
#endif
#define TS_ON_BACKEND(suite)                                                              \
  INSTANTIATE_TEST_SUITE_P(                                                               \
      On, suite, ::testing::ValuesIn(::ts::kernels::test::testBackends(TS_TEST_BACKEND)), \
      ::ts::kernels::test::backendParamName)
