// Several ranks in the GUI: the dashboard's memory panel draws one measured bar per rank with
// that rank's prediction marked, the figures line shows the bytes sent in collectives per
// step, and the wizard writes the mpirun hostfile into the config.
#include <gtest/gtest.h>
#include <QDir>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "MemoryBars.h"
#include "RunDashboard.h"
#include "RunWizard.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/LiveRun.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

using core::MemoryCategory;
using core::MemoryTier;

// One rank's table: parameters and optimizer state on the device, `act` of activations.
core::RankMemory rankMemory(int rank, int64_t params, int64_t optim, int64_t act) {
  core::RankMemory r;
  r.rank = rank;
  r.at(MemoryTier::Device, MemoryCategory::Parameters) = {params, params};
  r.at(MemoryTier::Device, MemoryCategory::OptimizerState) = {optim, optim};
  r.at(MemoryTier::Device, MemoryCategory::Activations) = {act / 2, act};
  return r;
}

int64_t deviceTotal(const core::RankMemory& r) {
  return r.totalPeak(MemoryTier::Device);
}

QByteArray line(core::EventEncoder& enc, core::EventType t, const nlohmann::json& body) {
  return QByteArray::fromStdString(enc.encode(t, body));
}

// The engine's `memory` event of a 2-rank run: rank 0 gathered both tables (ZeRO-1: each
// rank holds half the optimizer state, rank 1 a little less activation memory).
nlohmann::json twoRankMemoryEvent(const core::RankMemory& r0, const core::RankMemory& r1) {
  core::MemoryReport rep;
  rep.ranks = {r0, r1};
  auto j = core::toJson(rep);
  j["rank_process"] = nlohmann::json::array({{{"rss", 1 << 20}}, {{"rss", 1 << 20}}});
  j["step"] = 1;
  return j;
}

core::StepEvent step(int64_t n) {
  core::StepEvent s;
  s.step = n;
  s.loss = 3.0;
  s.lr = 1e-3;
  s.tokens = n * 2048;
  s.tokens_per_s = 4000;
  s.step_ms = 500;
  return s;
}

struct Dashboard {
  LiveRun run{"two ranks"};
  EngineClient client{&run};
  RunDashboard dash{&run, nullptr};
  core::EventEncoder enc;
  Dashboard() {
    dash.resize(1200, 800);
    dash.show();
  }
  void feed(core::EventType t, const nlohmann::json& body) {
    client.feed(line(enc, t, body));
    dash.refresh();
  }
};

}  // namespace

TEST(MultiRank, PredictionIsMatchedByRankElseRankZero) {
  core::MemoryReport measured;
  measured.ranks = {rankMemory(0, 100, 50, 10), rankMemory(1, 100, 50, 20),
                    rankMemory(2, 100, 50, 30)};
  core::MemoryReport plan;  // out of order, and no rank 2
  plan.ranks = {rankMemory(1, 100, 40, 25), rankMemory(0, 100, 60, 15)};
  const auto p = predictionPerRank(measured, plan);
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[0].rank, 0);
  EXPECT_EQ(deviceTotal(p.ranks[0]), 175);
  EXPECT_EQ(p.ranks[1].rank, 1);
  EXPECT_EQ(deviceTotal(p.ranks[1]), 165);
  EXPECT_EQ(p.ranks[2].rank, 2);  // not in the plan: its rank 0
  EXPECT_EQ(deviceTotal(p.ranks[2]), 175);
  EXPECT_TRUE(predictionPerRank(measured, core::MemoryReport{}).ranks.empty());
}

TEST(MultiRank, DashboardDrawsOneBarPerRankWithItsPrediction) {
  Dashboard d;
  // The plan of one representative rank (what the estimator sends by default).
  core::MemoryReport plan;
  plan.ranks = {rankMemory(0, 4000, 3000, 2000)};
  d.feed(core::EventType::MemoryPlan, core::toJson(plan));
  // Before a measurement: the plan alone.
  auto rows = d.dash.memoryBars()->rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].deviceBytes, 9000);
  EXPECT_FALSE(rows[0].predictedDeviceBytes);

  const auto r0 = rankMemory(0, 4000, 3100, 2100), r1 = rankMemory(1, 4000, 3100, 1700);
  d.feed(core::EventType::Memory, twoRankMemoryEvent(r0, r1));
  rows = d.dash.memoryBars()->rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].rank, 0);
  EXPECT_EQ(rows[0].deviceBytes, deviceTotal(r0));
  EXPECT_EQ(rows[0].deviceBytes, 9200);
  EXPECT_EQ(rows[1].rank, 1);
  EXPECT_EQ(rows[1].deviceBytes, deviceTotal(r1));
  EXPECT_EQ(rows[1].deviceBytes, 8800);
  // The plan has rank 0 only: both bars carry its prediction.
  ASSERT_TRUE(rows[0].predictedDeviceBytes && rows[1].predictedDeviceBytes);
  EXPECT_EQ(*rows[0].predictedDeviceBytes, 9000);
  EXPECT_EQ(*rows[1].predictedDeviceBytes, 9000);
  // Memory over time: one curve per rank.
  ASSERT_EQ(d.run.memoryOverTime().size(), 2u);
  EXPECT_DOUBLE_EQ(d.run.memoryOverTime()[1].lastY(), 4000 + 3100 + 850);

  // A per-rank plan: each bar gets its own rank's prediction.
  core::MemoryReport plan2;
  plan2.ranks = {rankMemory(1, 4000, 3000, 1600), rankMemory(0, 4000, 3000, 2000)};
  d.feed(core::EventType::MemoryPlan, core::toJson(plan2));
  rows = d.dash.memoryBars()->rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].predictedDeviceBytes.value_or(-1), 9000);
  EXPECT_EQ(rows[1].predictedDeviceBytes.value_or(-1), 8600);
  // Painting several ranks with marks does not trip over anything.
  QTest::qWait(20);
  const QImage img = d.dash.memoryBars()->grab().toImage();
  ASSERT_FALSE(img.isNull());
  EXPECT_TRUE(img.save(QDir(testutil::screenshotDir()).filePath("memory-two-ranks.png")));
}

TEST(MultiRank, CommunicationPerStepInTheFigures) {
  Dashboard d;
  d.feed(core::EventType::Step, core::toJson(step(1)));
  EXPECT_FALSE(d.dash.statsLabel()->text().contains("comm")) << "one rank: nothing to say";
  auto j = core::toJson(step(2));
  j["ranks"] = 2;
  j["comm_bytes"] = int64_t{1258291};  // 1.2 MiB
  d.feed(core::EventType::Step, j);
  EXPECT_EQ(d.run.ranks(), 2);
  EXPECT_EQ(d.run.lastCommBytes(), 1258291);
  const QString t = d.dash.statsLabel()->text();
  EXPECT_TRUE(t.contains("comm 1.2 MiB/step")) << t.toStdString();
  EXPECT_TRUE(t.contains("2 ranks")) << t.toStdString();
}

TEST(MultiRank, WizardWritesTheHostfile) {
  QTemporaryDir tmp;
  MainWindow::Options o;
  o.dbPath = tmp.filePath("runs.db");
  o.enginePath = "/nonexistent/engine";  // never launches here
  o.reattach = false;
  o.askOnClose = false;
  MainWindow win(o);
  win.setShowDialogs(false);
  win.resize(1400, 900);
  win.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&win));
  RunWizard* wiz = win.wizard();
  for (int i = 0; i < wiz->presetList()->count(); ++i)
    if (wiz->presetList()->item(i)->text().startsWith("default"))
      wiz->presetList()->setCurrentRow(i);
  int page = -1;
  for (int i = 0; i < wiz->pageCount(); ++i)
    if (wiz->pageTitle(i).contains("Parallel")) page = i;
  ASSERT_GE(page, 0);
  wiz->goToPage(page);

  QLineEdit* host = nullptr;
  for (auto* w : wiz->findChildren<QLineEdit*>())
    if (w->property("configPath").toString() == "parallel.hostfile") host = w;
  ASSERT_TRUE(host);
  EXPECT_TRUE(host->isVisible()) << "shown with the ranks and ZeRO controls";
  EXPECT_TRUE(host->text().isEmpty());
  EXPECT_TRUE(host->toolTip().contains("mpirun hostfile")) << host->toolTip().toStdString();
  EXPECT_TRUE(host->toolTip().contains("empty")) << host->toolTip().toStdString();

  const QString path = tmp.filePath("hosts.txt");
  host->setFocus();
  QTest::keyClicks(host, path);
  EXPECT_EQ(wiz->document()->document()["parallel"]["hostfile"], path.toStdString());
  ASSERT_TRUE(wiz->document()->isValid());
  EXPECT_EQ(wiz->document()->resolved()["parallel"]["hostfile"], path.toStdString());
  ASSERT_TRUE(wiz->document()->config().has_value());
  EXPECT_EQ(wiz->document()->config()->parallel.hostfile, path.toStdString());

  // Cleared again: back to every rank on this machine.
  host->selectAll();
  QTest::keyClick(host, Qt::Key_Delete);
  EXPECT_EQ(wiz->document()->resolved()["parallel"]["hostfile"], "");
}
