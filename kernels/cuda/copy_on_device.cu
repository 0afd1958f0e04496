// dst = src, device to device, on the default stream.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

void copyOnDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice));
}

}  // namespace ts::kernels::cuda
