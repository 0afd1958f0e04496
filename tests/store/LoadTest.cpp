// Load: a 1,000,000-step run recorded into one database by a real process. Nothing is lost
// (every step's row, in order, with its loss; the recorder acknowledged the last one) and the
// run stays browsable (listing, downsampled metrics, one page of rows). Label e2e: about a
// minute on 2 cores, too slow for the sanitizer run.
#include <gtest/gtest.h>

#include <fstream>

#include "StoreTestUtil.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts::core;
using namespace ts::test;

TEST(StoreLoad, AMillionStepRunIsRecordedWholeAndStaysBrowsable) {
  TempDir tmp;
  const std::string db = tmp / "runs.db";
  constexpr int64_t kSteps = 1000000;
  Child c({STORE_TEST_DRIVER, "record", db, tmp / "run", "million", std::to_string(kSteps), "0"});
  const std::string out = c.readAll();
  ASSERT_EQ(c.wait(), 0) << out;
  EXPECT_EQ(out.find("WARNING"), std::string::npos) << out;
  std::printf("%s", out.c_str());  // the driver's time inside record() vs the recorder's

  auto store = RunStore::open(db, RunStore::Mode::ReadOnly);
  auto runs = store.listRuns();
  ASSERT_EQ(runs.size(), 1u);
  const auto& r = runs[0];
  EXPECT_EQ(r.status, "completed");
  EXPECT_EQ(r.steps, kSteps);
  EXPECT_EQ(r.lastStep, kSteps - 1);
  ASSERT_TRUE(r.lastLoss);
  EXPECT_DOUBLE_EQ(*r.lastLoss, driverLoss(kSteps - 1));

  // Every row, in order, with the loss the driver recorded for it.
  const auto steps = store.steps(r.id);
  ASSERT_EQ(static_cast<int64_t>(steps.size()), kSteps);
  int64_t wrong = 0;
  for (int64_t s = 0; s < kSteps; ++s)
    wrong += steps[s].step != s || !steps[s].loss || *steps[s].loss != driverLoss(s);
  EXPECT_EQ(wrong, 0);

  // The recorder's last acknowledgement covers the last step.
  std::ifstream acks(tmp / "run/recorded.ndjson");
  std::string line, last;
  while (std::getline(acks, line))
    if (!line.empty()) last = line;
  ASSERT_FALSE(last.empty());
  EXPECT_EQ(nlohmann::json::parse(last)["step"].get<int64_t>(), kSteps - 1) << last;

  // Browsing: the chart's downsampled series keeps the extremes; a page of rows is a range.
  const auto series = store.metrics(r.id, MetricColumn::Loss, 2000);
  EXPECT_TRUE(series.downsampled);
  EXPECT_LE(series.points.size(), 2000u);
  EXPECT_EQ(series.totalSteps, kSteps);
  double lo = 1e9, hi = -1e9;
  for (const auto& p : series.points) {
    lo = std::min(lo, p.min);
    hi = std::max(hi, p.max);
  }
  EXPECT_NEAR(lo, 1.0, 1e-6);  // driverLoss = 2 + sin(0.01 s) spans [1, 3]
  EXPECT_NEAR(hi, 3.0, 1e-6);
  const auto page = store.steps(r.id, 500000, 500099);
  ASSERT_EQ(page.size(), 100u);
  EXPECT_EQ(page.front().step, 500000);
  EXPECT_EQ(page.back().step, 500099);
}
