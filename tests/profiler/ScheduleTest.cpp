// ProfileSchedule step sets (hand-listed from torch.profiler.schedule's definition) and the
// controller that drives the tracer: windows, warmup discarded, on-demand capture.
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "trainscope/profiler/DeviceCollector.h"
#include "trainscope/profiler/ProfileSchedule.h"

using namespace ts::profiler;

namespace {

std::set<int64_t> stepsWith(const ProfileSchedule& s, ProfileAction a, int64_t n) {
  std::set<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    if (s.action(i) == a) out.insert(i);
  return out;
}

std::set<int64_t> recorded(const ProfileSchedule& s, int64_t n) {
  std::set<int64_t> out;
  for (int64_t i = 0; i < n; ++i)
    if (s.records(i)) out.insert(i);
  return out;
}

struct Outcome {
  std::vector<ProfileWindow> windows;
  std::vector<ProfileAction> actions;
};

// Runs `steps` steps with one range per step named after nothing in particular, asking for
// on-demand captures at the given steps (before that step begins).
Outcome run(ProfileController& c, int64_t steps,
            const std::vector<std::pair<int64_t, int>>& requests = {}) {
  Outcome o;
  for (int64_t step = 0; step < steps; ++step) {
    for (auto [at, n] : requests)
      if (at == step) c.requestSteps(n);
    o.actions.push_back(c.beginStep(step));
    { ScopedRange r("work", SpanCategory::Gemm); }
    if (auto w = c.endStep(step)) o.windows.push_back(std::move(*w));
  }
  return o;
}

std::set<int64_t> stepsOf(const ProfileWindow& w) {
  std::set<int64_t> s;
  for (const Span& sp : w.spans) s.insert(sp.step);
  return s;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Tracer::instance().setEnabled(false);
    Tracer::instance().drain();
  }
  void TearDown() override {
    Tracer::instance().setEnabled(false);
    Tracer::instance().drain();
  }
};

}  // namespace

TEST(ProfileSchedule, DefaultNeverRecords) {
  ProfileSchedule s;
  EXPECT_TRUE(recorded(s, 100).empty());
  EXPECT_TRUE(stepsWith(s, ProfileAction::Warmup, 100).empty());
}

TEST(ProfileSchedule, WaitWarmupActiveOnce) {
  ProfileSchedule s(1, 1, 3, 1);  // the config defaults
  EXPECT_EQ(stepsWith(s, ProfileAction::None, 12), (std::set<int64_t>{0, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(stepsWith(s, ProfileAction::Warmup, 12), (std::set<int64_t>{1}));
  EXPECT_EQ(stepsWith(s, ProfileAction::Record, 12), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(stepsWith(s, ProfileAction::RecordAndSave, 12), (std::set<int64_t>{4}));
}

TEST(ProfileSchedule, RepeatCycles) {
  ProfileSchedule s(2, 1, 2, 2);  // cycle of 5: N N W R S | N N W R S | nothing
  EXPECT_EQ(recorded(s, 20), (std::set<int64_t>{3, 4, 8, 9}));
  EXPECT_EQ(stepsWith(s, ProfileAction::Warmup, 20), (std::set<int64_t>{2, 7}));
  EXPECT_EQ(stepsWith(s, ProfileAction::RecordAndSave, 20), (std::set<int64_t>{4, 9}));
}

TEST(ProfileSchedule, RepeatZeroIsForever) {
  ProfileSchedule s(1, 0, 1, 0);  // N S N S ...
  EXPECT_EQ(stepsWith(s, ProfileAction::RecordAndSave, 10), (std::set<int64_t>{1, 3, 5, 7, 9}));
  EXPECT_TRUE(s.records(1001));
  EXPECT_FALSE(s.records(1000));
}

TEST(ProfileSchedule, BackToBackWindowsAndDegenerateInput) {
  ProfileSchedule s(0, 0, 2, 3);  // R S R S R S
  EXPECT_EQ(stepsWith(s, ProfileAction::RecordAndSave, 10), (std::set<int64_t>{1, 3, 5}));
  EXPECT_EQ(recorded(s, 10), (std::set<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_TRUE(recorded(ProfileSchedule(1, 1, 0, 1), 20).empty());
  EXPECT_EQ(recorded(ProfileSchedule(-3, -1, 1, 1), 5), (std::set<int64_t>{0}));
  EXPECT_EQ(ProfileSchedule(1, 1, 1, 1).action(-1), ProfileAction::None);
}

TEST_F(ControllerTest, ScheduledWindowsHoldExactlyTheirSteps) {
  ProfileController c(ProfileSchedule(1, 1, 2, 2));  // cycle 4: N W R S | N W R S
  auto o = run(c, 12);
  ASSERT_EQ(o.windows.size(), 2u);
  EXPECT_EQ(o.windows[0].index, 0);
  EXPECT_EQ(o.windows[0].firstStep, 2);
  EXPECT_EQ(o.windows[0].lastStep, 3);
  EXPECT_EQ(stepsOf(o.windows[0]), (std::set<int64_t>{2, 3}));  // warmup step 1 discarded
  EXPECT_EQ(o.windows[0].spans.size(), 2u);
  EXPECT_FALSE(o.windows[0].onDemand);
  EXPECT_GT(o.windows[0].stepTimeNs, 0);
  EXPECT_EQ(o.windows[1].index, 1);
  EXPECT_EQ(stepsOf(o.windows[1]), (std::set<int64_t>{6, 7}));
  EXPECT_EQ(o.actions[1], ProfileAction::Warmup);
  EXPECT_EQ(o.actions[2], ProfileAction::Record);
  EXPECT_EQ(o.actions[3], ProfileAction::RecordAndSave);
  EXPECT_EQ(o.actions[8], ProfileAction::None);
  EXPECT_FALSE(Tracer::instance().enabled());  // off after the last window
  EXPECT_TRUE(Tracer::instance().drain().empty());
}

TEST_F(ControllerTest, OnDemandCapturesTheNextNSteps) {
  ProfileController c;  // no schedule
  auto o = run(c, 10, {{4, 3}});
  ASSERT_EQ(o.windows.size(), 1u);
  EXPECT_TRUE(o.windows[0].onDemand);
  EXPECT_EQ(o.windows[0].firstStep, 4);
  EXPECT_EQ(o.windows[0].lastStep, 6);
  EXPECT_EQ(stepsOf(o.windows[0]), (std::set<int64_t>{4, 5, 6}));
  EXPECT_EQ(o.actions[3], ProfileAction::None);
  EXPECT_EQ(o.actions[4], ProfileAction::Record);
  EXPECT_EQ(o.actions[7], ProfileAction::None);
}

TEST_F(ControllerTest, OnDemandRequestFromAnotherThreadAndExtension) {
  ProfileController c;
  std::vector<ProfileWindow> windows;
  for (int64_t step = 0; step < 12; ++step) {
    if (step == 2) std::thread([&] { c.requestSteps(2); }).join();
    if (step == 3) c.requestSteps(3);  // while running: extends to max(left=1, 3)
    if (step == 3) c.requestSteps(1);  // a smaller request doesn't shorten it
    c.beginStep(step);
    { ScopedRange r("work", SpanCategory::Gemm); }
    if (auto w = c.endStep(step)) windows.push_back(std::move(*w));
  }
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(stepsOf(windows[0]), (std::set<int64_t>{2, 3, 4, 5}));
}

TEST_F(ControllerTest, OnDemandOverlappingAScheduledWindow) {
  ProfileController c(ProfileSchedule(3, 0, 2, 1));  // records 3, 4
  auto o = run(c, 10, {{2, 4}});                     // on demand: 2, 3, 4, 5
  // The scheduled window closes at its last step (4); the rest of the request is its own
  // window.
  ASSERT_EQ(o.windows.size(), 2u);
  EXPECT_EQ(stepsOf(o.windows[0]), (std::set<int64_t>{2, 3, 4}));
  EXPECT_TRUE(o.windows[0].onDemand);
  EXPECT_EQ(stepsOf(o.windows[1]), (std::set<int64_t>{5}));
}

TEST_F(ControllerTest, FailingDeviceCollectorBecomesAWarning) {
  struct Broken : DeviceCollector {
    std::string name() const override { return "fake"; }
    bool start(std::string* why) override {
      ++starts;
      *why = "no device here";
      return false;
    }
    void stop() override {}
    bool active() const override { return false; }
    std::vector<Span> flush() override { return {}; }
    int64_t droppedRecords() const override { return 0; }
    int starts = 0;
  } broken;
  ProfileController c(ProfileSchedule(0, 0, 1, 0));
  c.setDeviceCollector(&broken);
  auto o = run(c, 3);
  EXPECT_EQ(o.windows.size(), 3u);  // host ranges still recorded
  EXPECT_EQ(broken.starts, 1);      // not retried every window
  auto warnings = c.takeWarnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("no device here"), std::string::npos);
  EXPECT_NE(warnings[0].find("fake"), std::string::npos);
}

TEST_F(ControllerTest, DeviceSpansMergeAndTakeTheLaunchingRangesStep) {
  // A fake device: one "kernel" per host range, linked through the range listener the way the
  // CUPTI collector links real kernels.
  struct Fake : DeviceCollector, RangeListener {
    std::string name() const override { return "fake"; }
    bool start(std::string*) override {
      Tracer::instance().setRangeListener(this);
      return on = true;
    }
    void stop() override {
      Tracer::instance().setRangeListener(nullptr);
      on = false;
    }
    bool active() const override { return on; }
    std::vector<Span> flush() override {
      std::vector<Span> out;
      for (auto [corr, t] : launched) {
        Span k;
        k.name = "kernel";
        k.device = true;
        k.lane = 7;
        k.correlation = corr;
        k.start_ns = t + 1;
        k.duration_ns = 5;
        out.push_back(k);
      }
      launched.clear();
      dropped += 2;
      return out;
    }
    int64_t droppedRecords() const override { return dropped; }
    void onRangeBegin(uint64_t c) override { launched.emplace_back(c, Tracer::instance().nowNs()); }
    void onRangeEnd(uint64_t) override {}
    bool on = false;
    std::vector<std::pair<uint64_t, int64_t>> launched;
    int64_t dropped = 0;
  } fake;
  Tracer::instance().setRank(2);
  ProfileController c(ProfileSchedule(1, 1, 2, 1));  // N W R S
  c.setDeviceCollector(&fake);
  auto o = run(c, 5);
  Tracer::instance().setRank(0);
  ASSERT_EQ(o.windows.size(), 1u);
  const auto& w = o.windows[0];
  ASSERT_EQ(w.spans.size(), 4u);  // 2 host ranges + 2 kernels; the warmup kernel was dropped
  std::map<uint64_t, int64_t> hostStep;
  for (const Span& s : w.spans)
    if (!s.device) hostStep[s.correlation] = s.step;
  int kernels = 0;
  for (const Span& s : w.spans) {
    if (!s.device) continue;
    ++kernels;
    ASSERT_TRUE(hostStep.count(s.correlation));
    EXPECT_EQ(s.step, hostStep[s.correlation]);
    EXPECT_EQ(s.rank, 2);
  }
  EXPECT_EQ(kernels, 2);
  for (size_t i = 1; i < w.spans.size(); ++i)
    EXPECT_LE(w.spans[i - 1].start_ns, w.spans[i].start_ns);
  EXPECT_EQ(w.droppedDeviceRecords, 2);  // counted during the window only
  EXPECT_FALSE(fake.on);                 // stopped at window end
}
