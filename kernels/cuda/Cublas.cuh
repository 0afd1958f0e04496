#pragma once
// One cuBLAS handle per host thread, shared by the GEMM twins (matmul.cu, matmul_bf16.cu).
#include <cublas_v2.h>

#include <stdexcept>

namespace ts::kernels::cuda {

inline cublasHandle_t cublasHandle() {
  thread_local cublasHandle_t h = [] {
    cublasHandle_t x = nullptr;
    if (cublasCreate(&x) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
    return x;
  }();
  return h;
}

}  // namespace ts::kernels::cuda
