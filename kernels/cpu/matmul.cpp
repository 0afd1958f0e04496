// fp32 GEMM through oneDNN's dnnl_sgemm (fastest measured fp32 path here, picks the ISA at run
// time; reference.md). Row-major: lda/ldb are the stored row lengths.
#include <oneapi/dnnl/dnnl.h>

#include <stdexcept>
#include <string>

#include "cpu/Gemm.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void stridedGemm(char transA, char transB, int M, int N, int K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {  // empty product: C = beta * C (beta 0 overwrites, even NaN)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  const dnnl_status_t st = dnnl_sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (st != dnnl_success)
    throw std::runtime_error("dnnl_sgemm failed with status " + std::to_string(int(st)));
}

void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA, bool transB,
            float alpha, float beta) {
  stridedGemm(transA ? 'T' : 'N', transB ? 'T' : 'N', M, N, K, alpha, A, transA ? M : K, B,
              transB ? K : N, beta, C, N);
}

}  // namespace ts::kernels::cpu
