// End to end with the real engine: the dashboard's memory panel shows the engine's own
// `process` figures (the OS's resident set beside the tracker's total) and their difference.
#include <gtest/gtest.h>
#include <QFileInfo>
#include <QTemporaryDir>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "MemoryBars.h"
#include "RunDashboard.h"
#include "trainscope/gui/LiveRun.h"

using namespace ts::gui;

TEST(MeasuredMemoryE2e, ResidentAndUntrackedFromTheRealEngine) {
  if (!QFileInfo(TRAINSCOPE_ENGINE_BIN).isExecutable()) GTEST_SKIP() << "engine not built";
  QTemporaryDir tmp;
  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  win.resize(1400, 900);
  win.show();
  RunDashboard* d = win.launch({"--set", "train.steps=40"});
  ASSERT_TRUE(d) << win.lastError().toStdString();
  LiveRun* run = d->run();
  ASSERT_TRUE(testutil::waitFor(
      [&] { return (run->measured() && run->processMemory().is_object()) || !run->isActive(); },
      testutil::kWaitCapMs));
  ASSERT_TRUE(run->processMemory().is_object()) << "no memory event with `process` arrived";
  d->refresh();
  const auto& proc = run->processMemory();
  const double rss = proc.at("rss").get<double>(), tracked = proc.at("tracked").get<double>();
  // The process holds the runtime, the libraries and the data besides the tracked buffers.
  EXPECT_GT(rss, tracked);
  std::map<QString, QString> shown;
  for (const auto& f : d->memoryBars()->figures()) shown[f.label] = f.value;
  EXPECT_EQ(shown["Tracked"], formatBytes(tracked));
  EXPECT_EQ(shown["Resident (OS)"], formatBytes(rss));
  EXPECT_EQ(shown["Untracked"], formatBytes(rss - tracked));
  ASSERT_TRUE(testutil::waitFor([&] { return !run->isActive(); }, testutil::kWaitCapMs));
}
