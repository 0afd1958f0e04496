// RunStore queries, edits, downsampling, migration and refusal of unusable files.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <limits>
#include <thread>

#include "StoreTestUtil.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts::core;
using namespace ts::test;
using nlohmann::json;

namespace {

json ev(const std::string& type, int64_t seq, json fields = json::object()) {
  fields["type"] = type;
  fields["seq"] = seq;
  fields["time"] = 1700000000.0 + static_cast<double>(seq);
  return fields;
}

void writeEvents(const fs::path& dir, const std::vector<json>& events) {
  fs::create_directories(dir);
  std::ofstream out(dir / "events.ndjson");
  for (auto& e : events) out << e.dump() << "\n";
}

// A run directory whose losses are given; returns the imported run id.
int64_t importLosses(RunStore& store, const fs::path& dir, const std::vector<double>& loss,
                     json config = json::object(), bool finished = true) {
  std::vector<json> events;
  int64_t seq = 0;
  events.push_back(ev("hello", seq++, {{"backend", "cpu"}, {"ranks", 1}}));
  events.push_back(ev("config", seq++, {{"config", config}}));
  for (size_t s = 0; s < loss.size(); ++s)
    events.push_back(
        ev("step", seq++,
           {{"step", s}, {"loss", loss[s]}, {"lr", 0.001}, {"tokens_per_s", 1000.0 + s}}));
  if (finished) events.push_back(ev("finished", seq++, {{"status", "completed"}, {"reason", ""}}));
  writeEvents(dir, events);
  return store.importEvents(dir.string()).runId;
}

// Naive fp64 reference over [a, b] of the raw series.
struct Ref {
  double min = std::numeric_limits<double>::infinity(), max = -min, sum = 0;
  int64_t n = 0;
};
Ref naive(const std::vector<double>& v, int64_t a, int64_t b) {
  Ref r;
  for (int64_t i = a; i <= b; ++i) {
    r.min = std::min(r.min, v[i]);
    r.max = std::max(r.max, v[i]);
    r.sum += v[i];
    ++r.n;
  }
  return r;
}

void checkAgainstNaive(const MetricSeries& s, const std::vector<double>& v, int64_t lo, int64_t hi,
                       int maxPoints) {
  ASSERT_FALSE(s.points.empty());
  EXPECT_LE(static_cast<int>(s.points.size()), maxPoints);
  EXPECT_EQ(s.totalSteps, hi - lo + 1);
  EXPECT_EQ(s.points.front().firstStep, lo);
  EXPECT_EQ(s.points.back().lastStep, hi);
  int64_t covered = 0;
  for (size_t i = 0; i < s.points.size(); ++i) {
    auto& p = s.points[i];
    if (i > 0) EXPECT_EQ(p.firstStep, s.points[i - 1].lastStep + 1);  // contiguous, no overlap
    Ref r = naive(v, p.firstStep, p.lastStep);
    EXPECT_EQ(p.count, r.n);
    EXPECT_DOUBLE_EQ(p.min, r.min);
    EXPECT_DOUBLE_EQ(p.max, r.max);
    EXPECT_NEAR(p.mean, r.sum / r.n, 1e-12 * std::abs(r.sum / r.n) + 1e-12);
    covered += p.count;
  }
  EXPECT_EQ(covered, hi - lo + 1);
}

}  // namespace

TEST(RunStore, CreatesFileWithWalForeignKeysAndCurrentSchema) {
  TempDir tmp;
  std::string path = tmp / "sub/dir/runs.db";  // directories are created
  auto store = RunStore::open(path);
  EXPECT_EQ(store.schemaVersion(), kRunStoreSchemaVersion);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, nullptr);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "wal");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

// Engines started together all open a database that does not exist yet: exactly one creates
// the schema and every opener succeeds (one once failed with "table runs already exists" and
// its engine trained without recording), and readers opening it meanwhile wait for the schema.
TEST(RunStore, ManyOpenersOfANewFileAllGetTheSchema) {
  TempDir tmp;
  constexpr int kFiles = 20, kOpeners = 8, kReaders = 4;
  for (int f = 0; f < kFiles; ++f) {
    const std::string path = tmp / ("runs" + std::to_string(f) + ".db");
    std::atomic<int> ready{0};
    std::vector<std::string> errors(kOpeners);
    std::vector<std::thread> threads;
    // Readers too (a GUI reloading its Runs page): once the file exists they must see the
    // schema, never "version 0, open it read-write to migrate it".
    std::vector<std::string> readerErrors(kReaders);
    for (int t = 0; t < kReaders; ++t)
      threads.emplace_back([&, t] {
        while (!std::filesystem::exists(path)) std::this_thread::yield();
        try {
          auto store = RunStore::open(path, RunStore::Mode::ReadOnly);
          if (!store.listRuns().empty()) readerErrors[t] = "runs in a new file";
        } catch (const std::exception& e) {
          readerErrors[t] = e.what();
        }
      });
    for (int t = 0; t < kOpeners; ++t)
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kOpeners) std::this_thread::yield();  // all open at once
        try {
          auto store = RunStore::open(path);
          if (store.schemaVersion() != kRunStoreSchemaVersion) errors[t] = "old schema";
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kOpeners; ++t) EXPECT_EQ(errors[t], "") << path << " opener " << t;
    for (int t = 0; t < kReaders; ++t) EXPECT_EQ(readerErrors[t], "") << path << " reader " << t;
    auto store = RunStore::open(path, RunStore::Mode::ReadOnly);
    EXPECT_EQ(store.schemaVersion(), kRunStoreSchemaVersion);
    EXPECT_TRUE(store.listRuns().empty());
  }
}

// An empty file read-only: not "open it read-write to migrate it" (a reader cannot know that
// nobody is creating it), but what it is, after waiting the busy timeout for a creator.
TEST(RunStore, ReadOnlyEmptyFileSaysItHoldsNoRunStoreYet) {
  TempDir tmp;
  const std::string path = tmp / "empty.db";
  std::ofstream(path).flush();
  RunStore::Options o;
  o.busyTimeoutMs = 100;
  try {
    RunStore::open(path, RunStore::Mode::ReadOnly, o);
    FAIL() << "opened an empty file";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::Locked);
    EXPECT_NE(std::string(e.what()).find(path + " holds no run store yet"), std::string::npos)
        << e.what();
  }
}

TEST(RunStore, SqlInjectionNameRoundTrips) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  const std::string evil = "x'); DROP TABLE runs;--";
  int64_t id = importLosses(store, tmp.path() / "r1", {1.0, 0.5});
  ASSERT_TRUE(store.rename(id, evil));
  ASSERT_TRUE(store.setTags(id, {evil, "ok"}));
  ASSERT_TRUE(store.setNotes(id, evil + "\n\"quoted\""));
  RunFilter f;
  f.nameContains = evil;
  f.tag = evil;
  auto runs = store.listRuns(f);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, evil);
  EXPECT_EQ(runs[0].tags, (std::vector<std::string>{evil, "ok"}));
  EXPECT_EQ(runs[0].notes, evil + "\n\"quoted\"");
  f.configPath = "a";
  f.configValue = evil;
  EXPECT_TRUE(store.listRuns(f).empty());
  EXPECT_EQ(store.countRuns(), 1);  // the table is still there
}

TEST(RunStore, DownsamplingKeepsSpikeAndMatchesNaiveReference) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  const int64_t n = 40000;
  std::vector<double> loss(n);
  for (int64_t s = 0; s < n; ++s) loss[s] = 1.0 + 0.1 * std::cos(0.001 * s);
  const int64_t spike = 24321;
  loss[spike] = 100.0;
  loss[33333] = -5.0;  // a dip too
  int64_t id = importLosses(store, tmp.path() / "big", loss);

  auto s = store.metrics(id, MetricColumn::Loss, 2000);
  EXPECT_TRUE(s.downsampled);
  EXPECT_GE(s.points.size(), 1000u);  // 20-step buckets from the 16-step rollup
  checkAgainstNaive(s, loss, 0, n - 1, 2000);
  auto hit = std::find_if(s.points.begin(), s.points.end(),
                          [&](auto& p) { return p.firstStep <= spike && spike <= p.lastStep; });
  ASSERT_NE(hit, s.points.end());
  EXPECT_EQ(hit->max, 100.0);
  double lowest = 1e9;
  for (auto& p : s.points) lowest = std::min(lowest, p.min);
  EXPECT_EQ(lowest, -5.0);

  // Unaligned ranges: ragged edges read raw rows, interiors come from the rollup.
  for (auto [lo, hi, pts] : {std::tuple{1234, 38765, 500},
                             {17, 39990, 30},
                             {20000, 20100, 7},
                             {100, 260, 2000},
                             {5, 39999, 1}}) {
    auto r = store.metrics(id, MetricColumn::Loss, pts, lo, hi);
    checkAgainstNaive(r, loss, lo, hi, pts);
  }
  // Small request: raw points, exact values.
  auto raw = store.metrics(id, MetricColumn::Loss, 2000, 24320, 24322);
  ASSERT_EQ(raw.points.size(), 3u);
  EXPECT_FALSE(raw.downsampled);
  EXPECT_EQ(raw.points[1].min, 100.0);
  // Another column of the same run.
  auto tps = store.metrics(id, MetricColumn::TokensPerS, 100);
  std::vector<double> tpsRef(n);
  for (int64_t i = 0; i < n; ++i) tpsRef[i] = 1000.0 + i;
  checkAgainstNaive(tps, tpsRef, 0, n - 1, 100);
  EXPECT_TRUE(store.metrics(id + 99, MetricColumn::Loss).points.empty());
}

TEST(RunStore, FilterSortCompareAndEdit) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  int64_t a = importLosses(
      store, tmp.path() / "alpha", {3, 2, 1.5},
      {{"name", "alpha"}, {"optimizer", {{"lr", 0.001}, {"name", "adamw"}}}, {"amp", true}});
  int64_t b = importLosses(
      store, tmp.path() / "beta", {3, 2.5},
      {{"name", "beta"}, {"optimizer", {{"lr", 0.01}, {"name", "adamw"}}}, {"amp", false}});
  int64_t c = importLosses(store, tmp.path() / "gamma", {4, 0.5}, {{"name", "Gamma run"}},
                           /*finished=*/false);
  store.setTags(a, {"baseline"});
  store.setTags(c, {"baseline", "exp"});

  auto names = [](const std::vector<RunSummary>& v) {
    std::vector<std::string> out;
    for (auto& r : v) out.push_back(r.name);
    return out;
  };
  RunFilter f;
  f.sort = RunSortKey::LastLoss;
  f.descending = false;
  EXPECT_EQ(names(store.listRuns(f)), (std::vector<std::string>{"Gamma run", "alpha", "beta"}));
  f.limit = 1;
  f.offset = 1;
  EXPECT_EQ(names(store.listRuns(f)), (std::vector<std::string>{"alpha"}));
  EXPECT_EQ(store.countRuns(f), 3);

  RunFilter byTag;
  byTag.tag = "baseline";
  byTag.sort = RunSortKey::Name;
  byTag.descending = false;
  EXPECT_EQ(names(store.listRuns(byTag)), (std::vector<std::string>{"alpha", "Gamma run"}));
  RunFilter byName;
  byName.nameContains = "GAMMA";
  EXPECT_EQ(store.listRuns(byName).size(), 1u);
  RunFilter byStatus;
  byStatus.statuses = {"crashed"};  // imported without a finished event
  EXPECT_EQ(names(store.listRuns(byStatus)), (std::vector<std::string>{"Gamma run"}));
  byStatus.statuses = {"completed"};
  EXPECT_EQ(store.listRuns(byStatus).size(), 2u);
  RunFilter byLr;
  byLr.configPath = "optimizer.lr";
  byLr.configValue = "1e-2";
  EXPECT_EQ(names(store.listRuns(byLr)), (std::vector<std::string>{"beta"}));
  byLr.configPath = "amp";
  byLr.configValue = "true";
  EXPECT_EQ(names(store.listRuns(byLr)), (std::vector<std::string>{"alpha"}));
  byLr.configPath = "$.optimizer.name";
  byLr.configValue = "adamw";
  EXPECT_EQ(store.listRuns(byLr).size(), 2u);
  byLr.configPath = "optimizer..[";
  EXPECT_THROW(store.listRuns(byLr), StoreError);
  RunFilter byDate;
  byDate.createdFrom = 0;
  byDate.createdTo = 1;
  EXPECT_TRUE(store.listRuns(byDate).empty());

  auto run = store.getRun(a);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->steps, 3);
  EXPECT_EQ(run->lastStep, 2);
  EXPECT_DOUBLE_EQ(*run->lastLoss, 1.5);
  EXPECT_DOUBLE_EQ(*run->tokensPerS, 1002.0);
  EXPECT_EQ(run->status, "completed");
  EXPECT_EQ(run->backend, "cpu");
  EXPECT_EQ(run->config["optimizer"]["lr"], 0.001);

  auto cmp = store.compare({a, b});
  ASSERT_EQ(cmp.runs.size(), 2u);
  std::vector<std::string> paths;
  for (auto& d : cmp.configDifferences) paths.push_back(d.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"amp", "name", "optimizer.lr"}));
  EXPECT_THROW(store.compare({a, 424242}), StoreError);

  EXPECT_FALSE(store.rename(424242, "nobody"));

  // The bulk read gives, newest first, exactly what getRun gives run by run.
  auto all = store.allRunDetails();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].id, c);
  EXPECT_EQ(all[2].id, a);
  for (const auto& d : all) {
    auto one = store.getRun(d.id);
    ASSERT_TRUE(one);
    EXPECT_EQ(d.name, one->name);
    EXPECT_EQ(d.status, one->status);
    EXPECT_EQ(d.steps, one->steps);
    EXPECT_EQ(d.tags, one->tags);
    EXPECT_EQ(d.config, one->config);
  }
  EXPECT_EQ(all[1].config["optimizer"]["lr"], 0.01);
}

TEST(RunStore, ImportTwiceReplacesAndDeleteRemovesRowsAndFiles) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  fs::path dir = tmp.path() / "run";
  int64_t id = importLosses(store, dir, {1, 2, 3});
  fs::create_directories(dir / "ckpt");
  std::ofstream(dir / "ckpt" / "step2.bin") << "x";
  std::ofstream(dir / "trace.json") << "{}";
  std::ofstream(tmp.path() / "outside.txt") << "keep me";
  {  // add a checkpoint event and re-import: same run, not a duplicate
    auto events = readNdjson((dir / "events.ndjson").string());
    events.insert(events.end() - 1,
                  ev("checkpoint", 100,
                     {{"path", (dir / "ckpt").string()}, {"step", 2}, {"checksum", "abc"}}));
    writeEvents(dir, events);
  }
  auto again = store.importEvents(dir.string());
  EXPECT_TRUE(again.replaced);
  EXPECT_EQ(again.runId, id);
  EXPECT_EQ(store.countRuns(), 1);
  EXPECT_EQ(store.getRun(id)->steps, 3);
  ASSERT_EQ(store.checkpoints(id).size(), 1u);
  EXPECT_EQ(store.checkpoints(id)[0].checksum, "abc");
  store.addArtifact(id, "trace", (dir / "trace.json").string());
  store.addArtifact(id, "other", (tmp.path() / "outside.txt").string());
  EXPECT_EQ(store.artifacts(id).size(), 2u);

  ASSERT_TRUE(store.deleteRun(id));
  EXPECT_EQ(store.countRuns(), 0);
  EXPECT_FALSE(store.getRun(id));
  EXPECT_TRUE(store.steps(id).empty());
  EXPECT_FALSE(fs::exists(dir));                        // its files went, the empty directory too
  EXPECT_TRUE(fs::exists(tmp.path() / "outside.txt"));  // never outside the run directory
  EXPECT_FALSE(store.deleteRun(id));
  // Rows of every table went with it (cascade).
  sqlite3* db = nullptr;
  sqlite3_open((tmp / "runs.db").c_str(), &db);
  for (const char* t : {"metrics", "metric_rollup", "events", "checkpoints", "artifacts"}) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, (std::string("SELECT count(*) FROM ") + t).c_str(), -1, &st, nullptr);
    sqlite3_step(st);
    EXPECT_EQ(sqlite3_column_int64(st, 0), 0) << t;
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
}

TEST(RunStore, ImportCountsBadLinesAndRejectsMissingFile) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  fs::create_directories(tmp.path() / "r");
  std::ofstream(tmp.path() / "r" / "events.ndjson")
      << "{\"type\":\"step\",\"seq\":0,\"time\":1,\"step\":0,\"loss\":2}\n"
      << "not json\n[1,2]\n{\"type\":\"step\",\"seq\":1,\"time\":2,\"step\":1,\"loss\":1}";
  auto r = store.importEvents(tmp / "r/events.ndjson");
  EXPECT_EQ(r.events, 2);
  EXPECT_EQ(r.badLines, 2);
  EXPECT_EQ(store.getRun(r.runId)->steps, 2);
  EXPECT_EQ(store.getRun(r.runId)->name, "r");
  try {
    store.importEvents(tmp / "nope");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }
}

TEST(RunStore, ReadOnlyStoreReadsButRefusesEdits) {
  TempDir tmp;
  int64_t id;
  {
    auto store = RunStore::open(tmp / "runs.db");
    id = importLosses(store, tmp.path() / "r", {1.0});
  }
  auto ro = RunStore::open(tmp / "runs.db", RunStore::Mode::ReadOnly);
  EXPECT_EQ(ro.listRuns().size(), 1u);
  try {
    ro.rename(id, "x");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::ReadOnly);
  }
  try {
    RunStore::open(tmp / "missing.db", RunStore::Mode::ReadOnly);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::NotFound);
    EXPECT_NE(std::string(e.what()).find("missing.db"), std::string::npos);
  }
}

TEST(RunStore, RefusesCorruptForeignAndNewerFiles) {
  TempDir tmp;
  std::ofstream(tmp / "garbage.db") << std::string(8192, 'z');
  try {
    RunStore::open(tmp / "garbage.db");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::Corrupt) << e.what();
    EXPECT_NE(std::string(e.what()).find("garbage.db"), std::string::npos);
  }
  auto make = [&](const std::string& name, const char* sql) {
    sqlite3* db = nullptr;
    sqlite3_open((tmp / name).c_str(), &db);
    sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    sqlite3_close(db);
  };
  make("foreign.db", "CREATE TABLE t(x)");
  make("newer.db", "PRAGMA user_version=99");
  try {
    RunStore::open(tmp / "foreign.db");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::Corrupt);
  }
  try {
    RunStore::open(tmp / "newer.db");
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::TooNew);
    EXPECT_NE(std::string(e.what()).find("99"), std::string::npos);
  }
}

// The v1 schema as it shipped, written independently of the store's own migration code.
static const char* kV1 = R"sql(
CREATE TABLE runs(id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL
  DEFAULT '[]', notes TEXT NOT NULL DEFAULT '', created REAL NOT NULL, started REAL, finished REAL,
  status TEXT NOT NULL DEFAULT 'running', backend TEXT NOT NULL DEFAULT '', ranks INTEGER NOT NULL
  DEFAULT 1, config TEXT, parent_run INTEGER REFERENCES runs(id) ON DELETE SET NULL, teacher_run
  INTEGER REFERENCES runs(id) ON DELETE SET NULL, pid INTEGER, heartbeat REAL, run_dir TEXT);
CREATE INDEX runs_created ON runs(created);
CREATE INDEX runs_status ON runs(status);
CREATE TABLE metrics(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER
  NOT NULL, time REAL, loss REAL, lr REAL, grad_norm REAL, loss_scale REAL, tokens INTEGER,
  tokens_per_s REAL, step_ms REAL, skipped INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(run_id, step))
  WITHOUT ROWID;
CREATE TABLE evals(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE
  CASCADE, step INTEGER, time REAL, loss REAL, body TEXT);
CREATE INDEX evals_run ON evals(run_id, step);
CREATE TABLE memory_samples(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON
  DELETE CASCADE, seq INTEGER, time REAL, step INTEGER, planned INTEGER NOT NULL DEFAULT 0, rank
  INTEGER NOT NULL, tier TEXT NOT NULL, category TEXT NOT NULL, current INTEGER NOT NULL DEFAULT 0,
  peak INTEGER NOT NULL DEFAULT 0);
CREATE INDEX memory_run ON memory_samples(run_id, seq);
CREATE TABLE kernel_summaries(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id)
  ON DELETE CASCADE, seq INTEGER, time REAL, window INTEGER, body TEXT);
CREATE INDEX kernel_summaries_run ON kernel_summaries(run_id, seq);
CREATE TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE
  CASCADE, seq INTEGER, time REAL, type TEXT NOT NULL, body TEXT);
CREATE INDEX events_run ON events(run_id, seq);
CREATE TABLE checkpoints(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON
  DELETE CASCADE, step INTEGER, time REAL, path TEXT NOT NULL, checksum TEXT);
CREATE INDEX checkpoints_run ON checkpoints(run_id, step);
CREATE TABLE artifacts(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON
  DELETE CASCADE, kind TEXT NOT NULL, path TEXT NOT NULL, time REAL);
CREATE INDEX artifacts_run ON artifacts(run_id);
PRAGMA user_version=1;
)sql";

TEST(RunStore, MigratesAVersion1File) {
  TempDir tmp;
  std::string path = tmp / "v1.db";
  const int64_t n = 5000;
  std::vector<double> loss(n);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, kV1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_exec(db,
                 "BEGIN; INSERT INTO runs(id, name, created, status, backend, config) VALUES "
                 "(7, 'old run', 1600000000, 'completed', 'cpu', '{\"lr\":0.5}');"
                 "INSERT INTO evals(run_id, step, loss) VALUES (7, 10, 2.5), (7, 20, 1.25);"
                 "INSERT INTO memory_samples(run_id, seq, planned, rank, tier, category, peak) "
                 "VALUES (7, 1, 0, 0, 'device', 'parameters', 100), (7, 1, 0, 0, 'device', "
                 "'gradients', 50), (7, 1, 0, 1, 'device', 'parameters', 120), (7, 2, 1, 0, "
                 "'device', 'parameters', 9999), (7, 1, 0, 0, 'host', 'optimizer_state', 500);",
                 nullptr, nullptr, nullptr);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db, "INSERT INTO metrics(run_id, step, loss, tokens_per_s) VALUES(7,?,?,?)",
                       -1, &st, nullptr);
    for (int64_t s = 0; s < n; ++s) {
      loss[s] = s == 4321 ? 50.0 : 1.0 / (1.0 + s);
      sqlite3_bind_int64(st, 1, s);
      sqlite3_bind_double(st, 2, loss[s]);
      sqlite3_bind_double(st, 3, 10.0 * s);
      sqlite3_step(st);
      sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  // Read-only openers are told to migrate first.
  try {
    RunStore::open(path, RunStore::Mode::ReadOnly);
    FAIL();
  } catch (const StoreError& e) {
    EXPECT_EQ(e.kind(), StoreError::Kind::NeedsMigration);
  }
  auto store = RunStore::open(path);
  EXPECT_EQ(store.schemaVersion(), kRunStoreSchemaVersion);
  auto run = store.getRun(7);
  ASSERT_TRUE(run);
  EXPECT_EQ(run->name, "old run");
  EXPECT_EQ(run->steps, n);
  EXPECT_EQ(run->lastStep, n - 1);
  EXPECT_DOUBLE_EQ(*run->lastLoss, 1.0 / n);
  EXPECT_DOUBLE_EQ(*run->tokensPerS, 10.0 * (n - 1));
  EXPECT_DOUBLE_EQ(*run->bestEvalLoss, 1.25);
  EXPECT_EQ(run->peakMemory, 150);  // max over ranks of summed measured device peaks
  EXPECT_EQ(run->config["lr"], 0.5);
  auto s = store.metrics(7, MetricColumn::Loss, 100);  // served from the backfilled rollup
  checkAgainstNaive(s, loss, 0, n - 1, 100);
  // The migrated file takes new runs and opens again without migrating.
  importLosses(store, tmp.path() / "new", {1, 2});
  auto again = RunStore::open(path, RunStore::Mode::ReadOnly);
  EXPECT_EQ(again.countRuns(), 2);
}

// The protocol's eval field is `val_loss` (docs/protocol.md).
TEST(RunStore, EvalValLossIsTheRunsBestEvalLoss) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  writeEvents(tmp.path() / "r",
              {ev("hello", 0, {{"backend", "cpu"}, {"ranks", 1}}),
               ev("step", 1, {{"step", 1}, {"loss", 3.0}}),
               ev("eval", 2, {{"step", 1}, {"val_loss", 2.0}, {"val_tokens", 64}}),
               ev("eval", 3, {{"step", 2}, {"val_loss", 1.5}}),
               ev("eval", 4, {{"step", 3}, {"val_loss", 1.75}}),
               ev("finished", 5, {{"status", "completed"}, {"reason", ""}})});
  const int64_t id = store.importEvents((tmp.path() / "r").string()).runId;
  auto run = store.getRun(id);
  ASSERT_TRUE(run && run->bestEvalLoss) << "best eval loss not recorded";
  EXPECT_DOUBLE_EQ(*run->bestEvalLoss, 1.5);
}

// Version-2 stores recorded an engine's evals without their loss (the engine sends `val_loss`);
// opening one recovers the losses from the kept event bodies.
TEST(RunStore, MigratesVersion2EvalsWithoutLoss) {
  TempDir tmp;
  std::string path = tmp / "v2.db";
  int64_t id;
  {
    auto store = RunStore::open(path);
    id = importLosses(store, tmp.path() / "r", {3, 2, 1});
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string sql =
        "DELETE FROM evals; UPDATE runs SET best_eval_loss = NULL;"
        "INSERT INTO evals(run_id, step, loss, body) VALUES (" +
        std::to_string(id) + ", 10, NULL, '{\"type\":\"eval\",\"step\":10,\"val_loss\":2.5}'), (" +
        std::to_string(id) + ", 20, NULL, '{\"type\":\"eval\",\"step\":20,\"val_loss\":0.75}'), (" +
        std::to_string(id) + ", 30, NULL, 'not json'); PRAGMA user_version=2;";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = RunStore::open(path);
  EXPECT_EQ(store.schemaVersion(), kRunStoreSchemaVersion);
  auto run = store.getRun(id);
  ASSERT_TRUE(run && run->bestEvalLoss);
  EXPECT_DOUBLE_EQ(*run->bestEvalLoss, 0.75);
  auto evals = store.evals(id);
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_DOUBLE_EQ(evals[0].loss.value_or(-1), 2.5);
  EXPECT_FALSE(evals[2].loss);
}

TEST(RunStore, DeadRunningRunIsCrashed) {
  TempDir tmp;
  std::string path = tmp / "runs.db";
  int64_t id;
  {
    auto store = RunStore::open(path);
    id = importLosses(store, tmp.path() / "r", {1, 2}, json::object(), false);
  }
  // A finished child process: its pid is certainly dead.
  Child dead({"/bin/true"});
  pid_t pid = dead.pid();
  dead.wait();
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(db, "UPDATE runs SET status='running', pid=?, heartbeat=?, host=NULL", -1, &st,
                     nullptr);
  sqlite3_bind_int64(st, 1, pid);
  sqlite3_bind_double(st, 2, 1000.0);  // long ago
  sqlite3_step(st);
  sqlite3_finalize(st);
  sqlite3_close(db);
  {
    // Other host (host NULL): only an old heartbeat counts, and it is old.
    auto ro = RunStore::open(path, RunStore::Mode::ReadOnly);
    EXPECT_EQ(ro.getRun(id)->status, "crashed");
  }
  // Same host, alive pid (ours), old heartbeat: still running.
  sqlite3_open(path.c_str(), &db);
  sqlite3_prepare_v2(db, "UPDATE runs SET pid=?, host=?", -1, &st, nullptr);
  sqlite3_bind_int64(st, 1, getpid());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  sqlite3_bind_text(st, 2, host, -1, SQLITE_TRANSIENT);
  sqlite3_step(st);
  sqlite3_finalize(st);
  sqlite3_close(db);
  {
    auto ro = RunStore::open(path, RunStore::Mode::ReadOnly);
    EXPECT_EQ(ro.getRun(id)->status, "running");
    RunFilter f;
    f.statuses = {"running"};
    EXPECT_EQ(ro.listRuns(f).size(), 1u);
  }
  // Same host, dead pid: crashed, and a read-write open writes it back.
  sqlite3_open(path.c_str(), &db);
  sqlite3_prepare_v2(db, "UPDATE runs SET pid=?", -1, &st, nullptr);
  sqlite3_bind_int64(st, 1, pid);
  sqlite3_step(st);
  sqlite3_finalize(st);
  sqlite3_close(db);
  {
    auto rw = RunStore::open(path);
    RunFilter f;
    f.statuses = {"crashed"};
    EXPECT_EQ(rw.listRuns(f).size(), 1u);
  }
  sqlite3_open(path.c_str(), &db);
  sqlite3_prepare_v2(db, "SELECT status FROM runs", -1, &st, nullptr);
  sqlite3_step(st);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)), "crashed");
  sqlite3_finalize(st);
  sqlite3_close(db);
}

TEST(RunStore, RepeatedStepsReplaceValuesInRollups) {
  TempDir tmp;
  auto store = RunStore::open(tmp / "runs.db");
  std::vector<json> events;
  std::vector<double> loss(2000);
  int64_t seq = 0;
  for (int64_t s = 0; s < 2000; ++s) {
    loss[s] = 1.0 + s % 7;
    events.push_back(ev("step", seq++, {{"step", s}, {"loss", loss[s]}}));
  }
  for (int64_t s = 500; s < 520; ++s) {  // a resume re-sends some steps with new values
    loss[s] = 50.0 + s;
    events.push_back(ev("step", seq++, {{"step", s}, {"loss", loss[s]}}));
  }
  writeEvents(tmp.path() / "r", events);
  int64_t id = store.importEvents((tmp.path() / "r").string()).runId;
  checkAgainstNaive(store.metrics(id, MetricColumn::Loss, 40), loss, 0, 1999, 40);
  checkAgainstNaive(store.metrics(id, MetricColumn::Loss, 3), loss, 0, 1999, 3);
}
