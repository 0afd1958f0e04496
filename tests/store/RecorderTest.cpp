// RunRecorder in-process: what lands in the store and the events file, and the fallback to the
// file when the database cannot be used (corrupt, full).
#include <gtest/gtest.h>

#include <cstdlib>

#include "StoreTestUtil.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts::core;
using namespace ts::test;
using nlohmann::json;

namespace {

json memoryEvent(int64_t seq, bool plan, int64_t scale) {
  // rank 0: device peaks 100+200 (+host 5000, not device); rank 1: device peak 250
  json r0 = {{"rank", 0},
             {"tiers",
              {{"device",
                {{"parameters", {{"current", 90 * scale}, {"peak", 100 * scale}}},
                 {"gradients", {{"current", 10 * scale}, {"peak", 200 * scale}}}}},
               {"host", {{"optimizer_state", {{"current", 5000}, {"peak", 5000}}}}}}}};
  json r1 = {{"rank", 1},
             {"tiers", {{"device", {{"activations", {{"current", 1}, {"peak", 250 * scale}}}}}}}};
  return {{"type", plan ? "memory_plan" : "memory"},
          {"seq", seq},
          {"time", 1.0 * seq},
          {"ranks", {r0, r1}}};
}

bool anyContains(const std::vector<std::string>& v, const std::string& a, const std::string& b) {
  for (auto& s : v)
    if (s.find(a) != std::string::npos && s.find(b) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(RunRecorder, RecordsEveryEventTypeIntoStoreAndFile) {
  TempDir tmp;
  RunRecorder::Options o;
  o.dbPath = tmp / "runs.db";
  o.runDir = tmp / "run1";
  o.name = "first";
  o.backend = "cpu";
  o.ranks = 2;
  std::vector<json> sent;
  int64_t seq = 0;
  auto send = [&](json e) {
    sent.push_back(e);
    return e;
  };
  int64_t id;
  {
    RunRecorder rec(o);
    id = rec.runId();
    ASSERT_GT(id, 0);
    rec.record(send(
        {{"type", "hello"}, {"seq", seq++}, {"time", 100.0}, {"backend", "cpu"}, {"ranks", 2}}));
    rec.record(send({{"type", "config"},
                     {"seq", seq++},
                     {"time", 100.5},
                     {"config", {{"model", {{"layers", 2}}}}}}));
    rec.record(send(memoryEvent(seq++, true, 1000)));
    for (int s = 0; s < 300; ++s)
      rec.record(send({{"type", "step"},
                       {"seq", seq++},
                       {"time", 101.0 + s},
                       {"step", s},
                       {"loss", 10.0 - 0.01 * s},
                       {"lr", 1e-3},
                       {"grad_norm", 0.5},
                       {"tokens", 128 * (s + 1)},
                       {"tokens_per_s", 500.0 + s},
                       {"step_ms", 2.0},
                       {"loss_scale", 65536.0},
                       {"skipped", s == 7}}));
    rec.record(send(memoryEvent(seq++, false, 1)));
    rec.record(
        send({{"type", "eval"}, {"seq", seq++}, {"time", 150.0}, {"step", 100}, {"loss", 9.5}}));
    rec.record(
        send({{"type", "eval"}, {"seq", seq++}, {"time", 160.0}, {"step", 200}, {"loss", 8.75}}));
    rec.record(send({{"type", "checkpoint"},
                     {"seq", seq++},
                     {"time", 170.0},
                     {"step", 200},
                     {"path", "/ckpt/200"},
                     {"checksum", "crc32:deadbeef"}}));
    rec.record(send({{"type", "kernel_summary"},
                     {"seq", seq++},
                     {"time", 171.0},
                     {"window", 0},
                     {"ops", json::array({{{"name", "matmul"}, {"total_ms", 3.0}}})}}));
    rec.record(send({{"type", "log"}, {"seq", seq++}, {"time", 172.0}, {"message", "hi"}}));
    rec.record(send({{"type", "finished"},
                     {"seq", seq++},
                     {"time", 400.0},
                     {"status", "stopped"},
                     {"reason", "user asked"}}));
    rec.close();
    EXPECT_TRUE(rec.takeWarnings().empty());
  }
  auto fileEvents = readNdjson(tmp / "run1/events.ndjson");
  EXPECT_EQ(fileEvents, sent);  // every event, in order, unchanged

  auto store = RunStore::open(o.dbPath, RunStore::Mode::ReadOnly);
  auto run = store.getRun(id);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->name, "first");
  EXPECT_EQ(run->status, "stopped");
  EXPECT_EQ(run->reason, "user asked");
  EXPECT_EQ(run->ranks, 2);
  EXPECT_EQ(run->steps, 300);
  EXPECT_DOUBLE_EQ(*run->lastLoss, 10.0 - 0.01 * 299);
  EXPECT_DOUBLE_EQ(*run->bestEvalLoss, 8.75);
  EXPECT_DOUBLE_EQ(*run->tokensPerS, 799.0);
  EXPECT_EQ(run->peakMemory, 300);  // measured only, device tier, max over ranks (300 vs 250)
  EXPECT_DOUBLE_EQ(run->started, 100.0);
  EXPECT_DOUBLE_EQ(run->finished, 400.0);
  EXPECT_EQ(run->config["model"]["layers"], 2);
  auto steps = store.steps(id);
  ASSERT_EQ(steps.size(), 300u);
  EXPECT_TRUE(steps[7].skipped);
  EXPECT_FALSE(steps[8].skipped);
  EXPECT_EQ(*steps[9].tokens, 1280);
  EXPECT_DOUBLE_EQ(*steps[9].lossScale, 65536.0);
  ASSERT_EQ(store.evals(id).size(), 2u);
  auto mem = store.memorySamples(id);
  EXPECT_EQ(mem.size(), 8u);  // 4 entries per event, plan + measured
  EXPECT_EQ(store.memorySamples(id, false).size(), 4u);
  ASSERT_EQ(store.checkpoints(id).size(), 1u);
  EXPECT_EQ(store.checkpoints(id)[0].path, "/ckpt/200");
  EXPECT_EQ(store.checkpoints(id)[0].step, 200);
  ASSERT_EQ(store.kernelSummaries(id).size(), 1u);
  EXPECT_EQ(store.kernelSummaries(id)[0].body["ops"][0]["name"], "matmul");
  auto logs = store.events(id, {"log", "finished"});
  ASSERT_EQ(logs.size(), 2u);
  EXPECT_EQ(logs[0].body["message"], "hi");
  EXPECT_TRUE(store.events(id, {"step"}).empty());
}

TEST(RunRecorder, CloseWithoutFinishedMarksFailed) {
  TempDir tmp;
  RunRecorder::Options o;
  o.dbPath = tmp / "runs.db";
  o.runDir = tmp / "r";
  RunRecorder rec(o);
  rec.record({{"type", "step"}, {"seq", 0}, {"time", 1.0}, {"step", 0}, {"loss", 1.0}});
  rec.close();
  rec.close();  // idempotent
  auto store = RunStore::open(o.dbPath);
  EXPECT_EQ(store.getRun(rec.runId())->status, "failed");
  EXPECT_EQ(store.getRun(rec.runId())->steps, 1);
}

TEST(RunRecorder, CorruptDatabaseKeepsRecordingToFileAndImportRestores) {
  TempDir tmp;
  std::ofstream(tmp / "bad.db") << std::string(4096, '\x7f');
  RunRecorder::Options o;
  o.dbPath = tmp / "bad.db";
  o.runDir = tmp / "r";
  o.name = "rescued";
  RunRecorder rec(o);
  EXPECT_EQ(rec.runId(), 0);
  for (int s = 0; s < 50; ++s)
    rec.record(
        {{"type", "step"}, {"seq", s}, {"time", 1.0 + s}, {"step", s}, {"loss", 1.0 / (s + 1)}});
  rec.record({{"type", "finished"}, {"seq", 50}, {"time", 60.0}, {"status", "completed"}});
  rec.close();
  auto w = rec.takeWarnings();
  EXPECT_TRUE(anyContains(w, "bad.db", "corrupted")) << (w.empty() ? "" : w[0]);
  EXPECT_TRUE(anyContains(w, "events.ndjson", "runs import"));
  EXPECT_EQ(countType(readNdjson(tmp / "r/events.ndjson"), "step"), 50);

  auto good = RunStore::open(tmp / "good.db");
  auto imp = good.importEvents(tmp / "r");
  auto run = good.getRun(imp.runId);
  EXPECT_EQ(run->name, "rescued");  // from recorder.json
  EXPECT_EQ(run->steps, 50);
  EXPECT_EQ(run->status, "completed");
  EXPECT_DOUBLE_EQ(*run->lastLoss, 1.0 / 50);
}

// Disk full is simulated with SQLite's max_page_count (no tmpfs here): the file stops growing
// exactly like a full disk and SQLite reports SQLITE_FULL.
TEST(RunRecorder, FullDatabaseKeepsRecordingToFile) {
  TempDir tmp;
  { auto s = RunStore::open(tmp / "runs.db"); }  // schema exists: ~20 pages
  RunRecorder::Options o;
  o.dbPath = tmp / "runs.db";
  o.runDir = tmp / "r";
  o.maxDatabasePages = 40;
  RunRecorder rec(o);
  ASSERT_GT(rec.runId(), 0);
  const int n = 8000;
  for (int s = 0; s < n; ++s)
    rec.record({{"type", "step"}, {"seq", s}, {"time", 1.0 + s}, {"step", s}, {"loss", 1.0}});
  rec.record({{"type", "finished"}, {"seq", n}, {"time", 1.0 + n}, {"status", "completed"}});
  rec.close();
  auto w = rec.takeWarnings();
  EXPECT_TRUE(anyContains(w, "runs.db", "full")) << (w.empty() ? "" : w[0]);
  EXPECT_EQ(countType(readNdjson(tmp / "r/events.ndjson"), "step"), n);
  auto other = RunStore::open(tmp / "other.db");
  auto imp = other.importEvents(tmp / "r");
  EXPECT_EQ(other.getRun(imp.runId)->steps, n);
}

TEST(RunRecorder, DefaultDatabasePathFollowsEnvironment) {
  TempDir tmp;
  const char* saved[3] = {std::getenv("TRAINSCOPE_DB"), std::getenv("XDG_DATA_HOME"),
                          std::getenv("HOME")};
  std::string keep[3];
  for (int i = 0; i < 3; ++i) keep[i] = saved[i] ? saved[i] : "";
  setenv("TRAINSCOPE_DB", (tmp / "explicit/x.db").c_str(), 1);
  EXPECT_EQ(defaultDatabasePath(), tmp / "explicit/x.db");
  EXPECT_TRUE(fs::is_directory(tmp / "explicit"));
  unsetenv("TRAINSCOPE_DB");
  setenv("XDG_DATA_HOME", (tmp / "xdg").c_str(), 1);
  EXPECT_EQ(defaultDatabasePath(), tmp / "xdg/trainscope/runs.db");
  setenv("XDG_DATA_HOME", "relative/ignored", 1);
  setenv("HOME", (tmp / "home").c_str(), 1);
  EXPECT_EQ(defaultDatabasePath(), tmp / "home/.local/share/trainscope/runs.db");
  EXPECT_TRUE(fs::is_directory(tmp / "home/.local/share/trainscope"));
  const char* names[3] = {"TRAINSCOPE_DB", "XDG_DATA_HOME", "HOME"};
  for (int i = 0; i < 3; ++i)
    if (saved[i])
      setenv(names[i], keep[i].c_str(), 1);
    else
      unsetenv(names[i]);
}
