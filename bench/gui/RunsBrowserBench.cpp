// gui_runs_bench [--runs N] [--dir DIR]
// The Runs page with N runs (default 10,000) in a real SQLite store, each with a full resolved
// config (techniques varied): time of the list load on the worker (query + configs + badges +
// search text), of the model reset on the GUI thread with the table shown, and of filter
// keystrokes typed into the search field (each measured to the end of the repaint; worst and
// median). Offscreen unless QT_QPA_PLATFORM says otherwise.
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QLineEdit>
#include <QTableView>
#include <QTimer>

#include "RunsPage.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/store/RunStore.h"

namespace fs = std::filesystem;
using namespace ts;

namespace {

nlohmann::json configOf(int64_t i) {
  core::RunConfig c;
  c.name = "run-" + std::to_string(i);
  const char* policies[] = {"fp32", "bf16", "fp16", "fp8"};
  c.precision.policy = policies[i % 4];
  c.parallel.zero_stage = int(i % 4);
  c.parallel.ranks = i % 4 ? 4 : 1;
  if (i % 7 == 0) c.memory.checkpointing = "all";
  if (i % 11 == 0) c.attention.impl = "flash";
  if (i % 13 == 0) c.finetune.lora.r = 8;
  c.optimizer.lr = 1e-4 * double(1 + i % 10);
  c.train.grad_accum = 1 + int(i % 3);
  c.train.seed = uint64_t(i);
  return core::toJson(c);
}

void build(const std::string& db, const std::string& dir, int64_t n) {
  { auto s = core::RunStore::open(db); }
  sqlite3* h = nullptr;
  sqlite3_open(db.c_str(), &h);
  sqlite3_exec(h, "BEGIN", nullptr, nullptr, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(
      h,
      "INSERT INTO runs(name, tags, notes, created, started, finished, status, "
      "backend, ranks, config, steps, last_step, last_loss, best_eval_loss, "
      "tokens_per_s, peak_memory, run_dir) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
      -1, &st, nullptr);
  const char* statuses[] = {"completed", "failed", "stopped", "completed"};
  for (int64_t i = 0; i < n; ++i) {
    const std::string name = "run-" + std::to_string(i) + (i % 10 == 0 ? "-sweep" : "");
    const std::string tags = i % 3 == 0 ? "[\"baseline\"]" : "[\"exp\",\"lr-sweep\"]";
    const std::string notes = i % 5 == 0 ? "loss spikes after warmup" : "";
    const std::string cfg = configOf(i).dump();
    const std::string rd = dir + "/r" + std::to_string(i);
    const double t = 1.7e9 + double(i) * 60.0;
    sqlite3_bind_text(st, 1, name.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, tags.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, notes.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_double(st, 4, t);
    sqlite3_bind_double(st, 5, t + 1);
    sqlite3_bind_double(st, 6, t + 50);
    sqlite3_bind_text(st, 7, statuses[i % 4], -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, "cpu", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 9, i % 4 ? 4 : 1);
    sqlite3_bind_text(st, 10, cfg.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 11, 1000);
    sqlite3_bind_int64(st, 12, 999);
    sqlite3_bind_double(st, 13, 2.0 + double(i % 97) * 0.01);
    sqlite3_bind_double(st, 14, 2.1 + double(i % 89) * 0.01);
    sqlite3_bind_double(st, 15, 1e5 + double(i));
    sqlite3_bind_int64(st, 16, (1 + i % 50) << 20);
    sqlite3_bind_text(st, 17, rd.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_step(st);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  sqlite3_exec(h, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(h);
}

// CPU time of this thread: the other builds sharing the machine inflate wall time, not this.
double cpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) / 1e6;
}

struct Stats {
  double worst = 0, median = 0;
  int n = 0;
};
Stats statsOf(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.worst = v.back();
  s.median = v[v.size() / 2];
  s.n = int(v.size());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  int64_t n = 10000;
  std::string dir =
      (fs::temp_directory_path() / ("ts-runs-bench-" + std::to_string(getpid()))).string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) n = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = dir + "/runs.db";
  QElapsedTimer t;
  t.start();
  build(db, dir, n);
  std::printf("setup: %lld runs with resolved configs inserted in %lld ms\n",
              static_cast<long long>(n), static_cast<long long>(t.elapsed()));

  {
    // The two parts of the worker's load, alone.
    gui::RunRepository repo(db);
    t.restart();
    const auto runs = repo.listRuns();
    const double listMs = double(t.nsecsElapsed()) / 1e6;
    t.restart();
    const auto details = repo.listRunDetails();
    const double detailMs = double(t.nsecsElapsed()) / 1e6;
    t.restart();
    size_t bytes = 0;
    for (const auto& d : details) bytes += gui::makeRunEntry(d, d.config).searchText.size();
    std::printf(
        "worker parts: listRuns %.0f ms (%zu runs); with configs %.0f ms; badges + "
        "search text %.0f ms (%.1f MB of search text)\n",
        listMs, runs.size(), detailMs, double(t.nsecsElapsed()) / 1e6, double(bytes) / 1e6);
  }

  gui::RunsPage page{gui::RunRepository(db)};
  page.setShowDialogs(false);
  page.resize(1400, 800);
  page.show();
  app.processEvents();

  // Model reset on the GUI thread: time inside modelAboutToBeReset .. the repaint after it.
  double resetMs = 0;
  QElapsedTimer rt;
  QObject::connect(page.model(), &QAbstractItemModel::modelAboutToBeReset, [&] { rt.start(); });
  auto resetTimer = QObject::connect(page.model(), &QAbstractItemModel::modelReset, [&] {
    page.view()->viewport()->repaint();
    resetMs = double(rt.nsecsElapsed()) / 1e6;
  });
  // Longest stall of the event loop while the worker loads (a 1 ms timer's worst gap).
  double worstGap = 0;
  QElapsedTimer gap;
  gap.start();
  QTimer tick;
  tick.setInterval(1);
  QObject::connect(&tick, &QTimer::timeout, [&] {
    worstGap = std::max(worstGap, double(gap.nsecsElapsed()) / 1e6);
    gap.restart();
  });
  QEventLoop loop;
  bool loaded = false;
  double shownMs = 0;
  QObject::connect(page.browser(), &gui::RunsBrowser::loaded,
                   [&] { shownMs = double(t.nsecsElapsed()) / 1e6; });
  QObject::connect(page.browser(), &gui::RunsBrowser::detailsLoaded, [&] {
    loaded = true;
    loop.quit();
  });
  QTimer::singleShot(300000, &loop, &QEventLoop::quit);
  t.restart();
  tick.start();
  page.reload();
  loop.exec();
  if (!loaded) {
    std::fprintf(stderr, "load did not finish\n");
    return 1;
  }
  const double loadMs = double(t.nsecsElapsed()) / 1e6;
  tick.stop();
  QObject::disconnect(resetTimer);  // its repaint must not count inside the keystrokes' reset
  std::printf(
      "list load: %lld runs in the table after %.0f ms (summaries), badges and config "
      "search after %.0f ms (configs)\n",
      static_cast<long long>(page.model()->totalRuns()), shownMs, loadMs);
  std::printf("model reset + repaint on the GUI thread (the last one): %.1f ms\n", resetMs);
  std::printf("longest event-loop stall during the load: %.1f ms\n", worstGap);

  // Keystrokes: each one typed into the field, timed to the end of the table's repaint.
  std::vector<double> filterOnly;  // inside the model's setSearchText (filter + reset signals)
  std::vector<double> cpu;         // GUI-thread CPU per keystroke (setText .. repaint done)
  auto type = [&](const QString& text, std::vector<double>& out) {
    for (int i = 1; i <= text.size(); ++i) {
      const double c0 = cpuMs();
      QElapsedTimer k;
      k.start();
      page.searchField()->setText(text.left(i));
      filterOnly.push_back(double(k.nsecsElapsed()) / 1e6);
      app.processEvents();  // the repaint, as the event loop does it
      out.push_back(double(k.nsecsElapsed()) / 1e6);
      cpu.push_back(cpuMs() - c0);
    }
  };
  auto erase = [&](std::vector<double>& out) {
    while (!page.searchField()->text().isEmpty()) {
      const double c0 = cpuMs();
      QElapsedTimer k;
      k.start();
      page.searchField()->backspace();
      app.processEvents();
      out.push_back(double(k.nsecsElapsed()) / 1e6);
      cpu.push_back(cpuMs() - c0);
    }
  };
  std::vector<double> all;
  for (const char* q : {"zero-2", "0.0003", "bf16 flash", "sweep", "loss spikes", "no-such-run"}) {
    std::vector<double> ks;
    type(QString::fromUtf8(q), ks);
    const int rows = page.model()->rowCount();
    erase(ks);
    const Stats s = statsOf(ks);
    std::printf("filter \"%s\" (%d rows match): %d keystrokes, worst %.1f ms, median %.1f ms\n", q,
                rows, s.n, s.worst, s.median);
    all.insert(all.end(), ks.begin(), ks.end());
  }
  const Stats s = statsOf(all);
  std::printf("all keystrokes: %d, wall worst %.1f ms, median %.1f ms\n", s.n, s.worst, s.median);
  const Stats c = statsOf(cpu);
  std::printf("all keystrokes, GUI-thread CPU time: worst %.1f ms, median %.1f ms\n", c.worst,
              c.median);
  // The same keystrokes on a model without a view: the filter's own cost.
  {
    std::vector<gui::RunEntry> entries;
    for (int r = 0; r < page.model()->rowCount(); ++r) entries.push_back(*page.model()->entry(r));
    gui::RunsTableModel bare;
    bare.setEntries(std::move(entries));
    std::vector<double> ks;
    for (const char* q :
         {"zero-2", "0.0003", "bf16 flash", "sweep", "loss spikes", "no-such-run"}) {
      const QString text = QString::fromUtf8(q);
      for (int i = 1; i <= text.size(); ++i) {
        const double c0 = cpuMs();
        bare.setSearchText(text.left(i));
        ks.push_back(cpuMs() - c0);
      }
      for (int i = text.size() - 1; i >= 0; --i) {
        const double c0 = cpuMs();
        bare.setSearchText(text.left(i));
        ks.push_back(cpuMs() - c0);
      }
    }
    const Stats b = statsOf(ks);
    std::printf("model alone (no view), CPU: worst %.1f ms, median %.1f ms per keystroke\n",
                b.worst, b.median);
  }
  const Stats f = statsOf(filterOnly);
  std::printf(
      "of which filtering + model reset (setText, no paint): worst %.1f ms, median %.1f ms\n",
      f.worst, f.median);
  fs::remove_all(dir);
  return 0;
}
