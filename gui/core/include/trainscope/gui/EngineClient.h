#pragma once
// Runs `trainscope-engine run CONFIG` as a child process (with parallel.ranks > 1 the engine
// relaunches itself under `mpirun -np N [--hostfile H]`), decodes its NDJSON events in batches and
// feeds them to a LiveRun; sends commands on its stdin. A missing binary or a failed start is
// reported, never waited on.
#include <memory>
#include <optional>

#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/gui/LiveRun.h"

namespace ts::gui {

// Where the engine and mpirun are. Search order for the engine: $TRAINSCOPE_ENGINE, next to
// the application (../engine/, ./), then PATH.
struct EngineLocator {
  static QString findEngine();
  static QString findMpirun();
};

struct LaunchOptions {
  QString enginePath;  // empty = EngineLocator::findEngine()
  // empty = EngineLocator::findMpirun(); when ranks > 1, checked to exist and put first on the
  // engine's PATH (the engine starts its ranks with it)
  QString mpirunPath;
  QString dbPath;         // passed as --db when set
  QString runDir;         // where run.json is written (and --run-dir); empty = a temp dir
  QStringList extraArgs;  // e.g. {"--set", "train.steps=20"}
};

class EngineClient : public QObject {
  Q_OBJECT
 public:
  explicit EngineClient(LiveRun* run, QObject* parent = nullptr);
  ~EngineClient() override;

  // Starts the run. Returns false (and sets error()) when it cannot even start: no engine
  // binary, no mpirun for several ranks, an unwritable run directory.
  bool start(const nlohmann::json& config, const LaunchOptions& options);
  // The program and arguments start() would use (for display and tests).
  // The same for any rank count: the engine itself starts several ranks under mpirun.
  static std::pair<QString, QStringList> commandLine(const QString& engine,
                                                     const QString& configPath,
                                                     const LaunchOptions& options);

  void send(core::CommandType type, int steps = 0);
  bool isRunning() const;
  const QString& error() const { return error_; }
  LiveRun* run() const { return run_; }
  QString configPath() const { return configPath_; }

  // Leaves the engine running when the GUI exits: stdin/stdout are closed and the process
  // object is released without killing the child (the engine records to the database itself,
  // and ignores SIGPIPE because it was started with SIGPIPE ignored).
  void detach();

  // Decodes a chunk on the calling thread as if it came from the engine (tests).
  void feed(const QByteArray& chunk);
  // The path the engine's stdout takes: decoded on the client's worker thread, then applied to
  // the run on this object's thread in arrival order, so JSON parsing never stalls the GUI.
  // Don't mix with feed() on one client (each has its own line buffer).
  void feedQueued(const QByteArray& chunk);
  // Chunks handed to feedQueued() whose events are not applied yet (backpressure for replay).
  int pendingChunks() const { return pending_; }

 signals:
  void startFailed(const QString& message);
  void exited(int exitCode);

 private:
  void onReadyRead();
  void onFinished(int exitCode, QProcess::ExitStatus status);
  void startDecoder();  // the decoder thread, once
  // Queues a chunk for the worker; `last` flushes a trailing line and then calls completeExit.
  void decodeAsync(const QByteArray& chunk, bool last, int exitCode = 0,
                   QProcess::ExitStatus status = QProcess::NormalExit);
  // Applies what the worker decoded, in order; invoked (queued, by name) when the worker has
  // results. Several results share one call: the worker posts only when none is outstanding.
  Q_INVOKABLE void drainDecoded();
  void applyDecoded(const std::vector<core::Event>& events, const QStringList& errors);
  void completeExit(int exitCode, QProcess::ExitStatus status);

  LiveRun* run_;
  QProcess* process_ = nullptr;
  core::EventDecoder decoder_;  // feed() only
  // The decoder thread and the queues to and from it (EngineClient.cpp); started on first use.
  struct Decoding;
  std::unique_ptr<Decoding> decoding_;
  int pending_ = 0;
  QString error_;
  QString configPath_;
  QByteArray stderrTail_;
  bool sawFinished_ = false;
  bool detached_ = false;
};

}  // namespace ts::gui
