#pragma once
// The GUI's view of the run database (core::RunStore; read-only except the edits below). Each call
// opens its own connection, so calls are safe from worker threads; failures come back as text,
// never as exceptions, because a missing or busy database must not take the window down.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <QObject>
#include <QString>
#include <QTimer>
#include <nlohmann/json.hpp>

#include "trainscope/core/store/RunStore.h"
#include "trainscope/gui/LiveRun.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::gui {

class RunRepository {
 public:
  explicit RunRepository(std::string path);
  const std::string& path() const { return path_; }

  // Empty (no error) when the database file does not exist yet.
  std::vector<core::RunSummary> listRuns(QString* error = nullptr) const;
  std::optional<core::RunDetail> getRun(int64_t id, QString* error = nullptr) const;
  std::vector<core::StepRow> steps(int64_t id, int64_t fromStep, QString* error = nullptr) const;
  std::vector<core::EvalRow> evals(int64_t id, QString* error = nullptr) const;
  // Latest measured report and the plan, rebuilt from memory samples.
  struct MemoryState {
    std::optional<core::MemoryReport> measured, planned;
  };
  MemoryState memory(int64_t id, QString* error = nullptr) const;
  // Measured memory reports of the events after afterSeq, in order: (event seq, step, report).
  struct MemorySnapshot {
    int64_t seq = 0, step = -1;
    core::MemoryReport report;
  };
  std::vector<MemorySnapshot> memoryHistory(int64_t id, int64_t afterSeq,
                                            QString* error = nullptr) const;
  // Stored events of the given types from the offset-th on (RunStore::events).
  std::vector<core::EventRow> events(int64_t id, const std::vector<std::string>& types, int offset,
                                     QString* error = nullptr) const;
  // (run, checkpoint path) of every recorded checkpoint, newest run first (distillation teachers).
  struct CheckpointRef {
    int64_t runId = 0;
    std::string runName;
    int64_t step = 0;
    std::string path;
  };
  std::vector<CheckpointRef> checkpoints(QString* error = nullptr) const;

  // Every run with its resolved config (Runs page: technique badges and config search).
  std::vector<core::RunDetail> listRunDetails(QString* error = nullptr) const;
  // What the Runs page needs to enable Resume and Export trace for one run.
  struct RunExtras {
    int64_t runId = 0;
    std::optional<core::CheckpointRow> lastCheckpoint;  // highest step
    bool checkpointExists = false;                      // its file is on disk
    bool hasProfile = false;                            // at least one `kernels` event
  };
  RunExtras extras(int64_t id, QString* error = nullptr) const;
  // Spans of every `kernels` event of a run, by start time (as `runs export --format trace`).
  // Batches that do not parse are skipped and counted in *skipped.
  std::vector<profiler::Span> kernelSpans(int64_t id, QString* error = nullptr,
                                          int* skipped = nullptr) const;

  // Runs f(store) on a fresh read-only connection (several queries, one open). Returns false
  // with *error set when the database is missing or a query throws.
  template <class F>
  bool withStore(F&& f, QString* error = nullptr) const {
    auto store = openStore(error);
    if (!store) {
      if (error && error->isEmpty())
        *error = QStringLiteral("No run database at %1").arg(QString::fromStdString(path_));
      return false;
    }
    try {
      f(*store);
      return true;
    } catch (const std::exception& e) {
      if (error) *error = QString::fromStdString(e.what());
      return false;
    }
  }

  // Edits (Runs page) on a read-write connection. Return an error text naming the run or the
  // database; empty on success.
  QString rename(int64_t id, const std::string& name) const;
  QString setTags(int64_t id, const std::vector<std::string>& tags) const;
  QString setNotes(int64_t id, const std::string& notes) const;
  QString deleteRun(int64_t id, bool deleteFiles) const;

 private:
  std::optional<core::RunStore> openStore(QString* error) const;
  std::string path_;
};

// Follows a run the GUI did not start (or detached from) by polling the database: its history
// first (steps, evals, log lines, checkpoints, every memory sample), then what is new, and the
// status. Queries run on a worker thread. The run is controllable while its engine listens on
// the control socket in its folder (LiveRun::controllable).
class DatabaseFollower : public QObject {
  Q_OBJECT
 public:
  DatabaseFollower(RunRepository repo, int64_t runId, LiveRun* run, QObject* parent = nullptr);
  void pollNow();

 private:
  struct Delta;
  void applyDelta(const Delta& d);

  RunRepository repo_;
  int64_t runId_;
  LiveRun* run_;
  int64_t nextStep_ = 0;
  size_t evalsSeen_ = 0;
  int eventsSeen_ = 0;
  int64_t memorySeq_ = -1;
  bool busy_ = false;
  QTimer timer_;
};

}  // namespace ts::gui
