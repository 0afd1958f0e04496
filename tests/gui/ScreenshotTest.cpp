// Writes PNGs of every wizard page and of the dashboard mid-run to $TRAINSCOPE_SCREENSHOT_DIR
// (default: <build>/screenshots) for people to look at, each checked: the page's widgets
// visible and not blank, charts with their points drawn inside the plot area, expected text.
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>
#include <QDir>
#include <QImage>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "ChartView.h"
#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "PlannerPage.h"
#include "RunDashboard.h"
#include "RunWizard.h"
#include "RunsPage.h"
#include "ScreenshotCheck.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/EngineClient.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

using ts::gui::testutil::screenshotDir;

// Saves the grab and runs the checks on it (widgets not blank, charts drawn, text present).
void save(QWidget* w, const QString& name,
          const std::function<void(ScreenshotCheck&)>& checks = {}) {
  QCoreApplication::processEvents();
  QTest::qWait(50);
  const QImage img = w->grab().toImage();
  const QString path = QDir(screenshotDir()).filePath(name + ".png");
  ASSERT_TRUE(img.save(path)) << path.toStdString();
  ScreenshotCheck c(w, img);
  if (checks) checks(c);
  EXPECT_TRUE(c.ok()) << path.toStdString() << ": " << c.problems().join("; ").toStdString();
}

// A plausible mid-run stream (what the engine sends), fed through the client's decoder.
void feedMidRun(EngineClient& client, const nlohmann::json& config, int steps, int total) {
  core::EventEncoder enc;
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0.0, 1.0);
  QByteArray s;
  s += QByteArray::fromStdString(
      enc.encode(core::EventType::Hello,
                 {{"protocol", core::kProtocolVersion}, {"backend", "cpu"}, {"ranks", 1}}));
  s += QByteArray::fromStdString(enc.encode(core::EventType::Config, {{"config", config}}));
  auto parsed = core::parseConfigJson(config);
  if (parsed.ok())
    s += QByteArray::fromStdString(
        enc.encode(core::EventType::MemoryPlan, core::memoryPlanJson(*parsed.config)));
  for (int i = 1; i <= steps; ++i) {
    core::StepEvent e;
    e.step = i;
    e.loss = 0.35 + 2.4 * std::exp(-i / 60.0) + 0.06 * noise(rng) * std::exp(-i / 400.0);
    e.lr = 0.003 * std::min(1.0, i / 20.0) * (0.55 + 0.45 * std::cos(M_PI * i / total));
    e.tokens = int64_t{i} * 32 * 32;
    e.tokens_per_s = 9000 + 600 * noise(rng);
    e.step_ms = 110;
    s += QByteArray::fromStdString(enc.encode(core::EventType::Step, core::toJson(e)));
    if (i % 50 == 0)
      s += QByteArray::fromStdString(enc.encode(
          core::EventType::Eval, {{"step", i}, {"loss", 0.42 + 2.3 * std::exp(-i / 65.0)}}));
    if (i % 10 == 0 && parsed.ok()) {
      // Measured: the plan, with activations that breathe a little.
      auto rep = core::predictMemoryReport(*parsed.config);
      for (auto& r : rep.ranks) {
        auto& act = r.at(core::MemoryTier::Device, core::MemoryCategory::Activations);
        act.current = static_cast<int64_t>(act.current * (0.9 + 0.05 * std::sin(i * 0.1)));
        act.peak = static_cast<int64_t>(act.peak * 0.97);
      }
      auto j = core::toJson(rep);
      j["step"] = i;
      s += QByteArray::fromStdString(enc.encode(core::EventType::Memory, j));
    }
    if (i == 100)
      s += QByteArray::fromStdString(
          enc.encode(core::EventType::Log,
                     {{"level", "info"}, {"message", "step 100: eval loss 0.88, 9.1 K tokens/s"}}));
  }
  client.feed(s);
}

}  // namespace

TEST(Screenshots, WizardPagesAndDashboard) {
  QTemporaryDir tmp;
  MainWindow::Options o;
  o.dbPath = tmp.filePath("runs.db");
  o.enginePath = "/nonexistent/engine";
  o.reattach = false;
  o.askOnClose = false;
  MainWindow win(o);
  win.setShowDialogs(false);
  win.resize(1440, 900);
  win.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&win));
  RunWizard* wiz = win.wizard();
  for (int i = 0; i < wiz->pageCount(); ++i) {
    wiz->goToPage(i);
    QString name = wiz->pageTitle(i).section(".", 1).trimmed().toLower();
    name.replace("&", "and").replace(' ', '-');
    const QString title = wiz->pageTitle(i);
    save(
        &win, QStringLiteral("wizard-%1-%2").arg(i + 1, 2, 10, QChar('0')).arg(name),
        [&](ScreenshotCheck& c) { c.widget(wiz, "wizard").text(title.section(".", 1).trimmed()); });
  }
  // Dashboard mid-run (240 of 400 steps of the default preset).
  auto* run = new LiveRun("default");
  auto* client = new EngineClient(run);
  const auto cfg = win.document()->resolved();
  run->setTotalSteps(cfg["train"]["steps"].get<int64_t>());
  feedMidRun(*client, cfg, 240, 400);
  RunDashboard* d = win.addDashboard(run, client);
  d->setDeviceCapacity(2LL << 30);
  win.showSection(1);
  QTest::qWait(300);
  d->refresh();
  EXPECT_GT(d->lossChart()->pointCount(d->lossRawSeries()), 0);
  save(&win, "dashboard", [&](ScreenshotCheck& c) {
    c.chart(d->lossChart(), "loss chart", 10)
        .chart(d->lrChart(), "learning-rate chart", 10)
        .chart(d->throughputChart(), "throughput chart", 10);
  });

  // Memory planner: LLaMA-7B full training on one 24 GiB GPU does not fit; the planner's
  // suggestions do.
  win.showSection(3);
  PlannerPage* planner = win.planner();
  QSignalSpy updated(planner, &PlannerPage::updated);
  planner->selectModel("shape:llama-7b");
  planner->setDeviceMemoryGiB(24);
  planner->setRanks(1);
  planner->recompute();
  for (int i = 0; i < 600 && (planner->computing() || updated.isEmpty()); ++i) QTest::qWait(50);
  ASSERT_FALSE(updated.isEmpty());
  save(&win, "planner",
       [&](ScreenshotCheck& c) { c.widget(planner->planView(), "suggestions").text("Runs here"); });

  // Runs browser over a few recorded runs.
  for (int i = 0; i < 12; ++i) {
    core::RunRecorder::Options ro;
    ro.dbPath = o.dbPath.toStdString();
    ro.runDir = tmp.filePath(QStringLiteral("run%1").arg(i)).toStdString();
    ro.name = QStringLiteral("gpt-small-%1")
                  .arg(i % 3 == 0   ? "bf16"
                       : i % 3 == 1 ? "fp32"
                                    : "zero2")
                  .toStdString() +
              "-" + std::to_string(i);
    core::RunRecorder rec(ro);
    const double t0 = 1.76e9 + i * 3700.0;
    int64_t seq = 0;
    rec.record({{"type", "hello"}, {"seq", seq++}, {"time", t0}, {"backend", "cpu"}, {"ranks", 1}});
    for (int s = 0; s < 20; ++s)
      rec.record({{"type", "step"},
                  {"seq", seq++},
                  {"time", t0 + 30.0 * s},
                  {"step", s},
                  {"loss", 3.0 / (1 + 0.1 * s) + 0.01 * i},
                  {"tokens_per_s", 8000.0 + 350 * i}});
    rec.record({{"type", "eval"},
                {"seq", seq++},
                {"time", t0 + 600},
                {"step", 19},
                {"loss", 1.2 + 0.03 * i}});
    rec.record({{"type", "finished"},
                {"seq", seq++},
                {"time", t0 + 620 + 97 * i},
                {"status", i == 4 ? "failed" : "completed"}});
    rec.close();
  }
  {
    auto store = core::RunStore::open(o.dbPath.toStdString());
    for (const auto& r : store.listRuns())
      if (r.id % 2 == 0) store.setTags(r.id, {"baseline", "sweep-3"});
  }
  QSignalSpy loaded(win.runsPage()->browser(), &RunsBrowser::loaded);
  win.showSection(2);
  ASSERT_TRUE(loaded.wait(20000));
  win.runsPage()->view()->selectRow(1);
  save(&win, "runs", [&](ScreenshotCheck& c) {
    c.widget(win.runsPage()->view(), "runs table").text("gpt-small-bf16-0").text("Best eval loss");
  });

  // The model page after opening a Hugging Face folder: what it holds, the shape it set.
  win.showSection(0);
  ASSERT_EQ(wiz->openHfFolder(QString(TRAINSCOPE_TEST_DATA) + "/hf_tiny/llama"), QString());
  for (int i = 0; i < wiz->pageCount(); ++i)
    if (wiz->pageTitle(i).contains("Model")) wiz->goToPage(i);
  save(&win, "wizard-hf-folder", [&](ScreenshotCheck& c) {
    c.widget(wiz, "wizard").text("LlamaForCausalLM").text("stored F32");
  });
}
