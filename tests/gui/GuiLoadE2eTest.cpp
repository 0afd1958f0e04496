// Load on the GUI side, with real processes and one real database file: four engines record into
// one database while the Runs page reloads and exports from it; 2,000 step events per second
// flow into a GUI whose thread is blocked most of the time. Nothing is lost (counts checked) and
// the producers never wait on the GUI.
#include <gtest/gtest.h>

#include <QDirIterator>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTimer>
#include <array>
#include <chrono>
#include <memory>
#include <thread>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "RunDashboard.h"
#include "RunsPage.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/LiveRun.h"
#include "trainscope/gui/RunsTableModel.h"

using namespace ts::gui;
using ts::core::RunStore;
using ts::gui::testutil::kWaitCapMs;
using ts::gui::testutil::waitFor;

namespace {

const QString kPreset = QString(TRAINSCOPE_PRESET_DIR) + "/default.json";

}  // namespace

TEST(GuiLoadE2e, FourEnginesRecordIntoOneDatabaseWhileTheRunsPageBrowsesIt) {
  QTemporaryDir tmp;
  const QString db = tmp.filePath("runs.db");
  constexpr int kEngines = 4, kSteps = 300;

  MainWindow win(testutil::e2eOptions(tmp));
  win.setShowDialogs(false);
  win.show();
  RunsPage* page = win.runsPage();
  RunsBrowser* browser = page->browser();
  int reloads = 0, exportsOk = 0;
  QStringList failures;
  QObject::connect(browser, &RunsBrowser::loaded, [&](int) { ++reloads; });
  QObject::connect(browser, &RunsBrowser::done, [&](bool ok, const QString& msg) {
    if (ok)
      ++exportsOk;
    else
      failures << msg;
  });

  std::array<std::unique_ptr<QProcess>, kEngines> engines;
  std::array<QByteArray, kEngines> said;
  for (int i = 0; i < kEngines; ++i) {
    auto& p = engines[i];
    p = std::make_unique<QProcess>();
    p->setProgram(TRAINSCOPE_ENGINE_BIN);
    p->setArguments({"run", kPreset, "--db", db, "--run-dir", tmp.filePath(QString("run%1").arg(i)),
                     "--set", "train.steps=" + QString::number(kSteps)});
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("OMP_NUM_THREADS", "1");  // four engines on a small machine
    p->setProcessEnvironment(env);
    p->setProcessChannelMode(QProcess::MergedChannels);
    p->start();
    ASSERT_TRUE(p->waitForStarted()) << p->errorString().toStdString();
  }

  // Browse while they train: reload the table, and export the metrics of a listed run (the
  // export reads every step row of a run being written).
  auto running = [&] {
    int n = 0;
    for (auto& p : engines) n += p->state() != QProcess::NotRunning;
    return n;
  };
  int browsedWhileTraining = 0;
  ASSERT_TRUE(waitFor(
      [&] {
        // Drain the engines' output so a full pipe never stalls them (the GUI reads its own).
        for (int i = 0; i < kEngines; ++i) said[i] += engines[i]->readAll();
        if (running() == 0) return true;
        if (browser->busy()) return false;
        ++browsedWhileTraining;
        if (const int rows = page->model()->rowCount(); rows > 0) {
          const auto* s = page->model()->run(browsedWhileTraining % rows);
          browser->fetchExtras(s->id);
          browser->exportMetrics(s->id, tmp.filePath("export.csv"), RunsBrowser::ExportFormat::Csv);
        }
        page->reload();
        return false;
      },
      kWaitCapMs))
      << running() << " engines still running";
  // What each engine warned about (an unusable database is a warning, not an exit code).
  auto warnings = [&](int i) {
    said[i] += engines[i]->readAll();
    std::string w;
    for (const QByteArray& line : said[i].split('\n'))
      if (line.contains("\"type\":\"warning\"") || line.contains("\"type\":\"error\""))
        w += line.left(400).toStdString() + "\n";
    return w;
  };
  std::string allWarnings;
  for (int i = 0; i < kEngines; ++i) {
    EXPECT_EQ(engines[i]->exitStatus(), QProcess::NormalExit) << "engine " << i;
    EXPECT_EQ(engines[i]->exitCode(), 0) << "engine " << i;
    allWarnings += warnings(i);
  }
  // Other warnings (about the machine, say) are not this test's business; the database's are.
  EXPECT_EQ(allWarnings.find("database"), std::string::npos) << allWarnings;
  ASSERT_TRUE(waitFor([&] { return !browser->busy(); }, kWaitCapMs));
  EXPECT_GE(browsedWhileTraining, 3) << "the Runs page hardly browsed while the engines trained";
  EXPECT_GE(exportsOk, 1);
  EXPECT_TRUE(failures.isEmpty()) << failures.join('\n').toStdString();

  // Every run is whole: completed, every step 1..kSteps present in order with its loss.
  auto store = RunStore::open(db.toStdString(), RunStore::Mode::ReadOnly);
  const auto runs = store.listRuns();
  ASSERT_EQ(runs.size(), static_cast<size_t>(kEngines)) << allWarnings;
  for (const auto& r : runs) {
    EXPECT_EQ(r.status, "completed") << r.name << ": " << r.reason;
    const auto rows = store.steps(r.id);
    ASSERT_EQ(rows.size(), static_cast<size_t>(kSteps)) << r.name;
    for (int k = 0; k < kSteps; ++k) {
      ASSERT_EQ(rows[k].step, k + 1) << r.name;
      ASSERT_TRUE(rows[k].loss.has_value()) << r.name << " step " << k + 1;
    }
  }

  // And the Runs page lists all four as completed.
  page->reload();
  EXPECT_TRUE(waitFor(
      [&] {
        if (page->model()->rowsWithStatus("completed") >= kEngines) return true;
        if (!browser->busy()) page->reload();
        return false;
      },
      kWaitCapMs))
      << page->model()->rowsWithStatus("completed") << " completed runs listed";
}

TEST(GuiLoadE2e, TwoThousandEventsPerSecondIntoABusyGuiAllArrive) {
  QTemporaryDir tmp;
  auto o = testutil::e2eOptions(tmp);
  o.enginePath = GUI_FLOOD_ENGINE;
  qputenv("FLOOD_RATE", "2000");
  constexpr int kSteps = 10000;  // 5 s of events

  MainWindow win(o);
  win.setShowDialogs(false);
  win.show();
  // A busy GUI: its thread is blocked 300 ms out of every ~500 (a slow repaint, a big table),
  // long enough for the 64 KiB pipe to fill while nothing reads it.
  QTimer busy;
  busy.setInterval(200);
  int stalls = 0;
  QObject::connect(&busy, &QTimer::timeout, [&] {
    ++stalls;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  busy.start();

  RunDashboard* d = win.launch({"--set", "train.steps=" + QString::number(kSteps)});
  ASSERT_NE(d, nullptr) << win.lastError().toStdString();
  ASSERT_TRUE(waitFor([&] { return !d->run()->isActive(); }, kWaitCapMs));
  busy.stop();
  LiveRun* run = d->run();
  EXPECT_EQ(run->state(), RunState::Completed) << run->finishReason().toStdString();
  EXPECT_GE(stalls, 5);

  // Every step arrived once, in order, with its own values.
  EXPECT_EQ(run->lastStep(), kSteps);
  const SeriesBuffer& lr = run->lr();
  ASSERT_EQ(lr.stride(), 1u);
  ASSERT_EQ(lr.size(), static_cast<size_t>(kSteps));
  for (int k = 0; k < kSteps; ++k) {
    ASSERT_EQ(lr.x(k), k + 1);
    const double want = (k + 1) * 1e-7;  // stored as float
    ASSERT_NEAR(lr.mean(k), want, want * 1e-6) << "step " << k + 1;
  }
  EXPECT_DOUBLE_EQ(lr.lastY(), kSteps * 1e-7);
  EXPECT_EQ(run->loss().size(), static_cast<size_t>(kSteps));

  // The producer was never refused and went on while the GUI did not read: its writer held a
  // backlog beyond what the pipe holds (a step line is ~200 bytes; 64 KiB is ~300 lines).
  QString report;
  for (QDirIterator it(tmp.path(), {"flood-report.json"}, QDir::Files,
                       QDirIterator::Subdirectories);
       it.hasNext();)
    report = it.next();
  ASSERT_FALSE(report.isEmpty()) << "the flood engine wrote no report";
  QFile f(report);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const auto j = nlohmann::json::parse(f.readAll().toStdString());
  EXPECT_EQ(j["steps_written"].get<int64_t>(), kSteps);
  EXPECT_EQ(j["refused"].get<int64_t>(), 0);
  EXPECT_GE(j["high_water"].get<int64_t>(), 100) << "the GUI never fell behind: not a load test";
}
