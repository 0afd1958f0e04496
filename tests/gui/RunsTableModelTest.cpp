// Runs browser: RunsTableModel under QAbstractItemModelTester against a real SQLite file with
// a few hundred runs recorded through RunRecorder; sorting, search, status filter, edits,
// delete and metrics export through RunsBrowser (worker thread).
#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include <gtest/gtest.h>
#include <QAbstractItemModelTester>
#include <QDir>
#include <QFile>
#include <QHeaderView>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "CompareTestRuns.h"
#include "GuiTestUtil.h"
#include "RunsPage.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/RunsTableModel.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

constexpr int kRuns = 240;
constexpr int kSteps = 5;

// Independent description of what was recorded, to check the table against.
QString runName(int i) {
  return QStringLiteral("run-%1").arg(i, 3, 10, QChar('0'));
}
double evalLoss(int i) {
  return 1.0 + ((i * 37) % kRuns) / 100.0;
}
bool failed(int i) {
  return i % 10 == 3;
}
double stepLoss(int i, int s) {
  return 5.0 / (s + 1) + i * 1e-3;
}

class RunsBrowserTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new QTemporaryDir;
    db_ = dir_->filePath("runs.db").toStdString();
    for (int i = 0; i < kRuns; ++i) {
      core::RunRecorder::Options o;
      o.dbPath = db_;
      o.runDir = dir_->filePath(QStringLiteral("run%1").arg(i)).toStdString();
      o.name = runName(i).toStdString();
      o.backend = "cpu";
      core::RunRecorder rec(o);
      int64_t seq = 0;
      const double t0 = 1.7e9 + i * 100.0;
      rec.record(
          {{"type", "hello"}, {"seq", seq++}, {"time", t0}, {"backend", "cpu"}, {"ranks", 1}});
      for (int s = 0; s < kSteps; ++s)
        rec.record({{"type", "step"},
                    {"seq", seq++},
                    {"time", t0 + 1 + s},
                    {"step", s},
                    {"loss", stepLoss(i, s)},
                    {"lr", 1e-3},
                    {"tokens", (s + 1) * 64},
                    {"tokens_per_s", 1000.0 + i}});
      rec.record({{"type", "eval"},
                  {"seq", seq++},
                  {"time", t0 + 8},
                  {"step", kSteps - 1},
                  {"loss", evalLoss(i)}});
      rec.record({{"type", "finished"},
                  {"seq", seq++},
                  {"time", t0 + 10 + i % 7},
                  {"status", failed(i) ? "failed" : "completed"}});
      rec.close();
    }
    auto store = core::RunStore::open(db_);
    const auto runs = store.listRuns();
    ASSERT_EQ(static_cast<int>(runs.size()), kRuns);
    for (const auto& r : runs) {
      const int i = QString::fromStdString(r.name).mid(4).toInt();
      if (i % 4 == 0) store.setTags(r.id, {"baseline", i % 8 == 0 ? "bf16" : "fp32"});
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  void load(RunsBrowser& b) {
    QSignalSpy spy(&b, &RunsBrowser::loaded);
    b.reload();
    ASSERT_TRUE(spy.wait(testutil::kWaitCapMs));
  }
  // Waits for one edit's `done` and the reload it triggers.
  std::pair<bool, QString> waitDone(RunsBrowser& b, QSignalSpy& done) {
    if (done.isEmpty()) {
      EXPECT_TRUE(done.wait(testutil::kWaitCapMs));
    }
    for (int i = 0; i < 600 && b.busy(); ++i) QTest::qWait(20);
    if (done.isEmpty()) return {false, "no done signal"};
    auto args = done.takeFirst();
    return {args.at(0).toBool(), args.at(1).toString()};
  }
  int64_t idOf(const RunsTableModel& m, int i) {
    for (int r = 0; r < m.rowCount(); ++r)
      if (m.run(r)->name == runName(i).toStdString()) return m.run(r)->id;
    return 0;
  }

  static QTemporaryDir* dir_;
  static std::string db_;
};
QTemporaryDir* RunsBrowserTest::dir_ = nullptr;
std::string RunsBrowserTest::db_;

}  // namespace

TEST_F(RunsBrowserTest, LoadsEveryRunUnderModelTester) {
  RunsTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  RunsBrowser b(RunRepository(db_), &model);
  load(b);
  ASSERT_EQ(model.rowCount(), kRuns);
  EXPECT_EQ(model.columnCount(), RunsTableModel::ColumnCount);
  // Default order: newest start first (run i started at 1.7e9 + 100 i).
  EXPECT_EQ(model.data(model.index(0, RunsTableModel::Name)).toString(), runName(kRuns - 1));
  const int row = model.rowOfRun(idOf(model, 42));
  ASSERT_GE(row, 0);
  EXPECT_EQ(model.data(model.index(row, RunsTableModel::Status)).toString(), "completed");
  EXPECT_EQ(model.data(model.index(row, RunsTableModel::Steps)).toLongLong(), kSteps - 1);
  EXPECT_NEAR(model.data(model.index(row, RunsTableModel::FinalLoss), Qt::UserRole).toDouble(),
              stepLoss(42, kSteps - 1), 1e-9);
  EXPECT_NEAR(model.data(model.index(row, RunsTableModel::BestEvalLoss), Qt::UserRole).toDouble(),
              evalLoss(42), 1e-9);
  EXPECT_NEAR(model.data(model.index(row, RunsTableModel::TokensPerS), Qt::UserRole).toDouble(),
              1042.0, 1e-9);
  // finished - started: 10 + 42 % 7 = 10 s after hello
  EXPECT_NEAR(model.data(model.index(row, RunsTableModel::Duration), Qt::UserRole).toDouble(), 10.0,
              1e-6);
  EXPECT_EQ(model.data(model.index(row, RunsTableModel::Duration)).toString(), "10 s");
  EXPECT_EQ(model.data(model.index(row, RunsTableModel::Tags)).toString(), "");
  const int row44 = model.rowOfRun(idOf(model, 44));  // 44 % 4 == 0, 44 % 8 != 0
  EXPECT_EQ(model.data(model.index(row44, RunsTableModel::Tags)).toString(), "baseline, fp32");

  // Sorting by best eval loss, ascending: the minimum over the recorded values comes first.
  model.sort(RunsTableModel::BestEvalLoss, Qt::AscendingOrder);
  int best = 0;
  for (int i = 1; i < kRuns; ++i)
    if (evalLoss(i) < evalLoss(best)) best = i;
  EXPECT_EQ(model.data(model.index(0, RunsTableModel::Name)).toString(), runName(best));
  for (int r = 1; r < model.rowCount(); ++r)
    ASSERT_LE(model.data(model.index(r - 1, RunsTableModel::BestEvalLoss), Qt::UserRole).toDouble(),
              model.data(model.index(r, RunsTableModel::BestEvalLoss), Qt::UserRole).toDouble());
  // By name, descending; a persistent index follows its run through the re-sort.
  QPersistentModelIndex p(model.index(5, RunsTableModel::Name));
  const QString pName = p.data().toString();
  model.sort(RunsTableModel::Name, Qt::DescendingOrder);
  EXPECT_EQ(model.data(model.index(0, RunsTableModel::Name)).toString(), runName(kRuns - 1));
  EXPECT_EQ(p.data().toString(), pName);
}

TEST_F(RunsBrowserTest, SearchAndStatusFilter) {
  RunsTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  RunsBrowser b(RunRepository(db_), &model);
  load(b);
  auto expected = [](auto pred) {
    int n = 0;
    for (int i = 0; i < kRuns; ++i) n += pred(i) ? 1 : 0;
    return n;
  };
  model.setSearchText("RUN-01");  // case-insensitive: run-010 .. run-019 and run-01x
  EXPECT_EQ(model.rowCount(), expected([](int i) { return runName(i).startsWith("run-01"); }));
  model.setSearchText("bf16");  // a tag
  EXPECT_EQ(model.rowCount(), expected([](int i) { return i % 8 == 0; }));
  model.setSearchText("");
  EXPECT_EQ(model.rowsWithStatus("failed"), expected(failed));
  model.setStatusFilter("failed");
  EXPECT_EQ(model.rowCount(), expected(failed));
  model.setSearchText("baseline");
  EXPECT_EQ(model.rowCount(), expected([](int i) { return failed(i) && i % 4 == 0; }));
  EXPECT_EQ(model.rowsWithStatus("failed"), model.rowCount());  // only the rows shown
  EXPECT_EQ(model.rowsWithStatus("completed"), 0);
  EXPECT_EQ(model.totalRuns(), kRuns);
  model.setStatusFilter("");
  model.setSearchText("no such run");
  EXPECT_EQ(model.rowCount(), 0);
}

TEST_F(RunsBrowserTest, EditsDeleteAndExport) {
  RunsTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  RunsBrowser b(RunRepository(db_), &model);
  load(b);
  QSignalSpy done(&b, &RunsBrowser::done);
  const int64_t id = idOf(model, 7);
  ASSERT_GT(id, 0);

  b.rename(id, "  renamed seven ");
  auto [ok1, m1] = waitDone(b, done);
  EXPECT_TRUE(ok1) << m1.toStdString();
  b.setTags(id, {"a", " b ", ""});
  auto [ok2, m2] = waitDone(b, done);
  EXPECT_TRUE(ok2) << m2.toStdString();
  b.setNotes(id, "lr too high");
  auto [ok3, m3] = waitDone(b, done);
  EXPECT_TRUE(ok3) << m3.toStdString();
  {
    auto store = core::RunStore::open(db_, core::RunStore::Mode::ReadOnly);
    auto r = store.getRun(id);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->name, "renamed seven");
    EXPECT_EQ(r->tags, (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(r->notes, "lr too high");
  }
  // The table reloaded: searchable by the new notes.
  model.setSearchText("too high");
  ASSERT_EQ(model.rowCount(), 1);
  EXPECT_EQ(model.run(0)->id, id);
  model.setSearchText("");

  // Exports: the CSV has a header and one line per recorded step with the recorded losses.
  QTemporaryDir out;
  const QString csv = out.filePath("m.csv");
  b.exportMetrics(id, csv, RunsBrowser::ExportFormat::Csv);
  auto [ok4, m4] = waitDone(b, done);
  ASSERT_TRUE(ok4) << m4.toStdString();
  QFile f(csv);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const QStringList lines = QString(f.readAll()).trimmed().split('\n');
  ASSERT_EQ(lines.size(), kSteps + 1);
  EXPECT_EQ(lines[0], "step,time,loss,lr,grad_norm,loss_scale,tokens,tokens_per_s,step_ms,skipped");
  for (int s = 0; s < kSteps; ++s) {
    const QStringList cells = lines[s + 1].split(',');
    ASSERT_EQ(cells.size(), 10);
    EXPECT_EQ(cells[0].toInt(), s);
    EXPECT_NEAR(cells[2].toDouble(), stepLoss(7, s), 1e-12);
    EXPECT_EQ(cells[6].toLongLong(), (s + 1) * 64);
  }
  const QString js = out.filePath("m.json");
  b.exportMetrics(id, js, RunsBrowser::ExportFormat::Json);
  auto [ok5, m5] = waitDone(b, done);
  ASSERT_TRUE(ok5) << m5.toStdString();
  QFile jf(js);
  ASSERT_TRUE(jf.open(QIODevice::ReadOnly));
  const auto j = nlohmann::json::parse(jf.readAll().toStdString());
  EXPECT_EQ(j["run"]["name"], "renamed seven");
  ASSERT_EQ(j["metrics"].size(), size_t(kSteps));
  EXPECT_NEAR(j["metrics"][2]["loss"].get<double>(), stepLoss(7, 2), 1e-12);
  ASSERT_EQ(j["evals"].size(), 1u);
  EXPECT_NEAR(j["evals"][0]["loss"].get<double>(), evalLoss(7), 1e-12);
  // An unwritable path is reported, naming it.
  b.exportMetrics(id, out.filePath("missing/dir/m.csv"), RunsBrowser::ExportFormat::Csv);
  auto [ok6, m6] = waitDone(b, done);
  EXPECT_FALSE(ok6);
  EXPECT_TRUE(m6.contains("missing/dir")) << m6.toStdString();

  // Delete: gone from the store and the table.
  const int before = model.totalRuns();
  b.deleteRun(id, true);
  auto [ok7, m7] = waitDone(b, done);
  EXPECT_TRUE(ok7) << m7.toStdString();
  EXPECT_EQ(model.totalRuns(), before - 1);
  EXPECT_EQ(model.rowOfRun(id), -1);
  EXPECT_FALSE(core::RunStore::open(db_, core::RunStore::Mode::ReadOnly).getRun(id));
  // Editing a run that no longer exists is an error naming it, not a crash.
  b.rename(id, "ghost");
  auto [ok8, m8] = waitDone(b, done);
  EXPECT_FALSE(ok8);
  EXPECT_TRUE(m8.contains(QString::number(id))) << m8.toStdString();
}

// Technique badges from configs written out by hand (each key as docs/config.md names it).
TEST(RunsTableBadges, DerivedFromTheConfig) {
  using nlohmann::json;
  EXPECT_TRUE(techniqueBadges(nullptr).isEmpty());
  EXPECT_TRUE(techniqueBadges(json::array()).isEmpty());
  EXPECT_TRUE(techniqueBadges({{"precision", {{"policy", "fp32"}}},
                               {"memory", {{"checkpointing", "none"}}},
                               {"parallel", {{"zero_stage", 0}, {"offload_optimizer", "none"}}}})
                  .isEmpty());
  const json all = {
      {"precision", {{"policy", "fp8"}}},
      {"memory", {{"checkpointing", "every_k"}, {"activation_compression", "int8"}}},
      {"parallel", {{"zero_stage", 3}, {"offload_optimizer", "none"}, {"offload_params", "cpu"}}},
      {"attention", {{"impl", "flash"}}},
      {"train", {{"grad_accum", 4}}},
      {"optimizer", {{"state_bits", 8}}},
      {"finetune", {{"lora", {{"r", 16}}}, {"base_quant", "nf4"}}},
      {"distill", {{"teacher_checkpoint", "/ckpt/teacher.tsck"}}},
      {"profile", {{"enabled", true}}}};
  EXPECT_EQ(techniqueBadges(all),
            (QStringList{"fp8", "ckpt", "ZeRO-3", "offload", "compress", "flash", "accum",
                         "8-bit opt", "QLoRA", "distill", "profile"}));
  EXPECT_EQ(techniqueBadges({{"finetune", {{"lora", {{"r", 4}}}, {"base_quant", "none"}}},
                             {"precision", {{"policy", "pure_bf16"}}}}),
            (QStringList{"pure bf16", "LoRA"}));
  // Wrong types are "off", never a crash.
  EXPECT_TRUE(techniqueBadges({{"precision", 3}, {"parallel", {{"zero_stage", "two"}}}}).isEmpty());
}

// Config-value search, and typing word by word (the narrowing path) gives exactly what a
// fresh filter gives, checked against a brute-force match over the same entries.
TEST(RunsTableSearch, ConfigValuesAndIncrementalTypingAgreeWithBruteForce) {
  using nlohmann::json;
  std::vector<RunEntry> entries;
  std::vector<json> configs;
  for (int i = 0; i < 300; ++i) {
    core::RunSummary s;
    s.id = i + 1;
    s.name = "Run-" + std::to_string(i);
    s.status = i % 5 == 0 ? "failed" : "completed";
    s.started = 1.7e9 + i;
    if (i % 6 == 0) s.notes = "Loss Spike";
    json c = {{"precision", {{"policy", i % 3 == 0 ? "bf16" : "fp32"}}},
              {"optimizer", {{"lr", i % 4 == 0 ? 3e-4 : 1e-3}}},
              {"parallel", {{"zero_stage", i % 7 == 0 ? 2 : 0}}}};
    configs.push_back(c);
    entries.push_back(makeRunEntry(s, c));
  }
  RunsTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  model.setEntries(entries);
  auto brute = [&](const std::vector<std::string>& words, const QString& status) {
    std::set<int64_t> ids;
    for (int i = 0; i < 300; ++i) {
      if (!status.isEmpty() && QString::fromStdString(entries[i].summary.status) != status)
        continue;
      const json& c = configs[i];
      std::string hay = "run-" + std::to_string(i) + "\n" + (i % 6 == 0 ? "loss spike\n" : "") +
                        entries[i].summary.status + "\n" +
                        c["precision"]["policy"].get<std::string>() + "\n" +
                        c["optimizer"]["lr"].dump() + "\n" +
                        std::to_string(c["parallel"]["zero_stage"].get<int>()) +
                        (c["parallel"]["zero_stage"].get<int>() > 0 ? "\nzero-2" : "");
      bool ok = true;
      for (const auto& w : words) ok = ok && hay.find(w) != std::string::npos;
      if (ok) ids.insert(i + 1);
    }
    return ids;
  };
  auto shown = [&] {
    std::set<int64_t> ids;
    for (int r = 0; r < model.rowCount(); ++r) ids.insert(model.run(r)->id);
    return ids;
  };
  model.setSearchText("0.0003");
  EXPECT_EQ(shown(), brute({"0.0003"}, ""));
  EXPECT_EQ(int(shown().size()), 75);  // i % 4 == 0
  const std::string typed = "BF16 zero loss";
  for (size_t n = 1; n <= typed.size(); ++n) {
    const QString text = QString::fromStdString(typed.substr(0, n));
    model.setSearchText(text);
    std::vector<std::string> words;
    for (const QString& w : text.toLower().split(' ', Qt::SkipEmptyParts))
      words.push_back(w.toStdString());
    ASSERT_EQ(shown(), brute(words, "")) << text.toStdString();
  }
  model.setStatusFilter("failed");
  EXPECT_EQ(shown(), brute({"bf16", "zero", "loss"}, "failed"));
  for (size_t n = typed.size(); n-- > 0;) {  // backspacing widens again
    const QString text = QString::fromStdString(typed.substr(0, n));
    model.setSearchText(text);
    std::vector<std::string> words;
    for (const QString& w : text.toLower().split(' ', Qt::SkipEmptyParts))
      words.push_back(w.toStdString());
    ASSERT_EQ(shown(), brute(words, "failed")) << text.toStdString();
  }
  model.setStatusFilter("");
  EXPECT_EQ(model.rowCount(), 300);
}

// The Model column: the family the run trains and the base it fine-tunes.
TEST(RunsModelColumn, NamesTheFamilyAndTheBase) {
  EXPECT_EQ(modelLabel({{"model", {{"arch", "qwen3"}}}}), "Qwen3");
  EXPECT_EQ(modelLabel({{"model", {{"arch", "gemma3"}}},
                        {"finetune", {{"base_checkpoint", "/models/gemma-3-1b-it/"}}}}),
            "Gemma 3 · gemma-3-1b-it");
  EXPECT_EQ(modelLabel(nlohmann::json::object()), "");
  RunsTableModel m;
  std::vector<RunEntry> rows;
  core::RunSummary s;
  s.id = 1;
  s.name = "a";
  rows.push_back(makeRunEntry(
      s, {{"model", {{"arch", "llama"}}}, {"finetune", {{"base_checkpoint", "/x/Llama-3.2-1B"}}}}));
  m.setEntries(rows);
  EXPECT_EQ(m.data(m.index(0, RunsTableModel::Model)).toString(), "LLaMA · Llama-3.2-1B");
  EXPECT_EQ(m.headerData(RunsTableModel::Model, Qt::Horizontal).toString(), "Model");
}

namespace {

// One run recorded with the given events after its hello; returns its id.
int64_t recordEvents(const std::string& db, const QString& dir, const std::string& name,
                     const std::vector<nlohmann::json>& events, bool finish = true) {
  core::RunRecorder::Options o;
  o.dbPath = db;
  o.runDir = QDir(dir).filePath(QString::fromStdString(name)).toStdString();
  o.name = name;
  o.backend = "cpu";
  core::RunRecorder rec(o);
  int64_t seq = 0;
  rec.record({{"type", "hello"}, {"seq", seq++}, {"time", 1.7e9}, {"backend", "cpu"}});
  for (auto e : events) {
    e["seq"] = seq++;
    e["time"] = 1.7e9 + double(seq);
    rec.record(e);
  }
  if (finish) {
    rec.record(
        {{"type", "finished"}, {"seq", seq++}, {"time", 1.7e9 + 100}, {"status", "completed"}});
    rec.close();
  }
  return rec.runId();
}

}  // namespace

// A converged run: its losses keep 4 significant digits (1.088e-05, not 0.0000), and the
// exact-match accuracy of its latest eval that sent one has a column.
TEST(RunsTableLosses, SignificantDigitsAndTheLatestAccuracy) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  using nlohmann::json;
  recordEvents(db, dir.path(), "converged",
               {{{"type", "step"}, {"step", 1}, {"loss", 2.5}},
                {{"type", "eval"}, {"step", 1}, {"val_loss", 2.4}, {"accuracy", 0.25}},
                {{"type", "step"}, {"step", 2}, {"loss", 1.0876e-05}},
                {{"type", "eval"}, {"step", 2}, {"val_loss", 2.3456e-06}, {"accuracy", 1.0}},
                {{"type", "eval"}, {"step", 2}, {"val_loss", 3e-06}}});
  recordEvents(db, dir.path(), "no-accuracy", {{{"type", "step"}, {"step", 1}, {"loss", 12.5}}});
  QString err;
  RunsTableModel m;
  m.setRuns(RunRepository(db).listRuns(&err));
  ASSERT_TRUE(err.isEmpty()) << err.toStdString();
  ASSERT_EQ(m.rowCount(), 2);
  auto cell = [&](const std::string& name, int col) {
    for (int r = 0; r < m.rowCount(); ++r)
      if (m.run(r)->name == name) return m.index(r, col).data().toString();
    return QString("missing");
  };
  EXPECT_EQ(cell("converged", RunsTableModel::FinalLoss), "1.088e-05");
  EXPECT_EQ(cell("converged", RunsTableModel::BestEvalLoss), "2.346e-06");
  EXPECT_EQ(cell("converged", RunsTableModel::Accuracy), "100.0%");
  EXPECT_EQ(cell("no-accuracy", RunsTableModel::FinalLoss), "12.50");
  EXPECT_EQ(cell("no-accuracy", RunsTableModel::Accuracy), "—");
  EXPECT_EQ(m.headerData(RunsTableModel::Accuracy, Qt::Horizontal).toString(), "Accuracy");
}

// A fine-tune (the config starts from a checkpoint or a Hugging Face folder) has its badge.
TEST(RunsTableBadges, FineTune) {
  EXPECT_EQ(techniqueBadges({{"finetune", {{"base_checkpoint", "/models/Llama-3.2-1B"}}}}),
            QStringList{"fine-tune"});
  EXPECT_TRUE(techniqueBadges({{"finetune", {{"base_checkpoint", ""}}}}).isEmpty());
}

// A run with a kernel timeline is marked, whether the config asked for it or "Profile now"
// recorded one.
TEST(RunsTableBadges, Profiled) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  compare_test::RunSpec profiled, plain;
  profiled.name = "profiled";
  profiled.profile = true;
  plain.name = "plain";
  compare_test::recordRun(db, dir.path(), profiled);
  compare_test::recordRun(db, dir.path(), plain);
  QString err;
  auto details = RunRepository(db).listRunDetails(&err);
  ASSERT_EQ(details.size(), 2u) << err.toStdString();
  for (auto& d : details) {
    const nlohmann::json config = d.config;
    const RunEntry e = makeRunEntry(d, config);
    if (d.name == "profiled") {
      EXPECT_TRUE(e.badges.contains("profiled")) << e.badges.join(",").toStdString();
      EXPECT_FALSE(e.badges.contains("profile"));
    } else {
      EXPECT_FALSE(e.badges.contains("profiled")) << e.badges.join(",").toStdString();
    }
  }
}

// A running row is re-read on the worker (the page asks every 2 s while shown): its steps and
// loss move without a full reload, and the page's timer runs only while the page is visible.
TEST(RunsPageRefresh, RunningRowsFollowTheDatabase) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  core::RunRecorder::Options o;
  o.dbPath = db;
  o.runDir = dir.filePath("live").toStdString();
  o.name = "live";
  auto rec = std::make_unique<core::RunRecorder>(o);
  int64_t seq = 0;
  auto step = [&](int s) {
    rec->record(
        {{"type", "step"}, {"seq", seq++}, {"time", 1.7e9 + s}, {"step", s}, {"loss", 3.0 / s}});
  };
  rec->record({{"type", "hello"}, {"seq", seq++}, {"time", 1.7e9}});
  step(1);
  const RunRepository repo(db);
  const int64_t id = rec->runId();
  ASSERT_TRUE(testutil::waitFor(
      [&] {
        auto r = repo.getRun(id);
        return r && r->lastStep == 1;
      },
      testutil::kWaitCapMs));
  RunsPage page(repo);
  page.setShowDialogs(false);
  EXPECT_FALSE(page.runningRefreshTimer()->isActive());
  page.show();
  EXPECT_TRUE(page.runningRefreshTimer()->isActive());
  QSignalSpy loaded(page.browser(), &RunsBrowser::detailsLoaded);
  page.reload();
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  RunsTableModel* m = page.model();
  ASSERT_EQ(m->rowCount(), 1);
  EXPECT_EQ(m->run(0)->status, "running");
  EXPECT_EQ(m->index(0, RunsTableModel::Steps).data().toLongLong(), 1);

  for (int s = 2; s <= 9; ++s) step(s);
  ASSERT_TRUE(
      testutil::waitFor([&] { return repo.getRun(id)->lastStep == 9; }, testutil::kWaitCapMs));
  QSignalSpy refreshed(page.browser(), &RunsBrowser::runningRefreshed);
  page.browser()->refreshRunning();
  ASSERT_TRUE(refreshed.wait(testutil::kWaitCapMs));
  EXPECT_EQ(m->index(0, RunsTableModel::Steps).data().toLongLong(), 9);
  EXPECT_EQ(m->index(0, RunsTableModel::FinalLoss).data().toString(), "0.3333");
  page.hide();
  EXPECT_FALSE(page.runningRefreshTimer()->isActive());
  rec.reset();
}

// The Runs page opens newest first (Started, descending): its arrow points down (▼), the way
// the dates run, and up once sorted ascending.
TEST(RunsPageHeader, StartedArrowPointsTheWayTheDatesRun) {
  QTemporaryDir dir;
  RunsPage page(RunRepository(dir.filePath("runs.db").toStdString()));
  page.resize(1400, 300);
  page.show();
  QHeaderView* h = page.view()->horizontalHeader();
  ASSERT_EQ(h->sortIndicatorSection(), RunsTableModel::Started);
  ASSERT_EQ(h->sortIndicatorOrder(), Qt::DescendingOrder);
  // Dark pixels per row in the arrow's corner of the section (right end, clear of the text):
  // a ▼ is widest at its top row, a ▲ at its bottom row.
  auto pointsDown = [&] {
    const QImage img = h->grab().toImage();
    const int x1 = h->sectionViewportPosition(RunsTableModel::Started) +
                   h->sectionSize(RunsTableModel::Started) - 2;
    std::vector<int> widths;
    for (int y = 0; y < img.height(); ++y) {
      int n = 0;
      for (int x = x1 - 18; x < x1; ++x) n += qGray(img.pixel(x, y)) < 150;
      if (n > 0) widths.push_back(n);
    }
    EXPECT_GE(widths.size(), 3u) << "no arrow found";
    return !widths.empty() && widths.front() > widths.back();
  };
  EXPECT_TRUE(pointsDown());
  h->setSortIndicator(RunsTableModel::Started, Qt::AscendingOrder);
  EXPECT_FALSE(pointsDown());
}

// With every column (accuracy, model, ...) on the page of a 1440-pixel window, a run's name
// stays readable: the Name column is sized to its contents, not squeezed to "…".
TEST(RunsPageHeader, NameColumnFitsTheName) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  compare_test::RunSpec run;
  run.name = "default-bf16-ckpt";
  compare_test::recordRun(db, dir.path(), run);
  RunsPage page{RunRepository(db)};
  page.resize(1210, 400);
  page.show();
  QSignalSpy loaded(page.browser(), &RunsBrowser::detailsLoaded);
  page.reload();
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  const int need = page.view()->fontMetrics().horizontalAdvance("default-bf16-ckpt");
  EXPECT_GE(page.view()->columnWidth(RunsTableModel::Name), need);
}
