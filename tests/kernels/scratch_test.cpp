// Kernel scratch (CpuScratch.h): the kernels that need working space take it from the region a
// model binds, exactly as ScratchSizes.h says, and compute the same bits as with zeroed heap
// scratch although the region holds NaN garbage (they read only what they wrote).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>
#include <limits>
#include <vector>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::kernels;
using namespace ts::kernels::test;
namespace ks = ts::kernels::scratch;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A NaN-filled region of `threads` slices of `perThread` floats, bound on a CPU backend with
// that many threads.
struct Region {
  Region(Backend& be, int64_t perThread, int threads)
      : be(be), floats(size_t(perThread) * threads, kNaN) {
    be.bindScratch(floats.data(), perThread, threads);
  }
  ~Region() { be.unbindScratch(floats.data()); }
  Backend& be;
  std::vector<float> floats;
};

struct Counted {
  cpu::ScratchStats before = cpu::scratchStats();
  int64_t regionLeases() const { return cpu::scratchStats().regionLeases - before.regionLeases; }
  int64_t shortfalls() const { return cpu::scratchStats().shortfalls - before.shortfalls; }
};

}  // namespace

TEST(KernelScratch, LeasesComeFromTheBoundRegionWhenTheyFit) {
  std::vector<float> mem(3 * 10);
  const cpu::ScratchRegion r{mem.data(), 10, 3};
  const cpu::ScratchScope scope(&r);
  Counted c;
  {
    const cpu::ScratchLease l(10, 3);  // a slice per thread
    EXPECT_TRUE(l.fromRegion());
    EXPECT_EQ(l.slice(0), mem.data());
    EXPECT_EQ(l.slice(2), mem.data() + 20);
  }
  {
    const cpu::ScratchLease l(30, 1);  // one lease may span the whole region
    EXPECT_TRUE(l.fromRegion());
    EXPECT_EQ(l.slice(0), mem.data());
  }
  EXPECT_EQ(c.regionLeases(), 2);
  EXPECT_EQ(c.shortfalls(), 0);
  for (auto [floats, slices] : {std::pair{11, 3}, {10, 4}, {31, 1}}) {
    const cpu::ScratchLease l(floats, slices);  // too big: the heap, counted as a shortfall
    EXPECT_FALSE(l.fromRegion());
    for (int i = 0; i < slices; ++i) std::fill_n(l.slice(i), floats, 1.0f);  // all of it usable
  }
  EXPECT_EQ(c.shortfalls(), 3);
  EXPECT_GE(cpu::scratchStats().shortfallFloats, 33);
}

TEST(KernelScratch, NoRegionMeansTheHeapAndIsNotAShortfall) {
  const cpu::ScratchScope none(nullptr);
  const auto s0 = cpu::scratchStats();
  const cpu::ScratchLease l(100, 2);
  EXPECT_FALSE(l.fromRegion());
  EXPECT_EQ(l.slice(1), l.slice(0) + 100);
  const auto s1 = cpu::scratchStats();
  EXPECT_EQ(s1.unboundLeases - s0.unboundLeases, 1);
  EXPECT_EQ(s1.shortfalls, s0.shortfalls);
}

// Each scratch-taking op through the CPU backend: with a NaN region of exactly ScratchSizes.h's
// size bound, the same bits as unbound, every lease from the region, none short.
TEST(KernelScratch, OpsUseExactlyTheirSizeFromAPoisonedRegionAndMatchHeapScratch) {
  auto be = makeCpuBackend();
  const int threads = 2;
  be->setThreads(threads);
  ASSERT_EQ(be->scratchThreads(), threads);

  // Norm backwards: rows enough for both threads (worthThreading: N*C >= 2^15).
  const int N = 300, C = 257;
  const auto x = randomVec(size_t(N) * C, 1, -2.f, 2.f), g = randomVec(x.size(), 2);
  const auto w = randomVec(C, 3), b = randomVec(C, 4);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  be->layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                       1e-5f);
  auto layernorm = [&] {
    std::vector<float> dx(x.size(), 0.f), dw(C, 0.5f), db(C, 0.25f);
    be->layernormBackward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
    dx.insert(dx.end(), dw.begin(), dw.end());
    dx.insert(dx.end(), db.begin(), db.end());
    return dx;
  };
  auto rmsnorm = [&] {
    std::vector<float> dx(x.size(), 0.f), dw(C, 0.5f);
    be->rmsnormBackward(dx.data(), dw.data(), g.data(), x.data(), w.data(), rstd.data(), N, C);
    dx.insert(dx.end(), dw.begin(), dw.end());
    return dx;
  };
  // Flash attention, grouped queries (4 query heads on 2 kv heads), T over two tiles.
  const int B = 2, T = 100, NH = 4, KVH = 2, hs = 16, Ca = NH * hs;
  const int64_t C3 = int64_t(NH + 2 * KVH) * hs;
  const auto qkv = randomVec(size_t(B) * T * C3, 5), dout = randomVec(size_t(B) * T * Ca, 6);
  std::vector<float> att(size_t(B) * T * Ca), lse(size_t(B) * NH * T);
  auto flashForward = [&] {
    std::vector<float> o(att.size(), kNaN), l(lse.size(), kNaN);
    be->flashAttentionGqaForward(o.data(), l.data(), qkv.data(), B, T, Ca, NH, KVH);
    att = o;
    lse = l;
    o.insert(o.end(), l.begin(), l.end());
    return o;
  };
  auto flashBackward = [&] {
    std::vector<float> d(qkv.size(), kNaN);
    be->flashAttentionGqaBackward(d.data(), dout.data(), att.data(), lse.data(), qkv.data(), B, T,
                                  Ca, NH, KVH);
    return d;
  };
  // Distillation over V = 300.
  const int R = 64, V = 300;
  const auto logits = randomVec(size_t(R) * V, 7, -3.f, 3.f), teacher = randomVec(logits.size(), 8);
  std::vector<int32_t> targets(R);
  for (int i = 0; i < R; ++i) targets[i] = i % 5 == 0 ? -1 : (i * 37) % V;
  auto distill = [&] {
    std::vector<float> ce(R, kNaN), kl(R, kNaN), d(logits.size(), kNaN);
    be->distillForwardBackward(ce.data(), kl.data(), d.data(), logits.data(), teacher.data(),
                               targets.data(), R, V, 2.f, 0.5f, 1.f / R);
    d.insert(d.end(), ce.begin(), ce.end());
    d.insert(d.end(), kl.begin(), kl.end());
    return d;
  };

  struct Case {
    const char* name;
    int64_t perThread;
    std::function<std::vector<float>()> run;
  };
  const Case cases[] = {{"layernormBackward", ks::layernormBackward(C), layernorm},
                        {"rmsnormBackward", ks::rmsnormBackward(C), rmsnorm},
                        {"flashAttentionGqaForward", ks::flashForward(hs), flashForward},
                        {"flashAttentionGqaBackward", ks::flashBackward(hs, NH / KVH, T),
                         flashBackward},
                        {"distillForwardBackward", ks::distill(V), distill}};
  for (const auto& c : cases) {
    const auto want = c.run();  // unbound: zeroed heap scratch
    Counted n;
    std::vector<float> got;
    {
      const Region region(*be, c.perThread, threads);
      got = c.run();
    }
    EXPECT_EQ(n.regionLeases(), 1) << c.name;
    EXPECT_EQ(n.shortfalls(), 0) << c.name;
    EXPECT_TRUE(sameBits(got, want)) << c.name;
    // One float less per thread than ScratchSizes.h says: the kernel notices.
    Counted m;
    {
      const Region small(*be, c.perThread - 1, threads);
      got = c.run();
    }
    EXPECT_EQ(m.shortfalls(), 1) << c.name << " leases less than ScratchSizes.h says";
    EXPECT_TRUE(sameBits(got, want)) << c.name;
  }
}

// The emulated bf16 GEMM takes its two operand blocks in one piece on the calling thread, across
// a region's slices.
TEST(KernelScratch, EmulatedBf16GemmBlocksSpanTheRegion) {
  for (auto [M, N, K] : {std::tuple{37, 29, 300}, {600, 70, 513}}) {
    const auto a = randomVec(size_t(M) * K, 9), b = randomVec(size_t(K) * N, 10);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = floatToBf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = floatToBf16(b[i]);
    auto run = [&, M = M, N = N, K = K] {
      std::vector<float> c(size_t(M) * N, kNaN);
      cpu::matmulBf16Emulated(c.data(), a16.data(), b16.data(), M, N, K, false, false, 1.f, 0.f);
      return c;
    };
    const auto want = run();
    const int64_t need = ks::matmulBf16Emulated(M, N, K);
    const int threads = 3;
    std::vector<float> mem(size_t((need + threads - 1) / threads) * threads, kNaN);
    const cpu::ScratchRegion r{mem.data(), (need + threads - 1) / threads, threads};
    Counted n;
    std::vector<float> got;
    {
      const cpu::ScratchScope scope(&r);
      got = run();
    }
    EXPECT_EQ(n.regionLeases(), 1) << M << "x" << N << "x" << K;
    EXPECT_EQ(n.shortfalls(), 0);
    EXPECT_TRUE(sameBits(got, want)) << M << "x" << N << "x" << K;
  }
}
