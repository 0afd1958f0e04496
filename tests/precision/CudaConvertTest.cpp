// CUDA conversion twins vs the CPU ones (label gpu): bit-identical on all 16-bit and 8-bit
// patterns and on random fp32 inputs. Skips with the reason when no GPU is usable.
// precision_emu_tests runs the same bodies on the twins' kernels under emulation
// (TS_EMULATED_CUDA, tests/kernels/CudaEmulation.h; label unit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CudaNumeric.h"
#ifdef TS_EMULATED_CUDA
#include "emu/EmulatedCudaBackend.h"
#endif

namespace {

namespace k = ts::kernels;

class CudaConvert : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
#ifdef TS_EMULATED_CUDA
    gpu_ = k::makeEmulatedCudaBackend();
#else
    gpu_ = k::makeCudaBackend(&why);
#endif
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << why;
  }
  void TearDown() override {
    if (gpu_)
      for (void* p : owned_) gpu_->release(p);
  }
  template <class T>
  T* up(const std::vector<T>& h) {
    void* p = gpu_->allocate(std::max<size_t>(1, h.size() * sizeof(T)));
    owned_.push_back(p);
    if (!h.empty()) gpu_->copyToDevice(p, h.data(), h.size() * sizeof(T));
    return static_cast<T*>(p);
  }
  template <class T>
  T* alloc(size_t n) {
    return up(std::vector<T>(n));
  }
  template <class T>
  std::vector<T> down(const T* d, size_t n) {
    std::vector<T> h(n);
    gpu_->synchronize();
    gpu_->copyToHost(h.data(), d, n * sizeof(T));
    return h;
  }
  static bool sameBits(float a, float b) {
    return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b));
  }

  std::unique_ptr<k::Backend> gpu_;
  std::vector<void*> owned_;
};

std::vector<float> randomFloats(size_t n) {
  std::mt19937 rng(42);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = uint32_t(rng());
    std::memcpy(&x[i], &u, sizeof u);
    if (i % 2) x[i] = float(int(rng() % 2000001) - 1000000) * 1e-3f;  // half in a useful range
  }
  return x;
}

TEST_F(CudaConvert, SixteenBitFormatsMatchCpu) {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = uint16_t(c);
  const uint16_t* dc = up(codes);
  float* dy = alloc<float>(65536);
  std::vector<float> cpu(65536);
  k::cuda::bf16ToFloat(dc, dy, 65536);
  k::cpu::bf16ToFloat(codes.data(), cpu.data(), 65536);
  auto gpu = down(dy, 65536);
  for (size_t i = 0; i < gpu.size(); ++i) ASSERT_TRUE(sameBits(gpu[i], cpu[i])) << i;
  k::cuda::fp16ToFloat(dc, dy, 65536);
  k::cpu::fp16ToFloat(codes.data(), cpu.data(), 65536);
  gpu = down(dy, 65536);
  for (size_t i = 0; i < gpu.size(); ++i) ASSERT_TRUE(sameBits(gpu[i], cpu[i])) << i;

  const auto x = randomFloats(300001);
  const float* dx = up(x);
  uint16_t* dh = alloc<uint16_t>(x.size());
  std::vector<uint16_t> ch(x.size());
  k::cuda::floatToBf16(dx, dh, int64_t(x.size()));
  k::cpu::floatToBf16(x.data(), ch.data(), int64_t(x.size()));
  EXPECT_EQ(down(dh, x.size()), ch);
  k::cuda::floatToFp16(dx, dh, int64_t(x.size()));
  k::cpu::floatToFp16(x.data(), ch.data(), int64_t(x.size()));
  EXPECT_EQ(down(dh, x.size()), ch);
}

TEST_F(CudaConvert, Fp8MatchesCpu) {
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = uint8_t(c);
  const auto x = randomFloats(200003);
  const float* dx = up(x);
  const uint8_t* dc = up(codes);
  float* dy = alloc<float>(256);
  uint8_t* dq = alloc<uint8_t>(x.size());
  for (auto f : {k::Fp8Format::E4M3, k::Fp8Format::E5M2}) {
    std::vector<float> cpu(256);
    k::cuda::fp8ToFloat(dc, dy, 256, f, 0.5f);
    k::cpu::fp8ToFloat(codes.data(), cpu.data(), 256, f, 0.5f);
    const auto gpu = down(dy, 256);
    for (int i = 0; i < 256; ++i) ASSERT_TRUE(sameBits(gpu[i], cpu[i])) << i;
    for (bool sat : {true, false}) {
      std::vector<uint8_t> cq(x.size());
      k::cuda::floatToFp8(dx, dq, int64_t(x.size()), f, 3.0f, sat);
      k::cpu::floatToFp8(x.data(), cq.data(), int64_t(x.size()), f, 3.0f, sat);
      EXPECT_EQ(down(dq, x.size()), cq) << int(f) << " sat " << sat;
    }
  }
  // The input holds NaNs (random bit patterns), so the amax is a NaN: compared bit for bit
  // (both take the largest |x| bit pattern), as EXPECT_EQ's NaN != NaN would always fail.
  EXPECT_TRUE(
      sameBits(k::cuda::amax(dx, int64_t(x.size())), k::cpu::amax(x.data(), int64_t(x.size()))));
}

TEST_F(CudaConvert, Int8RowsMatchCpu) {
  const int64_t rows = 300, cols = 517;
  auto x = randomFloats(size_t(rows * cols));
  for (auto& v : x)
    if (!std::isfinite(v) || std::fabs(v) > 1e6f) v = 0.5f;
  x[7 * cols + 3] = std::numeric_limits<float>::infinity();
  const float* dx = up(x);
  int8_t* dq = alloc<int8_t>(x.size());
  float* ds = alloc<float>(size_t(rows));
  float* dy = alloc<float>(x.size());
  std::vector<int8_t> cq(x.size());
  std::vector<float> cs(static_cast<size_t>(rows)), cy(x.size());
  k::cuda::quantizeInt8Rows(dx, dq, ds, rows, cols);
  k::cuda::dequantizeInt8Rows(dq, ds, dy, rows, cols);
  k::cpu::quantizeInt8Rows(x.data(), cq.data(), cs.data(), rows, cols);
  k::cpu::dequantizeInt8Rows(cq.data(), cs.data(), cy.data(), rows, cols);
  EXPECT_EQ(down(dq, x.size()), cq);
  const auto gs = down(ds, size_t(rows)), gy = down(dy, x.size());
  for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(sameBits(gs[r], cs[r])) << r;
  for (size_t i = 0; i < gy.size(); ++i) ASSERT_TRUE(sameBits(gy[i], cy[i])) << i;
}

}  // namespace
