// LR schedules against the published values in ../shared/reference.md (Hugging Face
// get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup) and closed forms.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "trainscope/core/config/Schedule.h"

using ts::core::RunConfig;

namespace {

RunConfig scheduleConfig(const std::string& type, int64_t warmup, int64_t total, double maxLr,
                         double minLr = 0.0) {
  RunConfig c;
  c.schedule.type = type;
  c.schedule.warmup_steps = warmup;
  c.schedule.min_lr = minLr;
  c.train.steps = total;
  c.optimizer.lr = maxLr;
  return c;
}

}  // namespace

TEST(Schedule, CosineMatchesHuggingFaceReferenceValues) {
  // reference.md: HF, warmup 100, total 1000: step 0 -> 0, 50 -> 0.5 max, 550 -> 0.5 max.
  const double maxLr = 3e-4;
  const RunConfig c = scheduleConfig("cosine", 100, 1000, maxLr);
  EXPECT_DOUBLE_EQ(ts::core::learningRate(c, 0), 0.0);
  EXPECT_NEAR(ts::core::learningRate(c, 50), 0.5 * maxLr, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 550), 0.5 * maxLr, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 100), maxLr, 1e-15);  // end of warmup: peak
  EXPECT_NEAR(ts::core::learningRate(c, 1000), 0.0, 1e-15);   // end of run
  EXPECT_NEAR(ts::core::learningRate(c, 5000), 0.0, 1e-15);   // past the end: stays there
  // A quarter of the way through the decay: 0.5 * (1 + cos(pi/4)).
  EXPECT_NEAR(ts::core::learningRate(c, 325), maxLr * 0.5 * (1 + std::sqrt(0.5)), 1e-15);
}

TEST(Schedule, CosineWithMinLrFloorFollowsNanoGpt) {
  // nanoGPT get_lr: min_lr + coeff * (max_lr - min_lr), coeff = 0.5 * (1 + cos(pi * ratio)).
  const RunConfig c = scheduleConfig("cosine", 100, 1000, 6e-4, 6e-5);
  EXPECT_NEAR(ts::core::learningRate(c, 550), (6e-4 + 6e-5) / 2, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 1000), 6e-5, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 999),
              6e-5 + 5.4e-4 * 0.5 * (1 + std::cos(std::numbers::pi * 899.0 / 900.0)), 1e-15);
  // Warmup still starts at zero and is linear.
  EXPECT_DOUBLE_EQ(ts::core::learningRate(c, 0), 0.0);
  EXPECT_NEAR(ts::core::learningRate(c, 25), 6e-4 / 4, 1e-15);
}

TEST(Schedule, LinearMatchesHuggingFaceReferenceValues) {
  // HF linear schedule: max * (total - step) / (total - warmup) after warmup.
  const RunConfig c = scheduleConfig("linear", 100, 1000, 1.0);
  EXPECT_DOUBLE_EQ(ts::core::learningRate(c, 0), 0.0);
  EXPECT_NEAR(ts::core::learningRate(c, 50), 0.5, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 550), 0.5, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 775), 0.25, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(c, 1000), 0.0, 1e-15);
  const RunConfig floored = scheduleConfig("linear", 0, 100, 1.0, 0.2);
  EXPECT_NEAR(ts::core::learningRate(floored, 0), 1.0, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(floored, 50), 0.6, 1e-15);
  EXPECT_NEAR(ts::core::learningRate(floored, 100), 0.2, 1e-15);
}

TEST(Schedule, ConstantHoldsMaxAfterWarmup) {
  const RunConfig c = scheduleConfig("constant", 10, 100, 2e-3);
  EXPECT_NEAR(ts::core::learningRate(c, 5), 1e-3, 1e-18);
  for (int64_t s : {10, 50, 99, 100, 1000}) EXPECT_DOUBLE_EQ(ts::core::learningRate(c, s), 2e-3);
  const RunConfig noWarmup = scheduleConfig("constant", 0, 100, 2e-3);
  EXPECT_DOUBLE_EQ(ts::core::learningRate(noWarmup, 0), 2e-3);
}

TEST(Schedule, WarmupLongerThanRunDoesNotDivideByZero) {
  const RunConfig c = scheduleConfig("cosine", 100, 100, 1.0, 0.1);
  EXPECT_NEAR(ts::core::learningRate(c, 99), 0.99, 1e-15);
  const double atEnd = ts::core::learningRate(c, 100);
  EXPECT_TRUE(std::isfinite(atEnd));
  EXPECT_NEAR(atEnd, 0.1, 1e-15);
}

TEST(Schedule, CurveSamplesBothEnds) {
  const RunConfig c = scheduleConfig("cosine", 10, 101, 1.0);
  const auto steps = ts::core::scheduleCurveSteps(c, 11);
  const auto lrs = ts::core::scheduleCurve(c, 11);
  ASSERT_EQ(steps.size(), 11u);
  ASSERT_EQ(lrs.size(), 11u);
  EXPECT_EQ(steps.front(), 0);
  EXPECT_EQ(steps.back(), 100);
  EXPECT_EQ(steps[1], 10);
  for (size_t i = 0; i < lrs.size(); ++i)
    EXPECT_DOUBLE_EQ(lrs[i], ts::core::learningRate(c, steps[i]));
  EXPECT_DOUBLE_EQ(lrs[1], 1.0);  // step 10 = end of warmup
  EXPECT_TRUE(ts::core::scheduleCurve(c, 0).empty());
  EXPECT_EQ(ts::core::scheduleCurve(c, 1).size(), 1u);
}

TEST(Curriculum, NoneIsAlwaysFull) {
  RunConfig c;
  c.train.steps = 100;
  for (int64_t s : {0, 10, 100}) EXPECT_DOUBLE_EQ(ts::core::curriculumFraction(c, s), 1.0);
}

TEST(Curriculum, LinearPacingReachesFullAtFullAt) {
  RunConfig c;
  c.train.steps = 1000;
  c.curriculum.type = "difficulty";
  c.curriculum.pacing = "linear";
  c.curriculum.full_at = 0.5;
  EXPECT_NEAR(ts::core::curriculumFraction(c, 0), 0.1, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 250), 0.55, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 500), 1.0, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 900), 1.0, 1e-15);
}

TEST(Curriculum, RootPacingIsCompetenceBased) {
  // Platanios et al. 2019: c(t) = min(1, sqrt(t (1 - c0^2) / T + c0^2)).
  RunConfig c;
  c.train.steps = 1000;
  c.curriculum.type = "length";
  c.curriculum.pacing = "root";
  c.curriculum.full_at = 0.4;  // T = 400 steps
  EXPECT_NEAR(ts::core::curriculumFraction(c, 0), 0.1, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 100), std::sqrt(0.25 * 0.99 + 0.01), 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 400), 1.0, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 999), 1.0, 1e-15);
  // Root pacing front-loads: ahead of linear at every interior point.
  RunConfig lin = c;
  lin.curriculum.pacing = "linear";
  for (int64_t s = 1; s < 400; s += 37)
    EXPECT_GT(ts::core::curriculumFraction(c, s), ts::core::curriculumFraction(lin, s));
}

TEST(Curriculum, StepPacingHasFourStages) {
  RunConfig c;
  c.train.steps = 800;
  c.curriculum.type = "difficulty";
  c.curriculum.pacing = "step";
  c.curriculum.full_at = 0.5;  // full at step 400, stages every 100 steps
  EXPECT_NEAR(ts::core::curriculumFraction(c, 0), 0.1, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 99), 0.1, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 100), 0.1 + 0.9 * 0.25, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 250), 0.1 + 0.9 * 0.5, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 399), 0.1 + 0.9 * 0.75, 1e-15);
  EXPECT_NEAR(ts::core::curriculumFraction(c, 400), 1.0, 1e-15);
}

TEST(Curriculum, NeverDecreases) {
  for (const char* pacing : {"linear", "root", "step"}) {
    RunConfig c;
    c.train.steps = 300;
    c.curriculum.type = "difficulty";
    c.curriculum.pacing = pacing;
    double prev = 0;
    for (int64_t s = 0; s <= 300; ++s) {
      const double f = ts::core::curriculumFraction(c, s);
      EXPECT_GE(f, prev) << pacing << " step " << s;
      EXPECT_GT(f, 0.0);
      EXPECT_LE(f, 1.0);
      prev = f;
    }
  }
}
