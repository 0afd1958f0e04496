// Real processes: SIGKILL mid-run, two writers + a reader, a lock held past the timeout, and
// read-only file/directory (as an unprivileged user when the tests run as root).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

#include "../support/WaitUntil.h"
#include "StoreTestUtil.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts::core;
using namespace ts::test;

namespace {

const std::string kDriver = STORE_TEST_DRIVER;

int64_t startedId(Child& c) {
  std::string line;
  while (c.readLine(line))
    if (line.rfind("started ", 0) == 0) return std::stoll(line.substr(8));
  return -1;
}

int64_t stepsInDb(const std::string& db, int64_t id) {
  auto store = RunStore::open(db, RunStore::Mode::ReadOnly);
  auto r = store.getRun(id);
  return r ? r->steps : 0;
}

// Steps of a run are exactly 0..n-1 with the driver's losses.
void expectPrefix(RunStore& store, int64_t id, int64_t n) {
  auto steps = store.steps(id);
  ASSERT_EQ(static_cast<int64_t>(steps.size()), n);
  for (int64_t s = 0; s < n; ++s) {
    ASSERT_EQ(steps[s].step, s);
    ASSERT_DOUBLE_EQ(*steps[s].loss, driverLoss(s));
  }
}

}  // namespace

TEST(StoreProcess, SigkillMidRunKeepsCommittedStepsAndShowsCrashed) {
  TempDir tmp;
  std::string db = tmp / "runs.db";
  Child c({kDriver, "record", db, tmp / "run", "victim", "100000000", "1000"});
  int64_t id = startedId(c);
  ASSERT_GT(id, 0);
  // Wait until a few commits have landed, then kill without warning.
  ASSERT_TRUE(testsupport::waitUntil([&] { return stepsInDb(db, id) >= 300; }));
  c.kill9();
  EXPECT_EQ(c.wait(), 128 + SIGKILL);

  RunStore::Options so;
  so.staleAfterSeconds = 0;  // the pid is dead; no need to wait for the heartbeat to age
  auto store = RunStore::open(db, RunStore::Mode::ReadOnly, so);
  auto run = store.getRun(id);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, "crashed");
  EXPECT_GE(run->steps, 300);
  expectPrefix(store, id, run->steps);  // every committed step, intact, nothing torn
  EXPECT_EQ(run->lastStep, run->steps - 1);
  // The events file is flushed before each commit: it holds at least as much.
  auto events = readNdjson(tmp / "run/events.ndjson");
  EXPECT_GE(countType(events, "step"), run->steps);
  {
    auto rw = RunStore::open(db, RunStore::Mode::ReadWrite, so);  // writes `crashed` back
    auto imp = rw.importEvents(tmp / "run");
    EXPECT_TRUE(imp.replaced);
    EXPECT_EQ(rw.getRun(id)->steps, countType(events, "step"));
    EXPECT_EQ(rw.getRun(id)->status, "crashed");
  }
}

TEST(StoreProcess, TwoWritersAndAReaderShareOneFile) {
  TempDir tmp;
  std::string db = tmp / "runs.db";
  { auto s = RunStore::open(db); }
  const int n = 3000;
  Child a({kDriver, "record", db, tmp / "a", "writer-a", std::to_string(n), "200"});
  Child b({kDriver, "record", db, tmp / "b", "writer-b", std::to_string(n), "200"});
  // Read while they write: listing and downsampled fetches never fail.
  auto reader = RunStore::open(db, RunStore::Mode::ReadOnly);
  int reads = 0;
  for (int i = 0; i < 40; ++i) {
    for (auto& r : reader.listRuns()) {
      auto s = reader.metrics(r.id, MetricColumn::Loss, 50);
      EXPECT_LE(s.points.size(), 50u);
      ++reads;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  std::string outA = a.readAll(), outB = b.readAll();
  EXPECT_EQ(a.wait(), 0);
  EXPECT_EQ(b.wait(), 0);
  EXPECT_EQ(outA.find("WARNING"), std::string::npos) << outA;
  EXPECT_EQ(outB.find("WARNING"), std::string::npos) << outB;
  EXPECT_GT(reads, 0);
  auto store = RunStore::open(db);
  auto runs = store.listRuns();
  ASSERT_EQ(runs.size(), 2u);
  for (auto& r : runs) {
    EXPECT_EQ(r.status, "completed") << r.name;
    expectPrefix(store, r.id, n);
  }
}

TEST(StoreProcess, LockedPastTimeoutKeepsRecordingToFile) {
  TempDir tmp;
  std::string db = tmp / "runs.db";
  { auto s = RunStore::open(db); }
  Child locker({kDriver, "lock", db});
  std::string line;
  ASSERT_TRUE(locker.readLine(line));
  ASSERT_EQ(line, "locked");
  Child rec({kDriver, "record", db, tmp / "r", "blocked", "200", "0", "--busy-ms", "300"});
  std::string out = rec.readAll();
  EXPECT_EQ(rec.wait(), 0);
  EXPECT_NE(out.find("WARNING: database " + db + " is locked"), std::string::npos) << out;
  EXPECT_NE(out.find("events.ndjson"), std::string::npos) << out;
  EXPECT_EQ(countType(readNdjson(tmp / "r/events.ndjson"), "step"), 200);
  locker.kill9();
  locker.wait();
  // Once the lock is gone the file loads into the same database: nothing lost.
  auto store = RunStore::open(db);
  auto imp = store.importEvents(tmp / "r");
  expectPrefix(store, imp.runId, 200);
  EXPECT_EQ(store.getRun(imp.runId)->status, "completed");
}

namespace {
// World-writable directory for files an unprivileged child must create.
void openUp(const fs::path& p) {
  chmod(p.c_str(), 0777);
}
}  // namespace

TEST(StoreProcess, ReadOnlyFileKeepsRecordingToFile) {
  TempDir tmp;
  openUp(tmp.path());
  std::string db = tmp / "runs.db";
  { auto s = RunStore::open(db); }
  chmod(db.c_str(), 0444);
  fs::create_directories(tmp.path() / "r");
  openUp(tmp.path() / "r");
  Child rec({kDriver, "record", db, tmp / "r", "ro", "100", "0", "--as-nobody"});
  std::string out = rec.readAll();
  ASSERT_EQ(rec.wait(), 0) << out;
  EXPECT_NE(out.find("WARNING: database " + db + " is read-only"), std::string::npos) << out;
  EXPECT_EQ(countType(readNdjson(tmp / "r/events.ndjson"), "step"), 100);
}

TEST(StoreProcess, ReadOnlyDirectoryKeepsRecordingToFile) {
  TempDir tmp;
  openUp(tmp.path());
  fs::create_directories(tmp.path() / "locked");
  chmod((tmp.path() / "locked").c_str(), 0555);
  fs::create_directories(tmp.path() / "r");
  openUp(tmp.path() / "r");
  std::string db = tmp / "locked/runs.db";
  Child rec({kDriver, "record", db, tmp / "r", "rodir", "100", "0", "--as-nobody"});
  std::string out = rec.readAll();
  ASSERT_EQ(rec.wait(), 0) << out;
  EXPECT_NE(out.find("WARNING: database " + db + " is read-only"), std::string::npos) << out;
  EXPECT_EQ(countType(readNdjson(tmp / "r/events.ndjson"), "step"), 100);
}

// e2e (ctest label e2e sets TRAINSCOPE_ENGINE): kill -9 the real engine mid-run.
TEST(EngineE2E, KillNineRealEngineMidRun) {
  const char* engine = std::getenv("TRAINSCOPE_ENGINE");
  if (!engine || !*engine) GTEST_SKIP() << "TRAINSCOPE_ENGINE not set (run via ctest -L e2e)";
  TempDir tmp;
  std::string db = tmp / "runs.db";
  std::ofstream(tmp / "run.json")
      << R"({"name":"e2e-kill","model":{"layers":1,"d_model":16,"heads":2,"seq_len":16},)"
      << R"("train":{"steps":1000000}})";
  Child c({engine, "run", tmp / "run.json", "--db", db, "--run-dir", tmp / "run"});
  int64_t id = 0;
  std::string line;
  while (c.readLine(line)) {  // the config event carries the run id
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("type", "") == "config") {
      id = e.value("run_id", int64_t{0});
      break;
    }
  }
  ASSERT_GT(id, 0) << "engine produced no config event with a run_id";
  testsupport::waitUntil([&] { return stepsInDb(db, id) >= 20; });
  ASSERT_GE(stepsInDb(db, id), 20);
  c.kill9();
  c.wait();
  RunStore::Options so;
  so.staleAfterSeconds = 0;
  auto store = RunStore::open(db, RunStore::Mode::ReadWrite, so);
  auto run = store.getRun(id);
  EXPECT_EQ(run->status, "crashed");
  auto steps = store.steps(id);
  ASSERT_EQ(static_cast<int64_t>(steps.size()), run->steps);
  // Compare with the events file, written independently of the database.
  std::map<int64_t, double> fileLoss;
  for (auto& e : readNdjson(tmp / "run/events.ndjson"))
    if (e.value("type", "") == "step") fileLoss[e["step"].get<int64_t>()] = e["loss"].get<double>();
  ASSERT_GE(fileLoss.size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i > 0) EXPECT_EQ(steps[i].step, steps[i - 1].step + 1);  // no gaps up to the last commit
    ASSERT_TRUE(fileLoss.count(steps[i].step));
    EXPECT_DOUBLE_EQ(*steps[i].loss, fileLoss[steps[i].step]);
  }
  auto imp = store.importEvents(tmp / "run");
  EXPECT_EQ(imp.runId, id);
  EXPECT_EQ(store.getRun(id)->steps, static_cast<int64_t>(fileLoss.size()));
}

// e2e: a real engine's evals reach the run's summary ("Best eval loss" on the Runs page). The
// engine sends `val_loss`; a store that read only `loss` recorded every eval without a loss.
TEST(EngineE2E, RealEngineEvalsSetBestEvalLoss) {
  const char* engine = std::getenv("TRAINSCOPE_ENGINE");
  if (!engine || !*engine) GTEST_SKIP() << "TRAINSCOPE_ENGINE not set (run via ctest -L e2e)";
  TempDir tmp;
  std::string db = tmp / "runs.db";
  std::ofstream(tmp / "run.json")
      << R"({"name":"e2e-evals","model":{"layers":1,"d_model":16,"heads":2,"seq_len":16},)"
      << R"("train":{"steps":40,"eval_every":10},"device":{"threads":1}})";
  Child c({engine, "run", tmp / "run.json", "--db", db, "--run-dir", tmp / "run"});
  std::string line;
  while (c.readLine(line)) {
  }
  ASSERT_EQ(c.wait(), 0);
  std::vector<double> fileEvals;
  for (auto& e : readNdjson(tmp / "run/events.ndjson"))
    if (e.value("type", "") == "eval") fileEvals.push_back(e.at("val_loss").get<double>());
  ASSERT_EQ(fileEvals.size(), 4u);
  auto store = RunStore::open(db, RunStore::Mode::ReadOnly);
  auto runs = store.listRuns();
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_TRUE(runs[0].bestEvalLoss) << "best eval loss not recorded";
  EXPECT_DOUBLE_EQ(*runs[0].bestEvalLoss, *std::min_element(fileEvals.begin(), fileEvals.end()));
  auto evals = store.evals(runs[0].id);
  ASSERT_EQ(evals.size(), fileEvals.size());
  for (size_t i = 0; i < evals.size(); ++i) {
    ASSERT_TRUE(evals[i].loss) << "eval " << i;
    EXPECT_DOUBLE_EQ(*evals[i].loss, fileEvals[i]);
  }
}
