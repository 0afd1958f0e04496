// fp32 GEMM on sub-matrices (explicit row lengths) through oneDNN's dnnl_sgemm (cpu/Gemm.h).
#include "cpu/Gemm.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void matmulStrided(float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb,
                   int M, int N, int K, bool transA, bool transB, float alpha, float beta) {
  stridedGemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace ts::kernels::cpu
