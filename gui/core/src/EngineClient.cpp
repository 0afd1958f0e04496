#include "trainscope/gui/EngineClient.h"

#include <unistd.h>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <thread>

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QPointer>
#include <QProcessEnvironment>
#include <QStandardPaths>
#include <QTemporaryDir>

namespace ts::gui {

QString EngineLocator::findEngine() {
  const QString env = qEnvironmentVariable("TRAINSCOPE_ENGINE");
  if (!env.isEmpty()) return QFileInfo(env).isExecutable() ? env : QString();
  const QString appDir =
      QCoreApplication::instance() ? QCoreApplication::applicationDirPath() : QDir::currentPath();
  for (const char* rel :
       {"../engine/trainscope-engine", "trainscope-engine", "../../engine/trainscope-engine"}) {
    const QFileInfo fi(QDir(appDir).filePath(rel));
    if (fi.isFile() && fi.isExecutable()) return fi.canonicalFilePath();
  }
  return QStandardPaths::findExecutable("trainscope-engine");
}

QString EngineLocator::findMpirun() {
  for (const char* name : {"mpirun", "mpiexec"}) {
    const QString p = QStandardPaths::findExecutable(name);
    if (!p.isEmpty()) return p;
  }
  return {};
}

// The engine's stdout is decoded on a std::thread; chunks go to it and decoded results come back
// through these std::mutex-guarded queues. Only a wake-up ("drainDecoded", by name, no payload)
// crosses threads through Qt's event queue: Qt's own locks are invisible to ThreadSanitizer (Qt is
// not instrumented), so data handed over inside a queued functor would look like a race there,
// while this hand-off is checked by it (tests/tsan).
struct EngineClient::Decoding {
  struct Chunk {
    QByteArray bytes;
    bool last = false;  // the process exited: flush a trailing line, then completeExit
    int exitCode = 0;
    QProcess::ExitStatus status = QProcess::NormalExit;
  };
  struct Result {
    std::vector<core::Event> events;
    QStringList errors;
    bool last = false;
    int exitCode = 0;
    QProcess::ExitStatus status = QProcess::NormalExit;
  };

  std::mutex mutex;  // guards everything below but decoder and thread
  std::condition_variable cv;
  std::deque<Chunk> chunks;
  std::deque<Result> results;
  bool wakePosted = false;  // a drainDecoded call is queued and has not yet seen `results` empty
  bool stop = false;
  core::EventDecoder decoder;  // worker thread only
  std::thread thread;

  void run(EngineClient* client) {
    std::unique_lock lock(mutex);
    for (;;) {
      cv.wait(lock, [this] { return stop || !chunks.empty(); });
      if (stop) return;
      Chunk c = std::move(chunks.front());
      chunks.pop_front();
      lock.unlock();

      Result r{{}, {}, c.last, c.exitCode, c.status};
      decoder.setErrorHandler([&r](const std::string& msg, const std::string& line) {
        r.errors << QStringLiteral("unreadable engine output (%1): %2")
                        .arg(QString::fromStdString(msg),
                             QString::fromStdString(line.substr(0, 200)));
      });
      r.events = decoder.feed(std::string_view(c.bytes.constData(), c.bytes.size()));
      if (c.last) {
        auto rest = decoder.finish();
        r.events.insert(r.events.end(), std::make_move_iterator(rest.begin()),
                        std::make_move_iterator(rest.end()));
      }
      decoder.setErrorHandler({});
      c = Chunk{};  // the chunk's bytes go here, not on the GUI thread

      lock.lock();
      results.push_back(std::move(r));
      if (!wakePosted) {
        wakePosted = true;
        // Not under the lock: drainDecoded takes it. The client outlives this thread (its
        // destructor joins it before QObject's, which drops a wake-up still queued).
        lock.unlock();
        QMetaObject::invokeMethod(client, "drainDecoded", Qt::QueuedConnection);
        lock.lock();
      }
    }
  }
};

EngineClient::EngineClient(LiveRun* run, QObject* parent) : QObject(parent), run_(run) {
  decoder_.setErrorHandler([this](const std::string& msg, const std::string& line) {
    // Non-protocol output on stdout: show it, do not stop.
    run_->addLog("warning", QStringLiteral("unreadable engine output (%1): %2")
                                .arg(QString::fromStdString(msg),
                                     QString::fromStdString(line.substr(0, 200))));
  });
}

EngineClient::~EngineClient() {
  if (process_) disconnect(process_, nullptr, this, nullptr);
  if (process_ && !detached_ && process_->state() != QProcess::NotRunning) {
    // Owner decided to stop: the engine gets the stop command and finishes it on its own (a
    // final checkpoint may take minutes; killing it would lose it). Released, not destroyed:
    // destroying a QProcess kills its child.
    core::Command stop;
    stop.type = core::CommandType::Stop;
    process_->write(QByteArray::fromStdString(core::encodeCommand(stop)));
    process_->waitForBytesWritten(1000);
    process_->closeWriteChannel();
    process_->setParent(nullptr);
    process_ = nullptr;
  }
  if (decoding_) {
    // Chunks not decoded yet are dropped, as are results not applied: nothing will show them.
    {
      std::lock_guard lock(decoding_->mutex);
      decoding_->stop = true;
    }
    decoding_->cv.notify_all();
    decoding_->thread.join();
  }
}

std::pair<QString, QStringList> EngineClient::commandLine(const QString& engine,
                                                          const QString& configPath,
                                                          const LaunchOptions& options) {
  QStringList args{"run", configPath};
  if (!options.dbPath.isEmpty()) args << "--db" << options.dbPath;
  if (!options.runDir.isEmpty()) args << "--run-dir" << options.runDir;
  args << options.extraArgs;
  return {engine, args};
}

bool EngineClient::start(const nlohmann::json& config, const LaunchOptions& options) {
  error_.clear();
  const QString engine =
      options.enginePath.isEmpty() ? EngineLocator::findEngine() : options.enginePath;
  if (engine.isEmpty() || !QFileInfo(engine).isExecutable()) {
    error_ = QStringLiteral(
                 "The training engine (trainscope-engine) was not found%1.\n\nBuild it with "
                 "`cmake --build build --target trainscope-engine`, or point $TRAINSCOPE_ENGINE "
                 "at it.")
                 .arg(engine.isEmpty() ? QString() : " at " + engine);
    run_->setState(RunState::Failed, error_);
    emit startFailed(error_);
    return false;
  }
  const int ranks = config.contains("parallel") && config["parallel"].contains("ranks") &&
                            config["parallel"]["ranks"].is_number_integer()
                        ? config["parallel"]["ranks"].get<int>()
                        : 1;
  QString mpirun;
  if (ranks > 1) {
    mpirun = options.mpirunPath.isEmpty() ? EngineLocator::findMpirun() : options.mpirunPath;
    if (mpirun.isEmpty()) {
      error_ = QStringLiteral(
                   "This run uses %1 ranks, which needs `mpirun` (OpenMPI), but it was not found "
                   "on PATH.\n\nInstall openmpi-bin, or set the number of ranks to 1.")
                   .arg(ranks);
      run_->setState(RunState::Failed, error_);
      emit startFailed(error_);
      return false;
    }
  }
  // The config goes to a file the engine reads; keep it with the run for later inspection.
  QString dir = options.runDir;
  if (dir.isEmpty()) {
    dir = QDir(QStandardPaths::writableLocation(QStandardPaths::TempLocation))
              .filePath(QStringLiteral("trainscope-%1-%2")
                            .arg(QCoreApplication::applicationPid())
                            .arg(reinterpret_cast<quintptr>(this), 0, 16));
  }
  QDir().mkpath(dir);
  configPath_ = QDir(dir).filePath("run.json");
  QFile f(configPath_);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    error_ =
        QStringLiteral("Cannot write the run config to %1: %2").arg(configPath_, f.errorString());
    run_->setState(RunState::Failed, error_);
    emit startFailed(error_);
    return false;
  }
  f.write(QByteArray::fromStdString(config.dump(2)));
  f.close();

  auto [program, args] = commandLine(engine, configPath_, options);
  process_ = new QProcess(this);
  process_->setProgram(program);
  process_->setArguments(args);
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  if (ranks > 1) {
    // The engine starts the ranks itself (`mpirun -np N`, with parallel.hostfile when set), as a
    // headless run does: it finds mpirun on PATH, so the one found here goes first.
    const QString bin = QFileInfo(mpirun).absolutePath();
    const QString path = env.value("PATH");
    if (!path.split(':').contains(bin)) env.insert("PATH", path.isEmpty() ? bin : bin + ':' + path);
    // OpenMPI refuses root without these; harmless otherwise.
    env.insert("OMPI_ALLOW_RUN_AS_ROOT", "1");
    env.insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  process_->setProcessEnvironment(env);
  // Own session (a terminal hang-up does not reach it) and SIGPIPE ignored (inherited across
  // exec), so the engine outlives the GUI when the user chooses to keep it running.
  process_->setChildProcessModifier([] {
    ::setsid();
    ::signal(SIGPIPE, SIG_IGN);
  });
  connect(process_, &QProcess::readyReadStandardOutput, this, &EngineClient::onReadyRead);
  connect(process_, &QProcess::readyReadStandardError, this, [this] {
    stderrTail_ += process_->readAllStandardError();
    if (stderrTail_.size() > 16384) stderrTail_ = stderrTail_.right(16384);
  });
  connect(process_, &QProcess::finished, this, &EngineClient::onFinished);
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError err) {
    if (err != QProcess::FailedToStart) return;
    error_ =
        QStringLiteral("Could not start %1: %2").arg(process_->program(), process_->errorString());
    run_->setState(RunState::Failed, error_);
    emit startFailed(error_);
  });
  run_->addLog("info", QStringLiteral("$ %1 %2").arg(program, args.join(' ')));
  // The decoder thread exists before the child does. Qt 6.4 spawns with clone(), which
  // ThreadSanitizer cannot see; a thread created after that loses its hand-off's ordering in
  // TSan's eyes (tests/tsan: a false race on the chunk queue), one created before does not.
  startDecoder();
  process_->start();
  return true;
}

void EngineClient::feed(const QByteArray& chunk) {
  run_->applyBatch(decoder_.feed(std::string_view(chunk.constData(), chunk.size())));
}

void EngineClient::feedQueued(const QByteArray& chunk) {
  decodeAsync(chunk, false);
}

void EngineClient::startDecoder() {
  if (decoding_) return;
  decoding_ = std::make_unique<Decoding>();
  decoding_->thread = std::thread([d = decoding_.get(), this] { d->run(this); });
}

void EngineClient::decodeAsync(const QByteArray& chunk, bool last, int exitCode,
                               QProcess::ExitStatus status) {
  startDecoder();
  ++pending_;
  {
    std::lock_guard lock(decoding_->mutex);
    decoding_->chunks.push_back({chunk, last, exitCode, status});
  }
  decoding_->cv.notify_one();
}

void EngineClient::drainDecoded() {
  if (!decoding_) return;
  // What is there now, in arrival order, one at a time (a nested event loop in a slot may drain
  // the next ones itself); results that arrive meanwhile get a wake-up of their own.
  size_t n = 0;
  {
    std::lock_guard lock(decoding_->mutex);
    n = decoding_->results.size();
  }
  const QPointer<EngineClient> self(this);
  for (size_t i = 0; i < n; ++i) {
    Decoding::Result r;
    {
      std::lock_guard lock(decoding_->mutex);
      if (decoding_->results.empty()) break;
      r = std::move(decoding_->results.front());
      decoding_->results.pop_front();
    }
    --pending_;
    applyDecoded(r.events, r.errors);
    if (r.last) completeExit(r.exitCode, r.status);
    if (!self) return;  // a slot deleted the client
  }
  bool again = false;
  {
    std::lock_guard lock(decoding_->mutex);
    // Cleared only when empty, under the lock: the worker posts again for whatever comes next.
    if (decoding_->results.empty())
      decoding_->wakePosted = false;
    else
      again = true;
  }
  if (again) QMetaObject::invokeMethod(this, "drainDecoded", Qt::QueuedConnection);
}

void EngineClient::applyDecoded(const std::vector<core::Event>& events, const QStringList& errors) {
  for (const QString& e : errors) run_->addLog("warning", e);
  for (const auto& e : events)
    if (e.type == core::EventType::Finished) sawFinished_ = true;
  run_->applyBatch(events);
}

void EngineClient::onReadyRead() {
  if (!process_) return;
  const QByteArray chunk = process_->readAllStandardOutput();
  if (!chunk.isEmpty()) decodeAsync(chunk, false);
}

void EngineClient::onFinished(int exitCode, QProcess::ExitStatus status) {
  // The rest of stdout joins the queue; the exit is judged once every event before it is applied.
  decodeAsync(process_->readAllStandardOutput(), true, exitCode, status);
}

void EngineClient::completeExit(int exitCode, QProcess::ExitStatus status) {
  if (process_) stderrTail_ += process_->readAllStandardError();
  if (!sawFinished_) {
    QString why = status == QProcess::CrashExit
                      ? QStringLiteral("the engine crashed")
                      : QStringLiteral("the engine exited with code %1").arg(exitCode);
    const QString tail = QString::fromLocal8Bit(stderrTail_).trimmed();
    if (!tail.isEmpty()) why += ": " + tail.right(600);
    run_->addLog("error", why);
    run_->setState(exitCode == 130 ? RunState::Stopped : RunState::Failed, why);
  } else if (!stderrTail_.trimmed().isEmpty() && exitCode != 0) {
    run_->addLog("warning", QString::fromLocal8Bit(stderrTail_).trimmed().right(600));
  }
  emit exited(exitCode);
}

void EngineClient::send(core::CommandType type, int steps) {
  if (!isRunning()) return;
  core::Command c;
  c.type = type;
  c.steps = steps;
  process_->write(QByteArray::fromStdString(core::encodeCommand(c)));
  if (type == core::CommandType::Pause) run_->setState(RunState::Paused);
  if (type == core::CommandType::Resume) run_->setState(RunState::Running);
}

bool EngineClient::isRunning() const {
  return process_ && !detached_ && process_->state() != QProcess::NotRunning;
}

void EngineClient::detach() {
  if (!process_ || detached_) return;
  detached_ = true;
  disconnect(process_, nullptr, this, nullptr);
  // Released on purpose: destroying a QProcess kills its child. The OS reclaims it at exit.
  process_->setParent(nullptr);
  process_ = nullptr;
  run_->setState(RunState::Detached);
}

}  // namespace ts::gui
