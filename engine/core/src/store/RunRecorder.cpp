#include "trainscope/core/store/RunRecorder.h"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "RunStoreDb.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ts::core {

std::string defaultDatabasePath() {
  fs::path path;
  if (const char* env = std::getenv("TRAINSCOPE_DB"); env && *env) {
    path = env;
  } else {
    fs::path base;
    // XDG: a relative XDG_DATA_HOME is invalid and must be ignored.
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg == '/') {
      base = xdg;
    } else {
      const char* home = std::getenv("HOME");
      if (!home || !*home) {
        if (auto* pw = getpwuid(getuid())) home = pw->pw_dir;
      }
      base = fs::path(home ? home : ".") / ".local" / "share";
    }
    path = base / "trainscope" / "runs.db";
  }
  std::error_code ec;
  if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
  return path.string();
}

struct RunRecorder::Impl {
  Options opt;
  std::string eventsPath;
  FILE* file = nullptr;
  // recorded.ndjson: one line per database commit, written only after it succeeded, saying the
  // highest step and seq now committed. A crash test checks the database against these promises.
  int ackFd = -1;
  int64_t ackedStep = -1, ackedSeq = -1;
  std::unique_ptr<store::Db> db;
  std::unique_ptr<store::EventIngestor> ingestor;
  int64_t runId = 0;

  std::mutex mutex;  // guards pending, warnings, stop
  std::condition_variable cv;
  std::vector<json> pending;
  std::vector<std::string> warnings;
  bool stop = false;
  bool closed = false;
  std::thread worker;
  std::chrono::steady_clock::time_point lastCommit = std::chrono::steady_clock::now();

  void warn(std::string w) {
    std::lock_guard lock(mutex);
    warnings.push_back(std::move(w));
  }

  std::string fallbackHint() const {
    if (!file) return "; the events file could not be written either";
    return "; recording continues in " + eventsPath +
           " only (load it later with `trainscope-engine runs import " + opt.runDir + "`)";
  }

  void dbFailed(const std::string& what) {
    warn(what + fallbackHint());
    ingestor.reset();
    db.reset();
  }

  // Writes a batch to the file and the database. Worker thread (or close) only.
  void flush(std::vector<json>& batch, bool heartbeatOnly) {
    if (file && !batch.empty()) {
      std::string buf;
      for (auto& e : batch) {
        buf += e.dump(-1, ' ', false, json::error_handler_t::replace);
        buf += '\n';
      }
      if (std::fwrite(buf.data(), 1, buf.size(), file) != buf.size() || std::fflush(file) != 0) {
        warn("events file " + eventsPath + " cannot be written: " + std::strerror(errno));
        std::fclose(file);
        file = nullptr;
      }
    }
    if (!db || (heartbeatOnly && batch.empty() &&
                std::chrono::steady_clock::now() - lastCommit < std::chrono::seconds(1)))
      return;
    try {
      store::Transaction tx(*db);
      int64_t maxStep = ackedStep, maxSeq = ackedSeq;
      for (auto& e : batch) {
        ingestor->apply(e);
        if (auto it = e.find("seq"); it != e.end() && it->is_number_integer())
          maxSeq = std::max(maxSeq, it->get<int64_t>());
        if (e.value("type", "") == "step")
          if (auto it = e.find("step"); it != e.end() && it->is_number_integer())
            maxStep = std::max(maxStep, it->get<int64_t>());
      }
      ingestor->endBatch(store::nowSeconds());
      tx.commit();
      lastCommit = std::chrono::steady_clock::now();
      acknowledge(maxStep, maxSeq, batch.size());
    } catch (const StoreError& e) {
      dbFailed(e.what());
    } catch (const std::exception& e) {
      dbFailed(std::string("database ") + opt.dbPath + " failed: " + e.what());
    }
  }

  void acknowledge(int64_t step, int64_t seq, size_t events) {
    if (ackFd < 0 || events == 0) return;
    ackedStep = step;
    ackedSeq = seq;
    const std::string line = json{{"run_id", runId}, {"step", step}, {"seq", seq}}.dump() + "\n";
    // One small write on an O_APPEND file: a kill leaves whole lines or none.
    if (::write(ackFd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      warn("recording acknowledgements " + opt.runDir +
           "/recorded.ndjson cannot be written: " + std::strerror(errno));
      ::close(ackFd);
      ackFd = -1;
    }
  }

  void run() {
    std::vector<json> batch;
    std::unique_lock lock(mutex);
    while (true) {
      // Commit about twice a second: "at least once a second" with margin.
      cv.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop; });
      batch.swap(pending);
      bool stopping = stop;
      lock.unlock();
      flush(batch, true);
      batch.clear();
      lock.lock();
      if (stopping && pending.empty()) break;
    }
  }

  void stopWorker() {
    {
      std::lock_guard lock(mutex);
      if (!worker.joinable()) return;
      stop = true;
    }
    cv.notify_all();
    worker.join();
  }
};

RunRecorder::RunRecorder(Options options) : impl_(std::make_unique<Impl>()) {
  auto& d = *impl_;
  d.opt = std::move(options);
  if (d.opt.dbPath.empty()) d.opt.dbPath = defaultDatabasePath();
  double created = store::nowSeconds();
  std::error_code ec;
  std::string runDir;
  if (d.opt.runDir.empty()) {
    d.warn("no run directory given: events are not written to an events.ndjson file");
  } else {
    fs::create_directories(d.opt.runDir, ec);
    runDir = fs::weakly_canonical(fs::absolute(d.opt.runDir), ec).string();
    d.eventsPath = (fs::path(d.opt.runDir) / "events.ndjson").string();
    d.file = std::fopen(d.eventsPath.c_str(), "a");
    if (!d.file)
      d.warn("events file " + d.eventsPath + " cannot be opened: " + std::strerror(errno));
    const auto acks = fs::path(d.opt.runDir) / "recorded.ndjson";
    d.ackFd = ::open(acks.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  }
  try {
    d.db = std::make_unique<store::Db>(d.opt.dbPath, false, true, d.opt.busyTimeoutMs, 15.0);
    d.db->migrate();
    if (d.opt.maxDatabasePages > 0) d.db->setMaxPageCount(d.opt.maxDatabasePages);
    store::RunMeta meta;
    meta.name = d.opt.name;
    meta.backend = d.opt.backend;
    meta.ranks = d.opt.ranks;
    meta.parentRun = d.opt.parentRun;
    meta.teacherRun = d.opt.teacherRun;
    meta.runDir = runDir;
    meta.created = created;
    meta.pid = getpid();
    meta.host = store::hostName();
    store::Transaction tx(*d.db);
    d.runId = store::EventIngestor::createRun(*d.db, meta);
    tx.commit();
    d.ingestor = std::make_unique<store::EventIngestor>(*d.db, d.runId);
  } catch (const StoreError& e) {
    d.runId = 0;
    d.dbFailed(e.what());
  } catch (const std::exception& e) {
    d.runId = 0;
    d.dbFailed("database " + d.opt.dbPath + " cannot be used: " + e.what());
  }
  if (!runDir.empty()) {
    // What `runs import` needs to recreate the run without the database.
    json meta = {{"name", d.opt.name},
                 {"backend", d.opt.backend},
                 {"ranks", d.opt.ranks},
                 {"parent_run", d.opt.parentRun},
                 {"teacher_run", d.opt.teacherRun},
                 {"created", created},
                 {"db", d.opt.dbPath},
                 {"run_id", d.runId}};
    std::ofstream out(fs::path(d.opt.runDir) / "recorder.json", std::ios::trunc);
    out << meta.dump(2) << "\n";
  }
  d.worker = std::thread([&d] { d.run(); });
}

RunRecorder::~RunRecorder() {
  impl_->stopWorker();
  if (impl_->file) std::fclose(impl_->file);
  if (impl_->ackFd >= 0) ::close(impl_->ackFd);
}

int64_t RunRecorder::runId() const {
  return impl_->runId;
}

void RunRecorder::record(const json& event) {
  std::lock_guard lock(impl_->mutex);
  if (impl_->closed) return;
  impl_->pending.push_back(event);
}

void RunRecorder::close() {
  auto& d = *impl_;
  {
    std::lock_guard lock(d.mutex);
    if (d.closed) return;
  }
  d.stopWorker();
  {
    std::lock_guard lock(d.mutex);
    d.closed = true;
  }
  if (d.db && d.ingestor && !d.ingestor->sawFinished()) {
    try {
      auto s = d.db->prepare(
          "UPDATE runs SET status='failed', finished=?2, heartbeat=?2, "
          "reason='the engine closed the recording without a finished event' "
          "WHERE id=?1 AND status='running'");
      s.bind(1, d.runId).bind(2, store::nowSeconds()).run();
    } catch (const StoreError& e) {
      d.dbFailed(e.what());
    }
  }
  if (d.file) {
    std::fclose(d.file);
    d.file = nullptr;
  }
  if (d.ackFd >= 0) {
    ::close(d.ackFd);
    d.ackFd = -1;
  }
  d.ingestor.reset();
  d.db.reset();
}

std::vector<std::string> RunRecorder::takeWarnings() {
  std::lock_guard lock(impl_->mutex);
  std::vector<std::string> out;
  out.swap(impl_->warnings);
  return out;
}

}  // namespace ts::core
