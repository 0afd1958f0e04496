// Trivial device work for the CUPTI test: HtoD copy, memset, `iterations` kernels, DtoH copy,
// all through the runtime API.
#include <cuda_runtime.h>

#include <string>
#include <vector>

__global__ void scale_kernel(float* x, int n, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * a + 1.0f;
}

bool launchTestWork(int n, int iterations, std::string* error) {
  auto check = [&](cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    *error = std::string(what) + ": " + cudaGetErrorString(e);
    return false;
  };
  std::vector<float> host(static_cast<size_t>(n), 1.0f);
  float* d = nullptr;
  const size_t bytes = host.size() * sizeof(float);
  if (!check(cudaMalloc(&d, bytes), "cudaMalloc")) return false;
  bool ok = check(cudaMemcpy(d, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy HtoD") &&
            check(cudaMemset(d, 0, bytes / 2), "cudaMemset");
  for (int i = 0; ok && i < iterations; ++i) {
    scale_kernel<<<(n + 255) / 256, 256>>>(d, n, 0.5f);
    ok = check(cudaGetLastError(), "launch");
  }
  ok = ok && check(cudaMemcpy(host.data(), d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy DtoH") &&
       check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cudaFree(d);
  return ok;
}

// Whether a GPU answers (cudaGetDeviceCount's error code, or no device): the one reason the
// gpu-labelled CUPTI tests skip.
bool testGpuPresent(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) *why = "no CUDA device";
  return n > 0;
}
