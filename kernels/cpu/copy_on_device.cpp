// dst = src within the backend's memory (on the CPU both are host memory).
#include <cstring>

#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void copyOnDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, static_cast<size_t>(bytes));
}

}  // namespace ts::kernels::cpu
