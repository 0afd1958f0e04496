// A recorder driver process for the store's crash-safety, concurrency and permission tests.
//   store_test_driver record DB RUNDIR NAME STEPS DELAY_US [--as-nobody] [--max-pages N]
//                     [--busy-ms N]
//   store_test_driver lock DB      (holds the database's write lock until killed)
#include <grp.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "trainscope/core/store/RunRecorder.h"

using nlohmann::json;

static double lossAt(int64_t step) {
  return 2.0 + std::sin(0.01 * static_cast<double>(step));
}

static int lockMode(const char* path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path, &db) != SQLITE_OK) return 1;
  if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; BEGIN EXCLUSIVE;", nullptr, nullptr, nullptr) !=
      SQLITE_OK) {
    std::fprintf(stderr, "lock failed: %s\n", sqlite3_errmsg(db));
    return 1;
  }
  std::printf("locked\n");
  std::fflush(stdout);
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "lock") == 0) return lockMode(argv[2]);
  if (argc < 7 || std::strcmp(argv[1], "record") != 0) {
    std::fprintf(stderr, "usage: store_test_driver record DB RUNDIR NAME STEPS DELAY_US ...\n");
    return 2;
  }
  ts::core::RunRecorder::Options o;
  o.dbPath = argv[2];
  o.runDir = argv[3];
  o.name = argv[4];
  o.backend = "cpu";
  int64_t steps = std::atoll(argv[5]);
  int delayUs = std::atoi(argv[6]);
  for (int i = 7; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--as-nobody" && geteuid() == 0) {
      // Root ignores file permissions; drop to nobody so read-only really is read-only.
      setgroups(0, nullptr);
      if (setgid(65534) != 0 || setuid(65534) != 0) return 4;
    } else if (a == "--max-pages" && i + 1 < argc) {
      o.maxDatabasePages = std::atoll(argv[++i]);
    } else if (a == "--busy-ms" && i + 1 < argc) {
      o.busyTimeoutMs = std::atoi(argv[++i]);
    }
  }
  ts::core::RunRecorder rec(o);
  std::printf("started %lld\n", static_cast<long long>(rec.runId()));
  std::fflush(stdout);
  int64_t seq = 0;
  auto now = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  rec.record({{"type", "hello"},
              {"seq", seq++},
              {"time", now()},
              {"backend", "cpu"},
              {"ranks", 1},
              {"protocol", 1}});
  rec.record({{"type", "config"},
              {"seq", seq++},
              {"time", now()},
              {"config", {{"name", o.name}, {"optimizer", {{"lr", 0.001}}}}}});
  // The training loop's side of recording: time spent inside record() (a queue push; the
  // database commits on the recorder's thread), reported for the load test's log.
  double inRecord = 0, worstRecord = 0;
  const auto loopStart = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    rec.record({{"type", "step"},
                {"seq", seq++},
                {"time", now()},
                {"step", s},
                {"loss", lossAt(s)},
                {"lr", 0.001},
                {"grad_norm", 1.0},
                {"tokens", (s + 1) * 64},
                {"tokens_per_s", 6400.0},
                {"step_ms", 10.0},
                {"loss_scale", 1.0},
                {"skipped", false}});
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    inRecord += dt;
    worstRecord = std::max(worstRecord, dt);
    if (delayUs > 0) std::this_thread::sleep_for(std::chrono::microseconds(delayUs));
  }
  rec.record({{"type", "finished"},
              {"seq", seq++},
              {"time", now()},
              {"status", "completed"},
              {"reason", ""}});
  const double loop =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loopStart).count();
  const auto closeStart = std::chrono::steady_clock::now();
  rec.close();
  std::printf(
      "steps %lld: loop %.2f s, %.2f s inside record() (worst call %.3f ms), close "
      "(the recorder catching up) %.2f s\n",
      static_cast<long long>(steps), loop, inRecord, worstRecord * 1e3,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - closeStart).count());
  for (auto& w : rec.takeWarnings()) std::printf("WARNING: %s\n", w.c_str());
  std::printf("done %lld\n", static_cast<long long>(rec.runId()));
  return 0;
}
