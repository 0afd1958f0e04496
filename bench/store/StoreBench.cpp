// store_bench [--runs N] [--steps N] [--dir DIR]
// Builds a database with N runs (default 10,000) plus one run of --steps steps (default
// 1,000,000) recorded through RunRecorder, then reports median timings of:
//   list all runs, list one page (100), filtered list, downsampled fetch (2,000 points),
//   record() cost per event, and the recording overhead of a 1 ms compute step.
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "RunStoreDb.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/core/store/RunStore.h"

namespace fs = std::filesystem;
using namespace ts::core;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

static double ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

static double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Median wall time; *cpu gets the median CPU time of this thread (robust to a loaded machine).
static double median(std::function<void()> fn, double* cpu, int reps = 7) {
  std::vector<double> t, c;
  for (int i = 0; i < reps; ++i) {
    auto a = Clock::now();
    double c0 = threadCpuMs();
    fn();
    c.push_back(threadCpuMs() - c0);
    t.push_back(ms(Clock::now() - a));
  }
  std::sort(t.begin(), t.end());
  std::sort(c.begin(), c.end());
  *cpu = c[c.size() / 2];
  return t[t.size() / 2];
}

static json stepEvent(int64_t seq, int64_t s) {
  return {{"type", "step"},
          {"seq", seq},
          {"time", 1.7e9 + s * 1e-3},
          {"step", s},
          {"loss", 3.0 / (1 + s * 1e-5) + ((s * 7919) % 1000) * 1e-4},
          {"lr", 1e-3},
          {"grad_norm", 0.8},
          {"tokens", (s + 1) * 4096},
          {"tokens_per_s", 4.1e6},
          {"step_ms", 1.0},
          {"loss_scale", 65536.0},
          {"skipped", false}};
}

int main(int argc, char** argv) {
  int64_t nRuns = 10000, nSteps = 1000000;
  std::string dir =
      (fs::temp_directory_path() / ("ts-store-bench-" + std::to_string(getpid()))).string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs"))
      nRuns = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--steps"))
      nSteps = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dir"))
      dir = argv[i + 1];
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string db = dir + "/runs.db";
  { auto s = RunStore::open(db); }

  // 10,000 runs with summaries and configs (direct inserts: this measures reading).
  auto t0 = Clock::now();
  {
    sqlite3* h = nullptr;
    sqlite3_open(db.c_str(), &h);
    sqlite3_exec(h, "BEGIN", nullptr, nullptr, nullptr);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(h,
                       "INSERT INTO runs(name, tags, created, status, backend, ranks, config, "
                       "steps, last_step, last_loss, best_eval_loss, tokens_per_s, peak_memory, "
                       "run_dir) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       -1, &st, nullptr);
    const char* statuses[] = {"completed", "failed", "stopped", "completed"};
    for (int64_t i = 0; i < nRuns; ++i) {
      std::string name = "run-" + std::to_string(i) + (i % 10 == 0 ? "-sweep" : "");
      std::string tags = i % 3 == 0 ? "[\"baseline\"]" : "[\"exp\",\"lr-sweep\"]";
      std::string cfg = json{{"optimizer", {{"lr", 1e-4 * (1 + i % 10)}}}, {"seed", i}}.dump();
      sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_text(st, 2, tags.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_double(st, 3, 1.7e9 + i * 60.0);
      sqlite3_bind_text(st, 4, statuses[i % 4], -1, SQLITE_STATIC);
      sqlite3_bind_text(st, 5, "cpu", -1, SQLITE_STATIC);
      sqlite3_bind_int(st, 6, 1);
      sqlite3_bind_text(st, 7, cfg.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_bind_int64(st, 8, 1000);
      sqlite3_bind_int64(st, 9, 999);
      sqlite3_bind_double(st, 10, 2.0 + (i % 97) * 0.01);
      sqlite3_bind_double(st, 11, 2.1 + (i % 89) * 0.01);
      sqlite3_bind_double(st, 12, 1e5 + i);
      sqlite3_bind_int64(st, 13, (1 + i % 50) << 20);
      std::string rd = dir + "/r" + std::to_string(i);
      sqlite3_bind_text(st, 14, rd.c_str(), -1, SQLITE_TRANSIENT);
      sqlite3_step(st);
      sqlite3_reset(st);
    }
    sqlite3_finalize(st);
    sqlite3_exec(h, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(h);
  }
  std::printf("setup: %lld runs inserted in %.0f ms\n", static_cast<long long>(nRuns),
              ms(Clock::now() - t0));

  // One run of nSteps steps through the recorder's ingestion code (one transaction per
  // 1,000 steps, as the recorder's batches would be at 1,000 steps/s... or faster).
  t0 = Clock::now();
  int64_t bigId = 0;
  {
    store::Db h(db, false, false, 5000, 15);
    store::RunMeta meta;
    meta.name = "big";
    meta.created = 1.9e9;
    meta.status = "completed";
    {
      store::Transaction tx(h);
      bigId = store::EventIngestor::createRun(h, meta);
      tx.commit();
    }
    store::EventIngestor ing(h, bigId);
    for (int64_t s = 0; s < nSteps; s += 1000) {
      store::Transaction tx(h);
      for (int64_t k = s; k < std::min(nSteps, s + 1000); ++k) ing.apply(stepEvent(k, k));
      ing.endBatch(1.9e9);
      tx.commit();
    }
  }
  double ingestMs = ms(Clock::now() - t0);
  std::printf("setup: %lld steps ingested in %.0f ms (%.0f steps/s through the writer path)\n",
              static_cast<long long>(nSteps), ingestMs, nSteps / (ingestMs / 1000.0));

  auto store = RunStore::open(db, RunStore::Mode::ReadOnly);
  size_t got = 0;
  double cpu = 0;
  auto report = [&](const char* what, double wall) {
    std::printf("%-58s %8.2f ms wall, %8.2f ms CPU  (target < 100 ms)\n", what, wall, cpu);
  };
  double listAll = median([&] { got = store.listRuns().size(); }, &cpu);
  report(("list all runs (" + std::to_string(got) + ")").c_str(), listAll);
  RunFilter page;
  page.limit = 100;
  page.sort = RunSortKey::LastLoss;
  double listPage = median([&] { got = store.listRuns(page).size(); }, &cpu);
  report("list one page (100, sorted by loss)", listPage);
  RunFilter filt;
  filt.tag = "baseline";
  filt.nameContains = "sweep";
  filt.configPath = "optimizer.lr";
  filt.configValue = "0.0001";
  filt.statuses = {"completed", "crashed"};
  double listFilt = median([&] { got = store.listRuns(filt).size(); }, &cpu);
  report(("filtered list (tag+name+config+status -> " + std::to_string(got) + ")").c_str(),
         listFilt);
  MetricSeries series;
  double fetch = median([&] { series = store.metrics(bigId, MetricColumn::Loss, 2000); }, &cpu);
  report(("downsampled fetch (" + std::to_string(series.totalSteps) + " steps -> " +
          std::to_string(series.points.size()) + " points)")
             .c_str(),
         fetch);
  double zoom = median(
      [&] {
        series =
            store.metrics(bigId, MetricColumn::Loss, 2000, nSteps / 3 + 17, 2 * nSteps / 3 + 5);
      },
      &cpu);
  report(("downsampled zoom (" + std::to_string(series.totalSteps) + " steps -> " +
          std::to_string(series.points.size()) + " points)")
             .c_str(),
         zoom);

  // Overhead at 1,000 steps/s: each step is paced to 1 ms of wall time (a spinning training
  // thread), then records its step event. CPU clocks keep a loaded machine from skewing it.
  const int n = 3000;
  double recWall = 0, recCpu = 0, mainCpu0 = threadCpuMs(), writerCpu = 0;
  {
    RunRecorder::Options o;
    o.dbPath = db;
    o.runDir = dir + "/overhead";
    auto procCpu = [] {
      timespec ts{};
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
      return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
    };
    double proc0 = procCpu();
    RunRecorder rec(o);
    auto start = Clock::now();
    for (int s = 0; s < n; ++s) {
      while (Clock::now() < start + std::chrono::microseconds(1000 * (s + 1))) {
      }
      json e = stepEvent(s, s);
      auto a = Clock::now();
      double c = threadCpuMs();
      rec.record(e);
      recCpu += threadCpuMs() - c;
      recWall += ms(Clock::now() - a);
    }
    rec.close();
    writerCpu = (procCpu() - proc0) - (threadCpuMs() - mainCpu0);
  }
  std::printf(
      "1,000 steps/s (%d steps of 1 ms): record() on the training thread %.2f us CPU "
      "(%.2f us wall) per step = %.3f%% of the step (target < 1%%); writer thread %.1f "
      "us CPU per step (%.1f%% of one core, off the training thread)\n",
      n, 1000.0 * recCpu / n, 1000.0 * recWall / n, 100.0 * recCpu / n / 1.0,
      1000.0 * writerCpu / n, 100.0 * writerCpu / n / 1.0);
  std::printf("database size: %.1f MiB\n", fs::file_size(db) / 1048576.0);
  fs::remove_all(dir);
  return 0;
}
