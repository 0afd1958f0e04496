// Widget tests of the Runs page's new actions (config-value search, technique badges,
// multi-select -> compareRequested, Resume -> resumeRequested with the last checkpoint, trace
// export) and of the Compare page filled with real recorded runs; plus screenshots of both
// ($TRAINSCOPE_SCREENSHOT_DIR, default <build>/screenshots) for people to look at.
#include <set>

#include <gtest/gtest.h>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QImage>
#include <QItemSelectionModel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "ChartView.h"
#include "ComparePage.h"
#include "CompareTestRuns.h"
#include "GuiTestUtil.h"
#include "RunsPage.h"

using namespace ts::gui;
using compare_test::RunSpec;

namespace {

class ComparePageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new QTemporaryDir;
    db_ = dir_->filePath("runs.db").toStdString();
    alpha_.name = "alpha";
    alpha_.checkpoint = true;
    alpha_.profile = true;
    beta_.name = "beta";
    beta_.policy = "bf16";
    beta_.checkpointing = "all";
    beta_.zeroStage = 2;
    beta_.t0 += 100;
    gamma_.name = "gamma";
    gamma_.peakLr = 1e-3;
    gamma_.t0 += 200;
    idAlpha_ = compare_test::recordRun(db_, dir_->path(), alpha_);
    idBeta_ = compare_test::recordRun(db_, dir_->path(), beta_);
    idGamma_ = compare_test::recordRun(db_, dir_->path(), gamma_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  void load(RunsPage& page) {
    QSignalSpy spy(page.browser(), &RunsBrowser::detailsLoaded);  // configs: badges, search
    page.reload();
    ASSERT_TRUE(spy.wait(testutil::kWaitCapMs));
    for (int i = 0; i < 500 && page.browser()->busy(); ++i) QTest::qWait(10);
  }
  void waitExtras(RunsPage& page, int64_t id) {
    for (int i = 0; i < 1500 && !page.browser()->extras(id); ++i) QTest::qWait(20);
    ASSERT_TRUE(page.browser()->extras(id).has_value());
    QCoreApplication::processEvents();
  }
  std::set<int64_t> shownIds(RunsPage& page) {
    std::set<int64_t> ids;
    for (int r = 0; r < page.model()->rowCount(); ++r) ids.insert(page.model()->run(r)->id);
    return ids;
  }

  static QTemporaryDir* dir_;
  static std::string db_;
  static RunSpec alpha_, beta_, gamma_;
  static int64_t idAlpha_, idBeta_, idGamma_;
};
QTemporaryDir* ComparePageTest::dir_ = nullptr;
std::string ComparePageTest::db_;
RunSpec ComparePageTest::alpha_, ComparePageTest::beta_, ComparePageTest::gamma_;
int64_t ComparePageTest::idAlpha_ = 0, ComparePageTest::idBeta_ = 0, ComparePageTest::idGamma_ = 0;

using ts::gui::testutil::screenshotDir;

void saveShot(QWidget* w, const QString& name) {
  QCoreApplication::processEvents();
  QTest::qWait(50);
  const QImage img = w->grab().toImage();
  const QString path = QDir(screenshotDir()).filePath(name + ".png");
  ASSERT_TRUE(img.save(path)) << path.toStdString();
  const QRgb first = img.pixel(img.width() / 2, img.height() / 2);
  bool varied = false;
  for (int y = 0; y < img.height() && !varied; y += 17)
    for (int x = 0; x < img.width() && !varied; x += 17) varied = img.pixel(x, y) != first;
  EXPECT_TRUE(varied) << path.toStdString();
}

}  // namespace

TEST_F(ComparePageTest, RunsPageSearchesConfigValuesAndShowsBadges) {
  RunsPage page{RunRepository(db_)};
  page.setShowDialogs(false);
  load(page);
  ASSERT_EQ(page.model()->totalRuns(), 3);
  const int rb = page.model()->rowOfRun(idBeta_);
  ASSERT_GE(rb, 0);
  const QStringList badges = page.model()
                                 ->index(rb, RunsTableModel::Techniques)
                                 .data(RunsTableModel::BadgesRole)
                                 .toStringList();
  EXPECT_EQ(badges, (QStringList{"bf16", "ckpt", "ZeRO-2"}));
  // Alpha recorded a kernel timeline: "profiled" (it has one to open), not just "profile".
  const int ra = page.model()->rowOfRun(idAlpha_);
  EXPECT_EQ(page.model()
                ->index(ra, RunsTableModel::Techniques)
                .data(RunsTableModel::BadgesRole)
                .toStringList(),
            QStringList{"profiled"});

  // Typed into the search field as a user would (one keystroke at a time).
  QTest::keyClicks(page.searchField(), "bf16");
  EXPECT_EQ(shownIds(page), (std::set<int64_t>{idBeta_}));
  page.searchField()->clear();
  QTest::keyClicks(page.searchField(), "zero");  // the ZeRO-2 badge
  EXPECT_EQ(shownIds(page), (std::set<int64_t>{idBeta_}));
  page.searchField()->clear();
  QTest::keyClicks(page.searchField(), "0.0003");  // optimizer.lr of alpha and beta
  EXPECT_EQ(shownIds(page), (std::set<int64_t>{idAlpha_, idBeta_}));
  page.searchField()->clear();
  QTest::keyClicks(page.searchField(), "0.001 gamma");  // every word must match
  EXPECT_EQ(shownIds(page), (std::set<int64_t>{idGamma_}));
  QTest::keyClicks(page.searchField(), "x");  // "gammax": nothing
  EXPECT_TRUE(shownIds(page).empty());
  QTest::keyClick(page.searchField(), Qt::Key_Backspace);  // widening again
  EXPECT_EQ(shownIds(page), (std::set<int64_t>{idGamma_}));
  page.searchField()->clear();
  EXPECT_EQ(page.model()->rowCount(), 3);
}

TEST_F(ComparePageTest, MultiSelectEmitsCompareRequested) {
  RunsPage page{RunRepository(db_)};
  page.setShowDialogs(false);
  load(page);
  QSignalSpy spy(&page, &RunsPage::compareRequested);
  page.selectRun(idAlpha_);
  EXPECT_FALSE(page.compareButton()->isEnabled());
  // Ctrl-click a second row, as a user would.
  const int rb = page.model()->rowOfRun(idBeta_);
  QTableView* v = page.view();
  page.resize(1200, 600);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  const QRect cell = v->visualRect(page.model()->index(rb, RunsTableModel::Name));
  QTest::mouseClick(v->viewport(), Qt::LeftButton, Qt::ControlModifier, cell.center());
  EXPECT_EQ(page.selectedRunIds().size(), 2);
  EXPECT_EQ(page.selectedRunId(), 0);  // single-run actions need exactly one
  EXPECT_FALSE(page.resumeButton()->isEnabled());
  ASSERT_TRUE(page.compareButton()->isEnabled());
  QTest::mouseClick(page.compareButton(), Qt::LeftButton);
  ASSERT_EQ(spy.size(), 1);
  const auto ids = spy.takeFirst().at(0).value<QList<qint64>>();
  EXPECT_EQ(std::set<qint64>(ids.begin(), ids.end()), (std::set<qint64>{idAlpha_, idBeta_}));
  page.selectRuns({idAlpha_, idBeta_, idGamma_});
  EXPECT_EQ(page.selectedRunIds().size(), 3);
}

TEST_F(ComparePageTest, ResumeAndTraceFollowTheRunsCheckpointsAndProfile) {
  RunsPage page{RunRepository(db_)};
  page.setShowDialogs(false);
  load(page);
  QSignalSpy resume(&page, &RunsPage::resumeRequested);
  page.selectRun(idAlpha_);
  waitExtras(page, idAlpha_);
  ASSERT_TRUE(page.resumeButton()->isEnabled()) << page.resumeButton()->toolTip().toStdString();
  EXPECT_TRUE(page.traceButton()->isEnabled()) << page.traceButton()->toolTip().toStdString();
  QTest::mouseClick(page.resumeButton(), Qt::LeftButton);
  ASSERT_EQ(resume.size(), 1);
  EXPECT_EQ(resume.at(0).at(0).value<int64_t>(), idAlpha_);
  EXPECT_EQ(resume.at(0).at(1).toString().toStdString(), alpha_.checkpointPath);

  page.selectRun(idGamma_);
  waitExtras(page, idGamma_);
  EXPECT_FALSE(page.resumeButton()->isEnabled());
  EXPECT_TRUE(page.resumeButton()->toolTip().contains("no checkpoint"))
      << page.resumeButton()->toolTip().toStdString();
  EXPECT_FALSE(page.traceButton()->isEnabled());
  EXPECT_TRUE(page.traceButton()->toolTip().contains("no kernel timeline"));

  // Trace export: Chrome JSON holding the recorded spans; a run without a profile says so.
  QSignalSpy done(page.browser(), &RunsBrowser::done);
  QTemporaryDir out;
  const QString path = out.filePath("alpha-trace.json");
  page.browser()->exportTrace(idAlpha_, path);
  ASSERT_TRUE(done.wait(testutil::kWaitCapMs));
  ASSERT_TRUE(done.at(0).at(0).toBool()) << done.at(0).at(1).toString().toStdString();
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const auto j = nlohmann::json::parse(f.readAll().toStdString());
  std::set<std::string> names;
  for (const auto& e : j["traceEvents"])
    if (e.value("ph", "") == "X") names.insert(e.value("name", ""));
  EXPECT_EQ(names, (std::set<std::string>{"matmul_fwd", "attention_fwd", "adamw_step"}));
  done.clear();
  page.browser()->exportTrace(idGamma_, out.filePath("gamma.json"));
  ASSERT_TRUE(done.wait(testutil::kWaitCapMs));
  EXPECT_FALSE(done.at(0).at(0).toBool());
  EXPECT_TRUE(done.at(0).at(1).toString().contains("no profile"));
  EXPECT_FALSE(QFile::exists(out.filePath("gamma.json")));
}

TEST_F(ComparePageTest, ComparePageFillsWithTwoRuns) {
  ComparePage page{RunRepository(db_)};
  page.resize(1300, 850);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  QSignalSpy loaded(page.model(), &CompareModel::loaded);
  page.compareRuns({idAlpha_, idBeta_});
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  using M = CompareModel::Metric;
  for (M m : {M::TrainLoss, M::EvalLoss, M::Lr, M::TokensPerS}) ASSERT_NE(page.chart(m), nullptr);
  // Undownsampled runs: one mean series per run, one point per step (eval: per eval).
  EXPECT_EQ(page.chart(M::TrainLoss)->pointCount(0), alpha_.steps);
  EXPECT_EQ(page.chart(M::TrainLoss)->pointCount(1), beta_.steps);
  EXPECT_EQ(page.chart(M::EvalLoss)->pointCount(1), beta_.steps / beta_.evalEvery);
  page.setAxis(CompareModel::Axis::Tokens);
  EXPECT_EQ(page.chart(M::TrainLoss)->pointCount(0), alpha_.steps);
  page.setAxis(CompareModel::Axis::WallTime);
  EXPECT_EQ(page.chart(M::TokensPerS)->pointCount(1), beta_.steps);
  EXPECT_EQ(page.summaryView()->model()->columnCount(), 3);
  EXPECT_EQ(page.memoryView()->model()->columnCount(), 5);
  // alpha vs beta: what the specs set differently, nothing else.
  std::set<QString> keys;
  auto* diff = page.diffView()->model();
  for (int r = 0; r < diff->rowCount(); ++r) keys.insert(diff->index(r, 0).data().toString());
  EXPECT_EQ(keys, (std::set<QString>{"name", "precision.policy", "memory.checkpointing",
                                     "parallel.zero_stage", "profile.enabled"}));

  // A second comparison replaces the charts.
  page.compareRuns({idAlpha_, idBeta_, idGamma_});
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  QCoreApplication::processEvents();
  EXPECT_EQ(page.chart(M::TrainLoss)->pointCount(2), gamma_.steps);
  EXPECT_EQ(page.summaryView()->model()->columnCount(), 4);
}

TEST_F(ComparePageTest, RunsPageScreenshot) {
  RunsPage page{RunRepository(db_)};
  page.setShowDialogs(false);
  page.resize(1300, 420);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  load(page);
  page.selectRuns({idAlpha_, idBeta_});
  saveShot(&page, "runs-browser-badges");
}

TEST(Screenshots, CompareFp32VsBf16) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  RunSpec fp32;
  fp32.name = "gpt2-small fp32";
  fp32.steps = 600;
  fp32.evalEvery = 50;
  fp32.memoryEvery = 25;
  fp32.tokensPerSBase = 8200;
  fp32.secondsPerStep = 0.125;
  fp32.lossFloor = 0.42;
  fp32.spikeEvery = 0;
  fp32.noise = 0.08;
  fp32.evalEvery = 50;
  fp32.memoryScale = 60;
  RunSpec bf16 = fp32;
  bf16.name = "gpt2-small bf16 + ckpt";
  bf16.policy = "bf16";
  bf16.checkpointing = "all";
  bf16.tokensPerSBase = 13100;
  bf16.secondsPerStep = 0.078;
  bf16.lossFloor = 0.44;
  bf16.memoryScale = 34;
  bf16.t0 += 3600;
  const int64_t a = compare_test::recordRun(db, dir.path(), fp32);
  const int64_t b = compare_test::recordRun(db, dir.path(), bf16);
  ComparePage page{RunRepository(db)};
  page.resize(1440, 900);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  QSignalSpy loaded(page.model(), &CompareModel::loaded);
  page.compareRuns({a, b});
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  saveShot(&page, "compare-fp32-vs-bf16-step");
  page.setAxis(CompareModel::Axis::WallTime);
  saveShot(&page, "compare-fp32-vs-bf16-walltime");
}
