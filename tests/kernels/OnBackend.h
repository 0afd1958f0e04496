#pragma once
// A test body shared by the CPU ops and their CUDA twins: TEST_P(Suite, Name) on a fixture
// derived from OnBackend, instantiated with TS_ON_BACKEND(Suite), runs on the backend its
// binary tests ("cpu" in kernels_tests, label unit; "cuda" in kernels_gpu_tests, label gpu,
// skipped with makeCudaBackend's reason when no GPU answers). Inputs go through the backend's own
// memory; outputs start as 0xFF bytes (a NaN), so an element the op should write but does not shows
// up. On CUDA the same body also runs the op on the CPU twin and compares the two.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/kernels/Backend.h"

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
  std::vector<float> down(const float* d, size_t n) {
    std::vector<float> h(n);
    b_.synchronize();
    b_.copyToHost(h.data(), d, n * sizeof(float));
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
    std::string why;
    gpu_ = makeCudaBackend(&why);
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << why;
  }
  // The backend under test.
  Backend& be() { return gpu_ ? *gpu_ : *cpu_; }
  // The CPU twin, to compare against when the backend under test is not the CPU.
  Backend& cpu() { return *cpu_; }
  bool hasTwin() const { return gpu_ != nullptr; }

 private:
  std::unique_ptr<Backend> cpu_, gpu_;
};

inline std::string backendParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace ts::kernels::test

// Instantiates an OnBackend suite for the backend this binary tests: TS_TEST_BACKEND is "cpu"
// or "cuda", set per test target in tests/kernels/CMakeLists.txt (the same test file is
// compiled into both binaries). Test names end in /cpu or /cuda.
#ifndef TS_TEST_BACKEND
#error "TS_TEST_BACKEND (\"cpu\" or \"cuda\") must be defined by the test target"
#endif
#define TS_ON_BACKEND(suite)                                                           \
  INSTANTIATE_TEST_SUITE_P(On, suite, ::testing::Values(std::string(TS_TEST_BACKEND)), \
                           ::ts::kernels::test::backendParamName)
