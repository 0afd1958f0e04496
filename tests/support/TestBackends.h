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

#include "trainscope/engine/Tensor.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/GuardedCpuBackend.h"

namespace ts::testsupport {

inline std::vector<std::string> engineTestBackends() {
  return {"cpu", "cpu-guarded"};
}

inline std::unique_ptr<kernels::Backend> makeTestBackend(const std::string& name) {
  if (name == "cpu") return kernels::makeCpuBackend();
  if (name == "cpu-guarded") return kernels::makeGuardedCpuBackend();
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
