// matmulStrided: GEMM on column slices of wider row-major matrices (explicit row lengths), all
// four transpose combinations, against an fp64 reference; elements outside the written slice
// keep their values. Every instantiated backend (OnBackend.h), CUDA also vs the CPU twin.
#include <gtest/gtest.h>

#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class MatmulStrided : public OnBackend {};
}  // namespace

TEST_P(MatmulStrided, SlicesOfWiderMatricesMatchFp64) {
  const int M = 37, N = 19, K = 23;
  const int padA = 5, padB = 3, padC = 11;  // extra columns beyond each operand's used width
  for (bool tA : {false, true})
    for (bool tB : {false, true})
      for (float beta : {0.f, 1.f}) {
        const int rowsA = tA ? K : M, colsA = tA ? M : K, rowsB = tB ? N : K, colsB = tB ? K : N;
        const int lda = colsA + padA, ldb = colsB + padB, ldc = N + padC;
        const auto A = randomVec(size_t(rowsA) * lda, 1), B = randomVec(size_t(rowsB) * ldb, 2);
        const auto C0 = randomVec(size_t(M) * ldc, 3);
        auto run = [&](Backend& b) {
          DeviceBuffers d(b);
          float* c = d.up(C0);
          b.matmulStrided(c + 2, ldc, d.up(A) + 1, lda, d.up(B) + 3, ldb, M, N, K, tA, tB, 0.5f,
                          beta);
          return d.down(c, C0.size());
        };
        const auto got = run(be());
        std::vector<double> want(C0.begin(), C0.end());
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < N; ++j) {
            double s = 0;
            for (int k = 0; k < K; ++k) {
              const double a = tA ? A[size_t(k) * lda + 1 + i] : A[size_t(i) * lda + 1 + k];
              const double bb = tB ? B[size_t(j) * ldb + 3 + k] : B[size_t(k) * ldb + 3 + j];
              s += a * bb;
            }
            double& c = want[size_t(i) * ldc + 2 + j];
            c = 0.5 * s + beta * c;
          }
        EXPECT_TRUE(allClose(got, want, 1e-5, 1e-6)) << tA << tB << beta;
        if (hasTwin()) EXPECT_TRUE(allClose(got, run(cpu()), 1e-5, 1e-6));
      }
}

TS_ON_BACKEND(MatmulStrided);
