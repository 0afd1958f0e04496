// The tracker's numbers against docs/memory.md's formulas, byte for byte.
#include <gtest/gtest.h>

#include <algorithm>

#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"

using namespace ts::engine;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;

namespace {

struct Shape {
  int B, T, C, NH, L, V;
  bool flash;
  std::string opt;
};

class MemoryFormula : public ::testing::TestWithParam<Shape> {};

}  // namespace

TEST_P(MemoryFormula, TrackerMatchesDocumentedFormula) {
  const Shape s = GetParam();
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  GptConfig cfg;
  cfg.layers = s.L;
  cfg.heads = s.NH;
  cfg.d_model = s.C;
  cfg.seq_len = s.T;
  cfg.vocab = s.V;
  cfg.flash = s.flash;
  Gpt model(cfg, backend.get(), &tracker);
  model.allocate(s.B);
  ts::core::OptimizerConfig oc;
  oc.type = s.opt;
  auto opt = makeOptimizer(oc, model.arena(), backend.get(), &tracker);

  // docs/memory.md
  const int64_t B = s.B, T = s.T, C = s.C, NH = s.NH, L = s.L, V = s.V, N = B * T;
  const int64_t P = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  const int64_t A = s.flash ? B * NH * T : B * NH * T * T;
  const int64_t acts = 4 * (2 * N + L * (16 * N * C + 4 * N + A) + 2 * N * C + 3 * N + N * V);
  // The kernel scratch region: a slice per thread, the largest of the LayerNorm backward's
  // partials (2C) and, with flash, its forward and backward tiles (64-row tiles, hd = C/NH).
  const int64_t hd = C / NH, threads = backend->threads();
  const int64_t slice =
      s.flash ? std::max({2 * C, 64 * 64 + 64 * hd, 2 * 64 * 64 + 2 * 64 * hd + T}) : 2 * C;
  const int64_t ws = 4 * (N + 13 * N * C + (s.flash ? 0 : B * NH * T * T)) + 4 * threads * slice;
  const int64_t optBytes = (s.opt == "adamw" ? 8 : 4) * P;

  auto peak = [&](MemoryCategory c) { return tracker.peak(MemoryTier::Device, c); };
  EXPECT_EQ(peak(MemoryCategory::Parameters), 4 * P);
  EXPECT_EQ(peak(MemoryCategory::Gradients), 4 * P);
  EXPECT_EQ(peak(MemoryCategory::OptimizerState), optBytes);
  EXPECT_EQ(peak(MemoryCategory::Activations), acts);
  EXPECT_EQ(peak(MemoryCategory::Workspace), ws);
  EXPECT_EQ(tracker.totalPeak(), 8 * P + optBytes + acts + ws);

  // A training step allocates nothing more.
  std::vector<int32_t> tok(N), tgt(N);
  for (int64_t i = 0; i < N; ++i) tok[i] = int32_t(i % V), tgt[i] = int32_t((i * 7 + 1) % V);
  model.forward(tok.data(), tgt.data(), s.B, s.T, 1.f / N);
  model.backward();
  opt->step(1e-3f);
  EXPECT_EQ(tracker.totalPeak(), 8 * P + optBytes + acts + ws);
  const auto report = tracker.report();
  ASSERT_EQ(report.ranks.size(), 1u);
  EXPECT_EQ(report.ranks[0].at(MemoryTier::Device, MemoryCategory::Activations).current, acts);
  EXPECT_EQ(report.ranks[0].at(MemoryTier::Host, MemoryCategory::Parameters).peak, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MemoryFormula,
                         ::testing::Values(Shape{3, 7, 24, 3, 2, 19, false, "adamw"},
                                           Shape{2, 9, 16, 2, 3, 30, true, "sgd"},
                                           Shape{16, 32, 64, 4, 2, 14, false, "adamw"}));

TEST(MemoryTracker, CurrentAndPeakFollowTensorLifetimes) {
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  {
    Tensor a(backend.get(), &tracker, MemoryCategory::Workspace, DType::F32, {10, 10});
    Tensor b(backend.get(), &tracker, MemoryCategory::Workspace, DType::BF16, {7});
    Tensor c(backend.get(), &tracker, MemoryCategory::Parameters, DType::NF4, {5});
    Tensor d(backend.get(), &tracker, MemoryCategory::Parameters, DType::F8E4M3, {9});
    EXPECT_EQ(b.bytes(), 14);
    EXPECT_EQ(c.bytes(), 3);  // half a byte per element, rounded up
    EXPECT_EQ(d.bytes(), 9);
    EXPECT_EQ(tracker.current(MemoryTier::Device, MemoryCategory::Workspace), 414);
    Tensor moved = std::move(a);
    EXPECT_EQ(tracker.current(MemoryTier::Device, MemoryCategory::Workspace), 414);
  }
  EXPECT_EQ(tracker.current(MemoryTier::Device, MemoryCategory::Workspace), 0);
  EXPECT_EQ(tracker.peak(MemoryTier::Device, MemoryCategory::Workspace), 414);
  EXPECT_EQ(tracker.totalPeak(), 414 + 12);
  tracker.resetPeaks();
  EXPECT_EQ(tracker.totalPeak(), 0);
  EXPECT_GT(processRssBytes(), 0);
}
