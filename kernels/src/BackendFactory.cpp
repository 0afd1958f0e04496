// Backend selection. The CUDA backend is only linked in when TRAINSCOPE_WITH_CUDA is defined;
// otherwise asking for it returns nullptr with the reason.
#include "trainscope/kernels/Backend.h"

namespace ts::kernels {

#ifdef TRAINSCOPE_WITH_CUDA
namespace cuda {
std::unique_ptr<Backend> createBackend(std::string* why);  // kernels/cuda/CudaBackend.cpp
}
#endif

std::unique_ptr<Backend> makeCudaBackend(std::string* why) {
#ifdef TRAINSCOPE_WITH_CUDA
  return cuda::createBackend(why);
#else
  if (why) *why = "this build has no CUDA backend (configured without CUDA or nvcc not found)";
  return nullptr;
#endif
}

std::unique_ptr<Backend> makeBackend(const std::string& name, std::string* why) {
  if (name == "cpu") return makeCpuBackend();
  if (name == "cuda") return makeCudaBackend(why);
  if (name == "auto") {
    std::string reason;
    if (auto b = makeCudaBackend(&reason)) return b;
    if (why) *why = "using cpu: " + reason;
    return makeCpuBackend();
  }
  if (why) *why = "unknown backend '" + name + "' (allowed: auto, cpu, cuda)";
  return nullptr;
}

std::vector<std::string> compiledBackends() {
#ifdef TRAINSCOPE_WITH_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

}  // namespace ts::kernels
