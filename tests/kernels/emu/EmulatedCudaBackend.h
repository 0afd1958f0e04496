#pragma once
// The CUDA backend's ops (kernels/cuda/*.cu, compiled as C++ with their launches rewritten) on
// the CUDA emulation (../CudaEmulation.h), for tests: the twins' own kernels run where no GPU
// answers. Memory is host memory handed out as device memory; name() "cuda-emulated".
#include <memory>

#include "trainscope/kernels/Backend.h"

namespace ts::kernels {

std::unique_ptr<Backend> makeEmulatedCudaBackend();

}  // namespace ts::kernels
