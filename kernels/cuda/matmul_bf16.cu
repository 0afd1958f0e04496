// bf16 GEMM through cuBLAS (tensor cores): bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F)
// and fp32 output, the same contract as the CPU op. Row-major handled as in matmul.cu.
#include "Common.cuh"
#include "Cublas.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta) {
  if (M <= 0 || N <= 0) return;
  const int lda = transA ? M : K, ldb = transB ? K : N;
  const cublasStatus_t st = cublasGemmEx(cublasHandle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                                         CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C,
                                         CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasGemmEx (bf16) failed with status " + std::to_string(int(st)));
}

}  // namespace ts::kernels::cuda
