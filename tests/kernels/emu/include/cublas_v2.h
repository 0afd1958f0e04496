#pragma once
// Emulated cuBLAS (tests only): column-major GEMMs as reference loops summed in double, fp32
// results; beta == 0 never reads C (it may hold NaN poison), as cuBLAS.
#include <cstdint>

#include "cuda_runtime.h"

enum cublasStatus_t { CUBLAS_STATUS_SUCCESS = 0 };
enum cublasOperation_t { CUBLAS_OP_N, CUBLAS_OP_T };
enum cudaDataType { CUDA_R_32F, CUDA_R_16BF };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT };
struct cublasContext {};
using cublasHandle_t = cublasContext*;

inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  static cublasContext context;
  *h = &context;
  return CUBLAS_STATUS_SUCCESS;
}

namespace ts::emu {
inline double gemmOperand(const void* p, cudaDataType t, int64_t i) {
  return t == CUDA_R_16BF ? double(ts::kernels::bf16ToFloat(static_cast<const uint16_t*>(p)[i]))
                          : double(static_cast<const float*>(p)[i]);
}
// C (m x n, ldc) = alpha op(A) op(B) + beta C, column-major.
inline void gemm(cublasOperation_t opA, cublasOperation_t opB, int m, int n, int k, float alpha,
                 const void* A, cudaDataType ta, int lda, const void* B, cudaDataType tb, int ldb,
                 float beta, float* C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < k; ++p) {
        const int64_t ia = opA == CUBLAS_OP_N ? i + int64_t(p) * lda : p + int64_t(i) * lda;
        const int64_t ib = opB == CUBLAS_OP_N ? p + int64_t(j) * ldb : j + int64_t(p) * ldb;
        s += gemmOperand(A, ta, ia) * gemmOperand(B, tb, ib);
      }
      float& c = C[i + int64_t(j) * ldc];
      c = float(double(alpha) * s + (beta != 0.f ? double(beta) * c : 0.0));
    }
}
}  // namespace ts::emu

inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t opA, cublasOperation_t opB,
                                  int m, int n, int k, const float* alpha, const float* A, int lda,
                                  const float* B, int ldb, const float* beta, float* C, int ldc) {
  ts::emu::gemm(opA, opB, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *beta, C, ldc);
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t opA, cublasOperation_t opB,
                                   int m, int n, int k, const void* alpha, const void* A,
                                   cudaDataType ta, int lda, const void* B, cudaDataType tb,
                                   int ldb, const void* beta, void* C, cudaDataType, int ldc,
                                   cublasComputeType_t, cublasGemmAlgo_t) {
  ts::emu::gemm(opA, opB, m, n, k, *static_cast<const float*>(alpha), A, ta, lda, B, tb, ldb,
                *static_cast<const float*>(beta), static_cast<float*>(C), ldc);
  return CUBLAS_STATUS_SUCCESS;
}
