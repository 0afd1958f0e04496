// Host tracer: recording on/off, nesting depth and containment, ordering, lanes per thread
// (std::thread and OpenMP workers), step/rank tagging, names from reused buffers.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "trainscope/profiler/Tracer.h"

using namespace ts::profiler;

namespace {

class TracerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tracer().setEnabled(false);
    tracer().setStep(-1);
    tracer().setRank(0);
    tracer().drain();
  }
  void TearDown() override {
    tracer().setEnabled(false);
    tracer().drain();
  }
  static Tracer& tracer() { return Tracer::instance(); }
};

// Busy wait so that ranges have a measurable, ordered extent without sleeping.
void spinNs(int64_t ns) {
  const int64_t end = Tracer::instance().nowNs() + ns;
  while (Tracer::instance().nowNs() < end) {
  }
}

const Span* find(const std::vector<Span>& spans, const std::string& name) {
  for (const Span& s : spans)
    if (s.name == name) return &s;
  return nullptr;
}

bool contains(const Span& outer, const Span& inner) {
  return outer.lane == inner.lane && outer.start_ns <= inner.start_ns &&
         inner.start_ns + inner.duration_ns <= outer.start_ns + outer.duration_ns;
}

}  // namespace

TEST_F(TracerTest, DisabledRecordsNothing) {
  for (int i = 0; i < 100; ++i) {
    ScopedRange r("off", SpanCategory::Gemm, 1.0);
    ScopedRange inner("off_inner", SpanCategory::Norm);
  }
  EXPECT_TRUE(tracer().drain().empty());
}

TEST_F(TracerTest, EnabledAfterRangeOpenedDoesNotRecordIt) {
  {
    ScopedRange r("opened_while_off", SpanCategory::Other);
    tracer().setEnabled(true);
  }
  EXPECT_TRUE(tracer().drain().empty());
}

TEST_F(TracerTest, NestingDepthContainmentAndOrder) {
  tracer().setEnabled(true);
  {
    ScopedRange outer("outer", SpanCategory::Block);
    spinNs(2000);
    {
      ScopedRange a("child_a", SpanCategory::Gemm, 128.0, 64);
      spinNs(2000);
    }
    {
      ScopedRange b("child_b", SpanCategory::Norm);
      ScopedRange c("grandchild", SpanCategory::Elementwise);
      spinNs(2000);
    }
  }
  auto spans = tracer().drain();
  ASSERT_EQ(spans.size(), 4u);
  // Ordered by start: outer, child_a, child_b, grandchild.
  EXPECT_EQ(spans[0].name, "outer");
  EXPECT_EQ(spans[1].name, "child_a");
  EXPECT_EQ(spans[2].name, "child_b");
  EXPECT_EQ(spans[3].name, "grandchild");
  EXPECT_EQ(spans[0].depth, 0);
  EXPECT_EQ(spans[1].depth, 1);
  EXPECT_EQ(spans[2].depth, 1);
  EXPECT_EQ(spans[3].depth, 2);
  EXPECT_TRUE(contains(spans[0], spans[1]));
  EXPECT_TRUE(contains(spans[0], spans[2]));
  EXPECT_TRUE(contains(spans[2], spans[3]));
  // Siblings don't overlap.
  EXPECT_LE(spans[1].start_ns + spans[1].duration_ns, spans[2].start_ns);
  EXPECT_GE(spans[1].duration_ns, 2000);
  EXPECT_EQ(spans[1].category, SpanCategory::Gemm);
  EXPECT_EQ(spans[1].flops, 128.0);
  EXPECT_EQ(spans[1].bytes, 64);
  EXPECT_FALSE(spans[1].device);
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].start_ns, spans[i].start_ns);
  // A second drain is empty: spans are taken, not copied.
  EXPECT_TRUE(tracer().drain().empty());
}

TEST_F(TracerTest, StepRankAndUniqueCorrelation) {
  tracer().setEnabled(true);
  tracer().setRank(3);
  for (int step = 0; step < 3; ++step) {
    tracer().setStep(step);
    ScopedRange r("op", SpanCategory::Elementwise);
    ScopedRange r2("op2", SpanCategory::Elementwise);
  }
  auto spans = tracer().drain();
  ASSERT_EQ(spans.size(), 6u);
  std::set<uint64_t> corr;
  std::map<int64_t, int> perStep;
  for (const Span& s : spans) {
    EXPECT_EQ(s.rank, 3);
    corr.insert(s.correlation);
    ++perStep[s.step];
  }
  EXPECT_EQ(corr.size(), 6u);
  EXPECT_EQ(corr.count(0), 0u);
  EXPECT_EQ(perStep, (std::map<int64_t, int>{{0, 2}, {1, 2}, {2, 2}}));
}

TEST_F(TracerTest, OpenRangeSurvivesDrainAndClear) {
  tracer().setEnabled(true);
  {
    ScopedRange outer("long", SpanCategory::Step);
    { ScopedRange inner("short", SpanCategory::Gemm); }
    auto first = tracer().drain();
    ASSERT_EQ(first.size(), 1u);
    EXPECT_EQ(first[0].name, "short");
    { ScopedRange dropped("dropped", SpanCategory::Gemm); }
    tracer().clear();
  }
  auto second = tracer().drain();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].name, "long");
  EXPECT_EQ(second[0].depth, 0);
}

TEST_F(TracerTest, NamesAreCopiedFromReusedBuffers) {
  tracer().setEnabled(true);
  char buf[64];
  const char* names[] = {"layer0.attn", "layer1.mlp", "a_rather_long_block_name_beyond_sso"};
  for (const char* n : names) {
    std::strcpy(buf, n);  // same pointer, different text each time
    ScopedRange r(buf, SpanCategory::Block);
  }
  std::strcpy(buf, "overwritten");
  auto spans = tracer().drain();
  ASSERT_EQ(spans.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(spans[i].name, names[i]);
}

TEST_F(TracerTest, StdThreadsGetOwnLanesAndNestCorrectly) {
  tracer().setEnabled(true);
  constexpr int kThreads = 4, kIters = 50;
  std::vector<int> lanes(kThreads, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &lanes] {
      lanes[t] = Tracer::instance().currentLane();
      const std::string outerName = "outer_t" + std::to_string(t);
      for (int i = 0; i < kIters; ++i) {
        ScopedRange outer(outerName.c_str(), SpanCategory::Block);
        ScopedRange mid("mid", SpanCategory::Gemm);
        ScopedRange leaf("leaf", SpanCategory::Elementwise);
      }
    });
  }
  for (auto& th : threads) th.join();
  auto spans = tracer().drain();
  ASSERT_EQ(spans.size(), static_cast<size_t>(kThreads * kIters * 3));
  EXPECT_EQ(std::set<int>(lanes.begin(), lanes.end()).size(), static_cast<size_t>(kThreads));
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].start_ns, spans[i].start_ns);

  // Per lane: every "outer_tN" is on thread N's lane, depth 0; each holds exactly one mid at
  // depth 1, which holds exactly one leaf at depth 2.
  std::map<int, std::vector<Span>> byLane;
  for (const Span& s : spans) byLane[s.lane].push_back(s);
  ASSERT_EQ(byLane.size(), static_cast<size_t>(kThreads));
  for (int t = 0; t < kThreads; ++t) {
    const auto& ls = byLane[lanes[t]];
    ASSERT_EQ(ls.size(), static_cast<size_t>(kIters * 3));
    for (size_t i = 0; i < ls.size(); i += 3) {
      EXPECT_EQ(ls[i].name, "outer_t" + std::to_string(t));
      EXPECT_EQ(ls[i].depth, 0);
      EXPECT_EQ(ls[i + 1].name, "mid");
      EXPECT_EQ(ls[i + 1].depth, 1);
      EXPECT_EQ(ls[i + 2].name, "leaf");
      EXPECT_EQ(ls[i + 2].depth, 2);
      EXPECT_TRUE(contains(ls[i], ls[i + 1]));
      EXPECT_TRUE(contains(ls[i + 1], ls[i + 2]));
      if (i + 3 < ls.size()) {
        EXPECT_LE(ls[i].start_ns + ls[i].duration_ns, ls[i + 3].start_ns);
      }
    }
  }
}

TEST_F(TracerTest, OpenMpWorkersRecordOnTheirOwnLanes) {
  tracer().setEnabled(true);
  constexpr int kThreads = 3;
  std::vector<int> laneOfWorker(kThreads, -1);
  int mainLane = tracer().currentLane();
  {
    ScopedRange region("parallel_matmul", SpanCategory::Gemm);
#pragma omp parallel num_threads(kThreads)
    {
      const int w = omp_get_thread_num();
      laneOfWorker[w] = Tracer::instance().currentLane();
      const std::string name = "chunk_w" + std::to_string(w);
      for (int i = 0; i < 10; ++i) {
        ScopedRange chunk(name.c_str(), SpanCategory::Gemm);
        spinNs(200);
      }
    }
  }
  auto spans = tracer().drain();
  const int workers = static_cast<int>(
      std::count_if(laneOfWorker.begin(), laneOfWorker.end(), [](int l) { return l >= 0; }));
  ASSERT_GE(workers, 1);
  EXPECT_EQ(laneOfWorker[0], mainLane);  // the master thread is worker 0
  std::set<int> distinct;
  for (int l : laneOfWorker)
    if (l >= 0) distinct.insert(l);
  EXPECT_EQ(distinct.size(), static_cast<size_t>(workers));
  const Span* region = find(spans, "parallel_matmul");
  ASSERT_NE(region, nullptr);
  EXPECT_EQ(region->lane, mainLane);
  int chunks = 0;
  for (const Span& s : spans) {
    if (s.name.rfind("chunk_w", 0) != 0) continue;
    ++chunks;
    const int w = std::stoi(s.name.substr(7));
    EXPECT_EQ(s.lane, laneOfWorker[w]) << s.name;
    // The master's chunks nest inside the region range; workers' chunks are top level.
    EXPECT_EQ(s.depth, w == 0 ? 1 : 0) << s.name;
    EXPECT_GE(s.start_ns, region->start_ns);
    EXPECT_LE(s.start_ns + s.duration_ns, region->start_ns + region->duration_ns);
  }
  EXPECT_EQ(chunks, workers * 10);
}

TEST_F(TracerTest, SpansOfExitedThreadsAreKeptAndLanesNamed) {
  tracer().setEnabled(true);
  int lane = -1;
  std::thread([&] {
    Tracer::instance().setThreadName("loader");
    lane = Tracer::instance().currentLane();
    ScopedRange r("load_batch", SpanCategory::Data);
  }).join();
  auto names = tracer().laneNames();
  ASSERT_TRUE(names.count(lane));
  EXPECT_EQ(names[lane], "loader");
  auto spans = tracer().drain();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].name, "load_batch");
  EXPECT_EQ(spans[0].lane, lane);
}

TEST(Category, NamesRoundTripAndGuesses) {
  const SpanCategory all[] = {
      SpanCategory::Gemm,        SpanCategory::Attention, SpanCategory::Norm,
      SpanCategory::Elementwise, SpanCategory::Optimizer, SpanCategory::Communication,
      SpanCategory::Memcpy,      SpanCategory::IO,        SpanCategory::Data,
      SpanCategory::Block,       SpanCategory::Step,      SpanCategory::Other};
  const char* names[] = {"gemm",   "attention", "norm", "elementwise", "optimizer", "communication",
                         "memcpy", "io",        "data", "block",       "step",      "other"};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_STREQ(toString(all[i]), names[i]);
    EXPECT_EQ(categoryFromString(names[i]), all[i]);
  }
  EXPECT_EQ(categoryFromString("bogus"), SpanCategory::Other);
  EXPECT_EQ(categoryForName("ampere_sgemm_128x64_nn", true), SpanCategory::Gemm);
  EXPECT_EQ(categoryForName("flash_fwd_kernel", true), SpanCategory::Attention);
  EXPECT_EQ(categoryForName("layernorm_bwd", true), SpanCategory::Norm);
  EXPECT_EQ(categoryForName("adamw_step_kernel", true), SpanCategory::Optimizer);
  EXPECT_EQ(categoryForName("ncclDevKernel_AllReduce_Sum_f32", true), SpanCategory::Communication);
  EXPECT_EQ(categoryForName("gelu_kernel", true), SpanCategory::Elementwise);
  EXPECT_EQ(categoryForName("mystery", true), SpanCategory::Elementwise);
  EXPECT_EQ(categoryForName("mystery", false), SpanCategory::Other);
}
