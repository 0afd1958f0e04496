// CompareModel against hand-built runs in a real SQLite store (recorded through RunRecorder):
// config diff = exactly the leaves that differ, summary = what was recorded, curves aligned by
// step / tokens / wall time from the recorded formulas, min/max envelope keeps spikes when
// downsampled, predicted vs measured memory per category; item models under
// QAbstractItemModelTester; loading on the worker, errors as messages.
#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include <gtest/gtest.h>
#include <QAbstractItemModelTester>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "CompareTestRuns.h"
#include "GuiTestUtil.h"
#include "trainscope/gui/CompareModel.h"

using namespace ts::gui;
using compare_test::RunSpec;
namespace core = ts::core;

namespace {

class CompareModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new QTemporaryDir;
    db_ = dir_->filePath("runs.db").toStdString();
    a_.name = "fp32-baseline";
    a_.steps = 40;
    b_.name = "bf16-ckpt";
    b_.policy = "bf16";
    b_.microBatch = 8;  // half the tokens per step
    b_.tokensPerSBase = 15000;
    b_.secondsPerStep = 0.3;
    b_.t0 = 1.7e9 + 500;
    b_.lossFloor = 0.55;
    b_.memoryScale = 0.6;
    b_.steps = 30;
    long_.name = "long";
    long_.steps = 400;
    long_.evalEvery = 100;
    long_.t0 = 1.7e9 + 1000;
    idA_ = compare_test::recordRun(db_, dir_->path(), a_);
    idB_ = compare_test::recordRun(db_, dir_->path(), b_);
    idLong_ = compare_test::recordRun(db_, dir_->path(), long_);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static QTemporaryDir* dir_;
  static std::string db_;
  static RunSpec a_, b_, long_;
  static int64_t idA_, idB_, idLong_;
};
QTemporaryDir* CompareModelTest::dir_ = nullptr;
std::string CompareModelTest::db_;
RunSpec CompareModelTest::a_, CompareModelTest::b_, CompareModelTest::long_;
int64_t CompareModelTest::idA_ = 0, CompareModelTest::idB_ = 0, CompareModelTest::idLong_ = 0;

std::unique_ptr<CompareModel> loadSync(const std::string& db, std::vector<int64_t> ids,
                                       int maxPoints = 1000) {
  auto m = std::make_unique<CompareModel>(RunRepository(db));
  QString err;
  auto data = CompareModel::fetch(RunRepository(db), ids, maxPoints, &err);
  EXPECT_TRUE(err.isEmpty()) << err.toStdString();
  m->setData(std::move(data));
  return m;
}

}  // namespace

TEST_F(CompareModelTest, ConfigDiffHoldsExactlyTheDifferingLeaves) {
  ASSERT_GT(idA_, 0);
  ASSERT_GT(idB_, 0);
  CompareModel m{RunRepository(db_)};
  QAbstractItemModelTester t1(m.diffModel(), QAbstractItemModelTester::FailureReportingMode::Fatal);
  QAbstractItemModelTester t2(m.summaryModel(),
                              QAbstractItemModelTester::FailureReportingMode::Fatal);
  QAbstractItemModelTester t3(m.memoryModel(),
                              QAbstractItemModelTester::FailureReportingMode::Fatal);
  QString err;
  m.setData(CompareModel::fetch(RunRepository(db_), {idA_, idB_}, 1000, &err));
  ASSERT_TRUE(err.isEmpty()) << err.toStdString();
  ASSERT_EQ(m.runCount(), 2);
  // The specs differ in name, precision policy, micro batch and train.steps; nothing else.
  std::set<QString> keys;
  auto* diff = m.diffModel();
  ASSERT_EQ(diff->columnCount(), 3);
  for (int r = 0; r < diff->rowCount(); ++r) keys.insert(diff->index(r, 0).data().toString());
  EXPECT_EQ(keys,
            (std::set<QString>{"name", "precision.policy", "train.micro_batch", "train.steps"}));
  for (int r = 0; r < diff->rowCount(); ++r) {
    if (diff->index(r, 0).data().toString() != "precision.policy") continue;
    EXPECT_EQ(diff->index(r, 1).data().toString(), "fp32");
    EXPECT_EQ(diff->index(r, 2).data().toString(), "bf16");
  }
  EXPECT_TRUE(diff->headerData(1, Qt::Horizontal).toString().contains("fp32-baseline"));
  EXPECT_TRUE(diff->headerData(2, Qt::Horizontal).toString().contains("bf16-ckpt"));
}

TEST_F(CompareModelTest, SummaryEqualsWhatWasRecorded) {
  auto mp = loadSync(db_, {idA_, idB_});
  CompareModel& m = *mp;
  auto* s = m.summaryModel();
  ASSERT_EQ(s->rowCount(), CompareSummaryModel::RowCount);
  ASSERT_EQ(s->columnCount(), 3);
  for (int run = 0; run < 2; ++run) {
    const RunSpec& sp = run == 0 ? a_ : b_;
    auto v = [&](int row) { return s->index(row, run + 1).data(Qt::UserRole); };
    EXPECT_EQ(s->index(CompareSummaryModel::Status, run + 1).data().toString(), "completed");
    EXPECT_EQ(v(CompareSummaryModel::Steps).toDouble(), sp.steps);
    EXPECT_EQ(v(CompareSummaryModel::TokensSeen).toDouble(), double(sp.steps * sp.tokensPerStep()));
    double tps = 0, bestEval = 1e9;
    int64_t peak = 0;
    for (int st = 1; st <= sp.steps; ++st) {
      tps += sp.tokensPerS(st);
      if (st % sp.evalEvery == 0) bestEval = std::min(bestEval, sp.evalLoss(st));
      if (st % sp.memoryEvery == 0) {
        int64_t sum = 0;
        for (int c = 0; c < core::kMemoryCategoryCount; ++c) sum += sp.measuredPeak(c, st);
        peak = std::max(peak, sum);
      }
    }
    EXPECT_NEAR(v(CompareSummaryModel::MeanTokensPerS).toDouble(), tps / sp.steps, 1e-6);
    EXPECT_EQ(v(CompareSummaryModel::PeakMemory).toLongLong(), peak);
    EXPECT_NEAR(v(CompareSummaryModel::FinalLoss).toDouble(), sp.loss(sp.steps), 1e-12);
    EXPECT_NEAR(v(CompareSummaryModel::BestEvalLoss).toDouble(), bestEval, 1e-12);
    EXPECT_NEAR(v(CompareSummaryModel::WallTime).toDouble(), sp.finishedTime() - sp.t0, 1e-3);
  }
  // The faster run is the bold one for tokens/s; the lower final loss is bold.
  EXPECT_TRUE(s->index(CompareSummaryModel::MeanTokensPerS, 2).data(kCompareEmphasisRole).toBool());
  EXPECT_FALSE(
      s->index(CompareSummaryModel::MeanTokensPerS, 1).data(kCompareEmphasisRole).toBool());
  const bool aLower = a_.loss(a_.steps) < b_.loss(b_.steps);
  EXPECT_EQ(
      s->index(CompareSummaryModel::FinalLoss, aLower ? 1 : 2).data(kCompareEmphasisRole).toBool(),
      true);
}

TEST_F(CompareModelTest, CurvesAlignByStepTokensAndWallTime) {
  auto mp = loadSync(db_, {idA_, idB_});
  CompareModel& m = *mp;
  using M = CompareModel::Metric;
  using X = CompareModel::Axis;
  for (int run = 0; run < 2; ++run) {
    const RunSpec& sp = run == 0 ? a_ : b_;
    const auto byStep = m.curve(run, M::TrainLoss, X::Step);
    const auto byTokens = m.curve(run, M::TrainLoss, X::Tokens);
    const auto byTime = m.curve(run, M::TrainLoss, X::WallTime);
    ASSERT_EQ(byStep.mean.size(), sp.steps);
    ASSERT_EQ(byTokens.mean.size(), sp.steps);
    ASSERT_EQ(byTime.mean.size(), sp.steps);
    for (int k = 0; k < sp.steps; ++k) {
      const int step = k + 1;
      EXPECT_DOUBLE_EQ(byStep.mean[k].x(), step);
      EXPECT_NEAR(byStep.mean[k].y(), sp.loss(step), 1e-12);
      EXPECT_DOUBLE_EQ(byTokens.mean[k].x(), double(step * sp.tokensPerStep()));
      EXPECT_NEAR(byTime.mean[k].x(), sp.stepTime(step) - sp.t0, 1e-6);
    }
    const auto lr = m.curve(run, M::Lr, X::Step);
    ASSERT_EQ(lr.mean.size(), sp.steps);
    EXPECT_NEAR(lr.mean[4].y(), sp.lr(5), 1e-15);
    const auto tps = m.curve(run, M::TokensPerS, X::Tokens);
    ASSERT_EQ(tps.mean.size(), sp.steps);
    EXPECT_NEAR(tps.mean[2].y(), sp.tokensPerS(3), 1e-9);
    const auto ev = m.curve(run, M::EvalLoss, X::Tokens);
    ASSERT_EQ(ev.mean.size(), sp.steps / sp.evalEvery);
    EXPECT_DOUBLE_EQ(ev.mean[0].x(), double(sp.evalEvery * sp.tokensPerStep()));
    EXPECT_NEAR(ev.mean[0].y(), sp.evalLoss(sp.evalEvery), 1e-12);
  }
  // Same tokens seen lands at different steps: run B (half the batch) at twice the step.
  EXPECT_DOUBLE_EQ(*m.xAt(0, 10, X::Tokens), *m.xAt(1, 20, X::Tokens));
}

TEST_F(CompareModelTest, DownsampledEnvelopeKeepsSpikesAndAlignsBuckets) {
  auto mp = loadSync(db_, {idA_, idLong_}, 16);
  CompareModel& m = *mp;
  const auto c = m.curve(1, CompareModel::Metric::TrainLoss, CompareModel::Axis::Tokens);
  ASSERT_GT(c.mean.size(), 1);
  ASSERT_LE(c.mean.size(), 40);  // downsampled (400 steps)
  ASSERT_EQ(c.envelope.size(), 2 * c.mean.size());
  double lo = 1e9, hi = -1e9, recordedLo = 1e9, recordedHi = -1e9;
  for (int s = 1; s <= long_.steps; ++s) {
    recordedLo = std::min(recordedLo, long_.loss(s));
    recordedHi = std::max(recordedHi, long_.loss(s));
  }
  const auto& buckets = m.run(1).loss;
  ASSERT_EQ(int(buckets.size()), c.mean.size());
  for (int k = 0; k < c.mean.size(); ++k) {
    const double mn = c.envelope[2 * k].y(), mx = c.envelope[2 * k + 1].y();
    EXPECT_LE(mn, c.mean[k].y() + 1e-12);
    EXPECT_GE(mx, c.mean[k].y() - 1e-12);
    lo = std::min(lo, mn);
    hi = std::max(hi, mx);
    // Tokens are linear in the step, so a bucket sits at its middle step's tokens.
    const double mid = 0.5 * double(buckets[size_t(k)].firstStep + buckets[size_t(k)].lastStep);
    EXPECT_NEAR(c.mean[k].x(), mid * double(long_.tokensPerStep()), 1e-6);
  }
  EXPECT_NEAR(lo, recordedLo, 1e-12);
  EXPECT_NEAR(hi, recordedHi, 1e-12);  // the step-37 spikes survive
}

TEST_F(CompareModelTest, MemoryPredictedAndMeasuredPerCategory) {
  auto mp = loadSync(db_, {idA_, idB_});
  CompareModel& m = *mp;
  auto* mm = m.memoryModel();
  ASSERT_EQ(mm->rowCount(), core::kMemoryCategoryCount + 2);
  ASSERT_EQ(mm->columnCount(), 1 + 2 * 2);
  EXPECT_EQ(mm->index(3, 0).data().toString(), "Activations");
  EXPECT_EQ(mm->index(2, 0).data().toString(), "Optimizer state");
  for (int run = 0; run < 2; ++run) {
    const RunSpec& sp = run == 0 ? a_ : b_;
    int64_t planTotal = 0;
    for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
      int64_t measured = 0;
      for (int s = sp.memoryEvery; s <= sp.steps; s += sp.memoryEvery)
        measured = std::max(measured, sp.measuredPeak(c, s));
      EXPECT_EQ(mm->index(c, 1 + 2 * run).data(Qt::UserRole).toLongLong(), sp.plannedPeak(c))
          << run << " " << c;
      EXPECT_EQ(mm->index(c, 2 + 2 * run).data(Qt::UserRole).toLongLong(), measured)
          << run << " " << c;
      planTotal += sp.plannedPeak(c);
    }
    EXPECT_EQ(
        mm->index(CompareMemoryModel::kDeviceTotalRow, 1 + 2 * run).data(Qt::UserRole).toLongLong(),
        planTotal);
    EXPECT_EQ(mm->index(CompareMemoryModel::kHostRow, 2 + 2 * run).data(Qt::UserRole).toLongLong(),
              0);
  }
  EXPECT_TRUE(mm->headerData(1, Qt::Horizontal).toString().contains("predicted"));
  EXPECT_TRUE(mm->headerData(2, Qt::Horizontal).toString().contains("measured"));
}

TEST_F(CompareModelTest, LoadsOnWorkerAndReportsErrors) {
  CompareModel m{RunRepository(db_)};
  QAbstractItemModelTester t(m.summaryModel(),
                             QAbstractItemModelTester::FailureReportingMode::Fatal);
  QSignalSpy loaded(&m, &CompareModel::loaded);
  QSignalSpy failed(&m, &CompareModel::failed);
  m.load({idA_, idB_, idLong_});
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  EXPECT_EQ(m.runCount(), 3);
  EXPECT_EQ(m.summaryModel()->columnCount(), 4);
  EXPECT_FALSE(m.loading());

  m.load({idA_});
  ASSERT_TRUE(failed.wait(testutil::kWaitCapMs));
  EXPECT_TRUE(failed.takeFirst().at(0).toString().contains("two"));
  m.load({idA_, 987654});
  ASSERT_TRUE(failed.wait(testutil::kWaitCapMs));
  EXPECT_TRUE(failed.takeFirst().at(0).toString().contains("987654"));
  EXPECT_EQ(m.runCount(), 3);  // a failed load leaves the last comparison in place

  // A newer load supersedes one still on the worker: only the newest lands.
  loaded.clear();
  m.load({idA_, idLong_});
  m.load({idA_, idB_});
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  for (int i = 0; i < 50 && m.loading(); ++i) QTest::qWait(20);
  EXPECT_EQ(loaded.size(), 1);
  ASSERT_EQ(m.runCount(), 2);
  EXPECT_EQ(m.run(1).detail.id, idB_);
}

// Two converged runs: losses print with 4 significant digits (the CLI's 1.088e-05, not
// 0.0000), no run is bold where both print the same, and exact-match accuracy has its row
// (higher is better).
TEST(CompareSummary, ConvergedLossesTieAtTheShownPrecisionAndAccuracyHasARow) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  auto record = [&](const std::string& name, double loss, double evalLoss, double accuracy) {
    core::RunRecorder::Options o;
    o.dbPath = db;
    o.runDir = dir.filePath(QString::fromStdString(name)).toStdString();
    o.name = name;
    core::RunRecorder rec(o);
    int64_t seq = 0;
    auto ev = [&](nlohmann::json e) {
      e["seq"] = seq;
      e["time"] = 1.7e9 + double(seq++);
      rec.record(e);
    };
    ev({{"type", "hello"}, {"backend", "cpu"}});
    ev({{"type", "step"}, {"step", 1}, {"loss", loss}, {"tokens", 64}, {"tokens_per_s", 100.0}});
    ev({{"type", "eval"}, {"step", 1}, {"val_loss", evalLoss}, {"accuracy", accuracy}});
    ev({{"type", "finished"}, {"status", "completed"}});
    rec.close();
    return rec.runId();
  };
  const int64_t a = record("a", 1.0876e-05, 2.0e-06, 1.0);
  const int64_t b = record("b", 1.0884e-05, 3.0e-06, 0.9);
  auto m = loadSync(db, {a, b});
  auto* s = m->summaryModel();
  auto text = [&](int row, int col) { return s->index(row, col).data().toString(); };
  auto bold = [&](int row, int col) {
    return s->index(row, col).data(kCompareEmphasisRole).toBool();
  };
  EXPECT_EQ(text(CompareSummaryModel::FinalLoss, 1), "1.088e-05");
  EXPECT_EQ(text(CompareSummaryModel::FinalLoss, 2), "1.088e-05");
  EXPECT_FALSE(bold(CompareSummaryModel::FinalLoss, 1)) << "equal as shown: no winner";
  EXPECT_FALSE(bold(CompareSummaryModel::FinalLoss, 2)) << "equal as shown: no winner";
  EXPECT_EQ(text(CompareSummaryModel::BestEvalLoss, 1), "2.000e-06");
  EXPECT_TRUE(bold(CompareSummaryModel::BestEvalLoss, 1));
  EXPECT_FALSE(bold(CompareSummaryModel::BestEvalLoss, 2));
  EXPECT_EQ(s->headerData(CompareSummaryModel::Accuracy, Qt::Vertical).toString(),
            "Exact-match accuracy");
  EXPECT_EQ(text(CompareSummaryModel::Accuracy, 1), "100.0%");
  EXPECT_EQ(text(CompareSummaryModel::Accuracy, 2), "90.0%");
  EXPECT_TRUE(bold(CompareSummaryModel::Accuracy, 1));
  EXPECT_FALSE(bold(CompareSummaryModel::Accuracy, 2));
}
