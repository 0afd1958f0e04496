// The guarded CPU backend (GuardedCpuBackend.h) really guards: host reads and writes of its
// memory outside a backend call crash (death tests), an op running past an allocation's end hits
// the guard page, host pointers handed to ops and copies whose host side is backend memory are
// refused by name, and inside calls it computes what the CPU backend computes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <vector>

#include "TestUtil.h"
#include "trainscope/kernels/GuardedCpuBackend.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
// Runs `body` expecting std::logic_error with `needle` in its message.
template <class Body>
void expectRefused(Body body, const std::string& needle) {
  try {
    body();
    ADD_FAILURE() << "not refused: " << needle;
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(GuardedCpuBackend, IsTheCpuBackendWithoutHostAccess) {
  auto g = makeGuardedCpuBackend();
  auto c = makeCpuBackend();
  EXPECT_EQ(g->name(), "cpu-guarded");
  EXPECT_EQ(g->kind(), DeviceKind::Cpu);
  EXPECT_FALSE(g->hostAccessible());
  EXPECT_TRUE(c->hostAccessible());
  EXPECT_EQ(g->device().name, c->device().name);
  EXPECT_EQ(g->supports(Op::MatmulBF16, DType::BF16), c->supports(Op::MatmulBF16, DType::BF16));
  EXPECT_EQ(g->emulates(Op::MatmulBF16), c->emulates(Op::MatmulBF16));
  g->setThreads(1);
  EXPECT_EQ(g->threads(), 1);
  // Zero bytes allocate nothing, as on the CPU backend.
  EXPECT_EQ(g->allocate(0), nullptr);
  g->release(nullptr);
}

TEST(GuardedCpuBackend, ComputesThroughCallsAndStartsPoisoned) {
  auto g = makeGuardedCpuBackend();
  const size_t n = 1000;
  auto* p = static_cast<float*>(g->allocate(n * sizeof(float)));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::vector<float> h(n);
  g->copyToHost(h.data(), p, n * sizeof(float));
  for (float v : h) {
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    ASSERT_EQ(u, 0xFFFFFFFFu) << "fresh memory is not poisoned";
  }
  const auto x = randomVec(n, 3);
  g->copyToDevice(p, x.data(), n * sizeof(float));
  g->scale(p, int64_t(n), 2.f);
  g->copyToHost(h.data(), p, n * sizeof(float));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(h[i], 2.f * x[i]);
  EXPECT_EQ(g->sumSquares(p, 0), 0.0);
  g->release(p);
}

TEST(GuardedCpuBackend, RefusesHostPointersInOpsAndCopiesThatCrossWrongly) {
  auto g = makeGuardedCpuBackend();
  const size_t n = 64;
  auto* p = static_cast<float*>(g->allocate(n * sizeof(float)));
  auto* q = static_cast<float*>(g->allocate(n * sizeof(float)));
  std::vector<float> host(n, 1.f);
  expectRefused([&] { g->scale(host.data(), int64_t(n), 2.f); }, "scale");
  expectRefused([&] { g->accumulate(p, host.data(), int64_t(n)); }, "accumulate");
  expectRefused([&] { g->copyToDevice(host.data(), host.data(), 4); }, "copyToDevice");
  expectRefused([&] { g->copyToDevice(p, q, 4); }, "host side of copyToDevice");
  expectRefused([&] { g->copyToHost(q, p, 4); }, "host side of copyToHost");
  // Past the end of an allocation.
  expectRefused([&] { g->copyToHost(host.data(), p, (n + 1) * sizeof(float)); }, "copyToHost");
  // A refused call leaves the memory closed and usable.
  g->fillF32(p, 3.f, int64_t(n));
  g->copyToHost(host.data(), p, n * sizeof(float));
  EXPECT_EQ(host[n - 1], 3.f);
  g->release(p);
  g->release(q);
}

// Death tests fork; "threadsafe" re-runs the binary for each, so OpenMP threads are not copied.
TEST(GuardedCpuBackendDeathTest, HostReadOutsideABackendCallCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto g = makeGuardedCpuBackend();
  auto* p = static_cast<float*>(g->allocate(256));
  g->fillF32(p, 1.f, 64);
  EXPECT_DEATH(
      {
        volatile float v = p[3];
        (void)v;
      },
      "");
  g->release(p);
}

TEST(GuardedCpuBackendDeathTest, HostWriteOutsideABackendCallCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto g = makeGuardedCpuBackend();
  auto* p = static_cast<float*>(g->allocate(256));
  EXPECT_DEATH(
      {
        volatile float* w = p;
        w[0] = 2.f;
      },
      "");
  // memset as Tensor::zero once did.
  EXPECT_DEATH(std::memset(p, 0, 256), "");
  g->release(p);
}

TEST(GuardedCpuBackendDeathTest, AnOpRunningPastAnAllocationHitsTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto g = makeGuardedCpuBackend();
  auto* p = static_cast<float*>(g->allocate(100 * sizeof(float)));
  g->fillF32(p, 0.f, 100);  // fine
  EXPECT_DEATH(g->fillF32(p, 0.f, 100 + 2048), "");
  g->release(p);
}

// Pages discard() gave back stay closed inside calls until commit() takes them again, as an
// unmapped granule of a CUDA buffer would fault: engine code that forgets a commit crashes
// here. The partial pages at the range's ends stay usable and read as zero; committed pages
// read as zero.
TEST(GuardedCpuBackendDeathTest, GivenBackPagesNeedACommitBeforeAnyAccess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto g = makeGuardedCpuBackend();
  const int64_t n = 6 * 1024;  // six 4 KiB pages of floats (more where pages are larger)
  auto* p = static_cast<float*>(g->allocate(size_t(n) * sizeof(float)));
  g->fillF32(p, 5.f, n);
  const int64_t a = 100, e = n - 100;  // partial pages at both ends
  ASSERT_TRUE(g->discard(p + a, size_t(e - a) * sizeof(float)));
  const int64_t pageFloats = int64_t(sysconf(_SC_PAGESIZE)) / int64_t(sizeof(float));
  const int64_t inside = (a + pageFloats - 1) / pageFloats * pageFloats;  // a whole page given back
  ASSERT_LT(inside + pageFloats, e) << "the test needs a whole page inside the range";
  // The edges: zero inside the range, untouched outside it.
  std::vector<float> h(size_t(a + 1));
  g->copyToHost(h.data(), p, h.size() * sizeof(float));
  EXPECT_EQ(h[size_t(a - 1)], 5.f);
  EXPECT_EQ(h[size_t(a)], 0.f);
  EXPECT_DEATH(g->fillF32(p + inside, 1.f, 1), "");
  EXPECT_DEATH(
      {
        float v;
        g->copyToHost(&v, p + inside, sizeof v);
      },
      "");
  g->commit(p + inside, sizeof(float));
  float v = 1.f;
  g->copyToHost(&v, p + inside, sizeof v);
  EXPECT_EQ(v, 0.f);
  g->fillF32(p + inside, 2.f, pageFloats);  // the committed page takes writes
  EXPECT_DEATH(g->fillF32(p + inside + pageFloats, 1.f, 1), "") << "the next page is still gone";
  g->commit(p, size_t(n) * sizeof(float));
  g->fillF32(p, 3.f, n);
  g->release(p);
}
