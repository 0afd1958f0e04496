#pragma once
// Host-side CUDA runtime error checks that throw, shared by the .cu twins (through Common.cuh)
// and the host-only sources (CudaBackend.cpp, VmmAllocator.cpp).
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace ts::kernels::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(e) +
                             " (" + cudaGetErrorString(e) + ")");
}
#define TS_CUDA_CHECK(expr) ::ts::kernels::cuda::check((expr), #expr)
#define TS_CUDA_LAUNCHED(name) ::ts::kernels::cuda::check(cudaGetLastError(), name)

}  // namespace ts::kernels::cuda
