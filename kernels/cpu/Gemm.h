#pragma once
// Strided fp32 GEMM (row-major, explicit leading dimensions) for ops that multiply views of
// larger tensors (attention heads inside qkv). Defined in matmul.cpp.
#include <cstdint>

namespace ts::kernels::cpu {

void stridedGemm(char transA, char transB, int M, int N, int K, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace ts::kernels::cpu
