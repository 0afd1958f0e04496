// fp32 GEMM through cuBLAS. Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T,
// so the operands are swapped. Default math mode: true fp32 (no TF32), to match the CPU.
#include "Common.cuh"
#include "Cublas.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA, bool transB,
            float alpha, float beta) {
  if (M <= 0 || N <= 0) return;
  const int lda = transA ? M : K, ldb = transB ? K : N;
  const cublasStatus_t st =
      cublasSgemm(cublasHandle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                  transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A, lda, &beta, C, N);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasSgemm failed with status " + std::to_string(int(st)));
}

}  // namespace ts::kernels::cuda
