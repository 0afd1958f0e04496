#pragma once
// Records a run as the engine emits it: every protocol event goes to the run directory's
// events.ndjson (always) and, batched, to the SQLite run store (when usable). Rank 0 only.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::core {

// $TRAINSCOPE_DB, else $XDG_DATA_HOME/trainscope/runs.db, else ~/.local/share/trainscope/runs.db
std::string defaultDatabasePath();

class RunRecorder {
 public:
  struct Options {
    std::string dbPath;  // empty = defaultDatabasePath()
    std::string runDir;  // events.ndjson goes here (created if missing)
    std::string name;
    std::string backend;
    int ranks = 1;
    int64_t parentRun = 0;         // resume
    int64_t teacherRun = 0;        // distillation
    int busyTimeoutMs = 5000;      // how long a commit waits for another writer's lock
    int64_t maxDatabasePages = 0;  // 0 = no cap; else PRAGMA max_page_count (tests: a full disk)
  };
  // Never throws: an unusable database becomes a warning and recording continues to the file.
  explicit RunRecorder(Options options);
  ~RunRecorder();  // flushes; a run not closed is left as `running` until its heartbeat stops
  RunRecorder(const RunRecorder&) = delete;
  RunRecorder& operator=(const RunRecorder&) = delete;

  int64_t runId() const;  // 0 when the database is not usable
  // Every event exactly as emitted (type, seq, time + fields). Cheap: batched, committed at least
  // once a second, with a heartbeat.
  void record(const nlohmann::json& event);
  // Final commit; marks the run with the status of its `finished` event (or `failed`).
  void close();
  // Problems met since the last call (e.g. "database /x/runs.db is read-only: ..."), to be
  // emitted by the engine as `warning` events.
  std::vector<std::string> takeWarnings();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts::core
