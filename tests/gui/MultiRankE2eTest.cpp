// End to end with several ranks: the app launches `trainscope-engine run` as for one rank, the
// engine relaunches itself under mpirun, and the dashboard shows one memory bar per rank with
// its prediction and the bytes sent in collectives per step.
#include <gtest/gtest.h>
#include <QLabel>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "MemoryBars.h"
#include "RunDashboard.h"
#include "RunWizard.h"
#include "trainscope/gui/EngineClient.h"

using namespace ts::gui;
using ts::gui::testutil::waitFor;

TEST(MultiRankE2e, TwoRanksFromTheApp) {
  if (EngineLocator::findMpirun().isEmpty()) GTEST_SKIP() << "mpirun (openmpi-bin) not installed";
  QTemporaryDir tmp;
  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  win.resize(1440, 900);
  win.show();
  win.wizard()->document()->setValue("parallel.ranks", 2);
  RunDashboard* d = win.launch({"--set", "train.steps=4", "--set", "train.eval_every=0"});
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  LiveRun* run = d->run();
  ASSERT_TRUE(waitFor([&] { return !run->isActive(); }, testutil::kWaitCapMs))
      << "the run did not finish in time; last step " << run->lastStep();
  for (const auto& l : run->log())
    std::cerr << l.level.toStdString() << ": " << l.text.toStdString() << "\n";
  ASSERT_EQ(run->state(), RunState::Completed) << run->finishReason().toStdString();
  EXPECT_EQ(run->lastStep(), 4);
  // The app started the engine itself, not mpirun (the engine did that).
  ASSERT_FALSE(run->log().empty());
  EXPECT_FALSE(run->log().front().text.startsWith("$ mpirun"))
      << run->log().front().text.toStdString();

  ASSERT_TRUE(run->measured());
  ASSERT_EQ(run->measured()->ranks.size(), 2u);
  EXPECT_EQ(run->ranks(), 2);
  EXPECT_GT(run->lastCommBytes(), 0);
  d->refresh();
  const auto rows = d->memoryBars()->rows();
  ASSERT_EQ(rows.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(rows[r].rank, r);
    EXPECT_EQ(rows[r].deviceBytes,
              run->measured()->ranks[r].totalPeak(ts::core::MemoryTier::Device));
    EXPECT_GT(rows[r].deviceBytes, 0);
    EXPECT_TRUE(rows[r].predictedDeviceBytes) << "rank " << r << " has its prediction marked";
  }
  EXPECT_TRUE(d->statsLabel()->text().contains("comm ")) << d->statsLabel()->text().toStdString();
}
