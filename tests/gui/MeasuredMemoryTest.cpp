// The dashboard's memory panel under measured bars: the tracker's total beside a count it does
// not make (the process's resident set on the CPU, the device's used bytes on CUDA) and their
// difference, each with a tooltip saying what it is; "—" where the run is followed from the
// database, whose samples carry the tracker's table only.
#include <gtest/gtest.h>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "MemoryBars.h"
#include "RunDashboard.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/LiveRun.h"
#include "trainscope/gui/RunRepository.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

constexpr int64_t MiB = int64_t{1} << 20;

// One rank: 120 MiB of parameters and 80 MiB of optimizer state, the tracker's 200 MiB.
core::MemoryReport trackedTable() {
  core::RankMemory r;
  r.rank = 0;
  r.at(core::MemoryTier::Device, core::MemoryCategory::Parameters) = {120 * MiB, 120 * MiB};
  r.at(core::MemoryTier::Device, core::MemoryCategory::OptimizerState) = {80 * MiB, 80 * MiB};
  core::MemoryReport rep;
  rep.ranks = {r};
  return rep;
}

struct Dashboard {
  LiveRun run{"measured"};
  EngineClient client{&run};
  RunDashboard dash{&run, nullptr};
  core::EventEncoder enc;
  Dashboard() {
    dash.resize(1200, 800);
    dash.show();
  }
  void feed(core::EventType t, const nlohmann::json& body) {
    client.feed(QByteArray::fromStdString(enc.encode(t, body)));
    dash.refresh();
  }
};

std::map<QString, MemoryBars::Figure> figuresOf(const MemoryBars* bars) {
  std::map<QString, MemoryBars::Figure> out;
  for (const auto& f : bars->figures()) out[f.label] = f;
  return out;
}

// Every tooltip the painted panel answers, top to bottom.
QStringList paintedTips(MemoryBars* bars) {
  bars->grab();  // paints: the tooltips follow what was drawn
  QStringList tips;
  for (int y = 0; y < bars->height(); ++y) {
    const QString t = bars->toolTipAt(QPoint(bars->width() / 2, y));
    if (!t.isEmpty() && (tips.isEmpty() || tips.back() != t)) tips << t;
  }
  return tips;
}

}  // namespace

TEST(MeasuredMemory, ResidentBesideTrackedOnTheCpu) {
  Dashboard d;
  auto body = core::toJson(trackedTable());
  body["step"] = 3;
  body["process"] = {{"rss", 330 * MiB},
                     {"peak_rss", 400 * MiB},
                     {"tracked", 200 * MiB},
                     {"tracked_peak", 200 * MiB}};
  d.feed(core::EventType::Memory, body);
  EXPECT_EQ(d.run.processMemory().value("rss", int64_t{0}), 330 * MiB);
  const auto f = figuresOf(d.dash.memoryBars());
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.at("Tracked").value, "200.0 MiB");
  EXPECT_EQ(f.at("Resident (OS)").value, "330.0 MiB");
  EXPECT_EQ(f.at("Untracked").value, "130.0 MiB");
  EXPECT_TRUE(f.at("Tracked").toolTip.contains(
      "tracked: the engine's own allocation list, the same list the estimator sums"));
  EXPECT_TRUE(f.at("Resident (OS)").toolTip.contains("resident: the OS's count for the process"));
  EXPECT_TRUE(f.at("Resident (OS)").toolTip.contains("peak 400.0 MiB"));
  EXPECT_TRUE(f.at("Untracked").toolTip.contains("resident minus tracked"));
  // Drawn, each line answering with its own tooltip.
  const QStringList tips = paintedTips(d.dash.memoryBars());
  ASSERT_EQ(tips.size(), 3) << tips.join("\n").toStdString();
  EXPECT_EQ(tips[0], f.at("Tracked").toolTip);
  EXPECT_EQ(tips[1], f.at("Resident (OS)").toolTip);
  EXPECT_EQ(tips[2], f.at("Untracked").toolTip);
}

TEST(MeasuredMemory, DeviceUsedBesideTrackedOnCuda) {
  Dashboard d;
  auto body = core::toJson(trackedTable());
  body["process"] = {{"rss", 900 * MiB}, {"tracked", 210 * MiB}};
  body["device_memory"] = {{"used", 712 * MiB},
                           {"total", 24576 * MiB},
                           {"tracked", 200 * MiB},
                           {"untracked", 512 * MiB}};
  d.feed(core::EventType::Memory, body);
  const auto f = figuresOf(d.dash.memoryBars());
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.at("Tracked").value, "200.0 MiB");
  EXPECT_EQ(f.at("Used on the device").value, "712.0 MiB");
  EXPECT_EQ(f.at("Untracked").value, "512.0 MiB");
  EXPECT_TRUE(f.at("Used on the device").toolTip.contains("cudaMemGetInfo"));
  EXPECT_TRUE(f.at("Used on the device").toolTip.contains("the device has 24.00 GiB"));
}

// Before a measurement the bars are the estimate: nothing to check it against, no figures.
TEST(MeasuredMemory, NoFiguresUnderAnEstimate) {
  Dashboard d;
  d.feed(core::EventType::MemoryPlan, core::toJson(trackedTable()));
  EXPECT_TRUE(d.dash.memoryBars()->figures().empty());
  EXPECT_TRUE(paintedTips(d.dash.memoryBars()).isEmpty());
}

// A run followed from the database (the app reopened on it): the samples read back carry the
// tracker's table, not the process's count, so resident and untracked read "—", saying why.
TEST(MeasuredMemory, FollowedFromTheDatabaseShowsADash) {
  QTemporaryDir tmp;
  core::RunRecorder::Options o;
  o.dbPath = tmp.filePath("runs.db").toStdString();
  o.runDir = tmp.filePath("run").toStdString();
  o.name = "followed";
  o.backend = "cpu";
  core::RunRecorder rec(o);
  ASSERT_GT(rec.runId(), 0);
  auto memory = core::toJson(trackedTable());
  memory["step"] = 1;
  memory["process"] = {{"rss", 330 * MiB}, {"tracked", 200 * MiB}};
  memory["type"] = "memory";
  memory["seq"] = 2;
  memory["time"] = 1.7e9 + 2;
  rec.record({{"type", "hello"}, {"seq", 0}, {"time", 1.7e9}, {"backend", "cpu"}, {"ranks", 1}});
  rec.record({{"type", "step"},
              {"seq", 1},
              {"time", 1.7e9 + 1},
              {"step", 1},
              {"loss", 2.0},
              {"lr", 1e-3},
              {"tokens", 64},
              {"tokens_per_s", 100.0}});
  rec.record(memory);
  rec.close();

  LiveRun run("followed");
  RunDashboard dash(&run, nullptr);
  dash.resize(1200, 800);
  dash.show();
  DatabaseFollower follower(RunRepository(o.dbPath), rec.runId(), &run);
  ASSERT_TRUE(testutil::waitFor([&] { return run.measured().has_value(); }, testutil::kWaitCapMs));
  dash.refresh();
  EXPECT_TRUE(run.processMemory().is_null());
  const auto f = figuresOf(dash.memoryBars());
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.at("Tracked").value, "200.0 MiB");  // the table's own total
  EXPECT_EQ(f.at("Resident (OS)").value, "—");
  EXPECT_EQ(f.at("Untracked").value, "—");
  EXPECT_TRUE(f.at("Resident (OS)").toolTip.contains("Not known for this run"));
}
