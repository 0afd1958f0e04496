#pragma once
// Emulated CUDA runtime (tests only; see ../../CudaEmulation.h): device memory is host memory,
// copies are memcpy, every call succeeds at once (kernels run to completion when launched).
#include <cstdlib>
#include <cstring>

#include "CudaEmulation.h"

enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
using cudaStream_t = struct CUstream_st*;

inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaSuccess ? "cudaSuccess" : "cudaErrorMemoryAllocation";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : "out of memory (emulated)";
}
inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  *p = static_cast<T*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k,
                                   cudaStream_t = nullptr) {
  return cudaMemcpy(dst, src, bytes, k);
}
inline cudaError_t cudaMemset(void* p, int v, size_t bytes) {
  std::memset(p, v, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t = nullptr) {
  return cudaMemset(p, v, bytes);
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) {
  *v = 9;  // an sm_90 device
  return cudaSuccess;
}
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}
