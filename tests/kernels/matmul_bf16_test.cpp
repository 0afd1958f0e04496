// bf16 GEMM vs an fp64 triple loop over the same bf16 values: all transposes, alpha/beta,
// NaN-poisoned C when beta = 0. The backend op (oneDNN's bf16 kernel where the CPU has one) and
// the emulated path are each checked; where both exist they must agree.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CpuOps.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {

struct Shape {
  int M, N, K;
};

// Random finite bf16 patterns in +-[2^-4, 2^2) with random mantissas (independent of the
// product's conversion code: the value is the pattern shifted into an fp32).
std::vector<uint16_t> randomBf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const uint32_t sign = rng() & 1u, exp = 127 - 4 + rng() % 6, man = rng() & 0x7Fu;
    x = static_cast<uint16_t>((sign << 15) | (exp << 7) | man);
  }
  return v;
}

double value(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

using MatmulFn = void (*)(float*, const uint16_t*, const uint16_t*, int, int, int, bool, bool,
                          float, float);

void checkBf16(MatmulFn fn, Shape s, bool ta, bool tb, float alpha, float beta, uint32_t seed) {
  const auto A = randomBf16(size_t(s.M) * s.K, seed);
  const auto B = randomBf16(size_t(s.K) * s.N, seed + 1);
  auto C = beta == 0.0f ? nanVec(size_t(s.M) * s.N) : randomVec(size_t(s.M) * s.N, seed + 2);
  std::vector<double> want, bound;
  referenceGemm(
      s.M, s.N, s.K,
      [&](int i, int k) { return value(ta ? A[size_t(k) * s.M + i] : A[size_t(i) * s.K + k]); },
      [&](int k, int j) { return value(tb ? B[size_t(j) * s.K + k] : B[size_t(k) * s.N + j]); },
      alpha, beta, C, want, bound);
  fn(C.data(), A.data(), B.data(), s.M, s.N, s.K, ta, tb, alpha, beta);
  // fp32 accumulation of exact bf16 products: the fp32 sgemm tolerance applies.
  for (size_t i = 0; i < C.size(); ++i) {
    ASSERT_TRUE(std::isfinite(C[i])) << "index " << i;
    ASSERT_NEAR(C[i], want[i], 2e-6 * bound[i] + 1e-7)
        << "M=" << s.M << " N=" << s.N << " K=" << s.K << " ta=" << ta << " tb=" << tb
        << " alpha=" << alpha << " beta=" << beta << " index " << i;
  }
}

// The last one crosses the emulation's 512 x 512 x 256 blocks in every dimension.
const Shape kShapes[] = {{7, 13, 37}, {61, 37, 13}, {1, 1, 1},     {1, 61, 7},
                         {37, 1, 61}, {13, 7, 1},   {97, 67, 129}, {515, 521, 263}};

void checkAll(MatmulFn fn, bool ta, bool tb) {
  uint32_t seed = 10;
  for (const Shape& s : kShapes) {
    checkBf16(fn, s, ta, tb, 1.0f, 0.0f, seed++);
    checkBf16(fn, s, ta, tb, 1.0f, 1.0f, seed++);  // accumulate (gradient +=)
    checkBf16(fn, s, ta, tb, -0.5f, 0.3f, seed++);
  }
}

std::unique_ptr<Backend> gBackend;
void viaBackend(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool ta,
                bool tb, float alpha, float beta) {
  gBackend->matmulBf16(C, A, B, M, N, K, ta, tb, alpha, beta);
}

}  // namespace

class MatmulBf16Test : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(MatmulBf16Test, BackendMatchesFp64Reference) {
  gBackend = makeCpuBackend();
  ASSERT_TRUE(gBackend->supports(Op::MatmulBF16));
  const auto [ta, tb] = GetParam();
  checkAll(viaBackend, ta, tb);
  gBackend.reset();
}

TEST_P(MatmulBf16Test, EmulatedMatchesFp64Reference) {
  const auto [ta, tb] = GetParam();
  checkAll(cpu::matmulBf16Emulated, ta, tb);
}

// oneDNN's kernel (AMX / AVX512-BF16) and the emulation sum the same exact products in fp32.
TEST_P(MatmulBf16Test, NativeKernelAgreesWithEmulation) {
  std::string why;
  if (!cpu::matmulBf16Native(&why)) GTEST_SKIP() << "no native bf16 GEMM here: " << why;
  const bool ta = std::get<0>(GetParam()), tb = std::get<1>(GetParam());  // lambdas capture them
  const Shape s{129, 97, 515};
  const auto A = randomBf16(size_t(s.M) * s.K, 5), B = randomBf16(size_t(s.K) * s.N, 6);
  auto native = nanVec(size_t(s.M) * s.N), emulated = nanVec(native.size());
  cpu::matmulBf16(native.data(), A.data(), B.data(), s.M, s.N, s.K, ta, tb, 1.f, 0.f);
  cpu::matmulBf16Emulated(emulated.data(), A.data(), B.data(), s.M, s.N, s.K, ta, tb, 1.f, 0.f);
  std::vector<double> exact, bound;  // both are within fp32 summation error of the exact sum
  referenceGemm(
      s.M, s.N, s.K,
      [&](int i, int k) { return value(ta ? A[size_t(k) * s.M + i] : A[size_t(i) * s.K + k]); },
      [&](int k, int j) { return value(tb ? B[size_t(j) * s.K + k] : B[size_t(k) * s.N + j]); },
      1.f, 0.f, native, exact, bound);
  for (size_t i = 0; i < native.size(); ++i)
    ASSERT_NEAR(native[i], emulated[i], 4e-6 * bound[i] + 1e-7) << i;
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, MatmulBf16Test,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "T" : "N") +
                                  (std::get<1>(info.param) ? "T" : "N");
                         });

// The backend says whether the op is emulated: exactly when oneDNN has no kernel for this CPU.
TEST(MatmulBf16, BackendReportsEmulation) {
  auto be = makeCpuBackend();
  EXPECT_TRUE(be->supports(Op::MatmulBF16));
  EXPECT_EQ(be->emulates(Op::MatmulBF16), !cpu::matmulBf16Native());
  EXPECT_FALSE(be->emulates(Op::Matmul));
}
