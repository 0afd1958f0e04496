// fp32 GEMM on sub-matrices (explicit row lengths) through cuBLAS: row-major C = A B is
// column-major C^T = B^T A^T, so the operands swap and the row lengths are the leading dims.
#include <string>

#include "Common.cuh"
#include "Cublas.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

void matmulStrided(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                   int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
  if (M <= 0 || N <= 0) return;
  const cublasStatus_t st = cublasSgemm(cublasHandle(), transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B,
                                        int(ldb), A, int(lda), &beta, C, int(ldc));
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasSgemm (strided) failed with status " + std::to_string(int(st)));
}

}  // namespace ts::kernels::cuda
