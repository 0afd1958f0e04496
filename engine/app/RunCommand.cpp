// `trainscope-engine run CONFIG`: validates the config, trains, and streams protocol events
// (NDJSON) on stdout — or, with --human, readable progress lines and a summary.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

#include "Commands.h"
#include "HumanPrinter.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/protocol/ControlSocket.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/engine/train/Capabilities.h"
#include "trainscope/engine/train/EventWriter.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/GuardedCpuBackend.h"

namespace ts::app {

namespace {

std::atomic<bool> g_interrupt{false};
extern "C" void onSignal(int) {
  g_interrupt.store(true);
}

struct RunOptions {
  std::string config;
  std::string db;
  std::string runDir;
  std::vector<std::string> sets;
  std::string resume;
  bool human = false;
};

std::string defaultRunDir(const std::string& dbPath, const std::string& name) {
  namespace fs = std::filesystem;
  fs::path base = fs::path(dbPath).parent_path();
  if (base.empty()) base = ".";
  char stamp[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::string safe;
  for (char c : name)
    safe.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '-' ? c : '_');
  // Only [A-Za-z0-9_-], at most 64 of them: a hostile or huge name can neither climb out of
  // runs/ nor exceed the file system's name limit.
  if (safe.size() > 64) safe.resize(64);
  if (safe.empty()) safe = "run";
  return (base / "runs" / (safe + "-" + stamp + "-" + std::to_string(::getpid()))).string();
}

// parallel.ranks > 1 without an MPI launcher around us: run the same command under
// `mpirun -np N` (with the config's hostfile), so headless runs and the app start ranks the same
// way. Returns only when there is nothing to relaunch (or exec failed, with a message).
void relaunchUnderMpirun(const RunOptions& o, const std::string& runDir, int ranks,
                         const std::string& hostfile) {
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(ranks)};
  if (::geteuid() == 0) args.push_back("--allow-run-as-root");
  if (hostfile.empty()) {
    // One machine: more ranks than cores is allowed (each rank gets device.threads).
    if (ranks > static_cast<int>(std::thread::hardware_concurrency()) || ranks > 2)
      args.push_back("--oversubscribe");
  } else {
    args.insert(args.end(), {"--hostfile", hostfile});
  }
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = 0;
  args.insert(args.end(), {self, "run", o.config, "--run-dir", runDir});
  if (!o.db.empty()) args.insert(args.end(), {"--db", o.db});
  for (const auto& s : o.sets) args.insert(args.end(), {"--set", s});
  if (!o.resume.empty()) args.insert(args.end(), {"--resume", o.resume});
  if (o.human) args.push_back("--human");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp("mpirun", argv.data());
  std::fprintf(stderr,
               "trainscope-engine run: parallel.ranks %d needs mpirun (OpenMPI, package "
               "openmpi-bin), which could not be started: %s\n",
               ranks, std::strerror(errno));
}

// The newest checkpoint directory under runDir/checkpoints (step_NNNNNNNN), "" if none.
std::string newestCheckpoint(const std::string& runDir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string best;
  for (const auto& e : fs::directory_iterator(fs::path(runDir) / "checkpoints", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos &&
        fs::exists(e.path() / "state.json", ec) && e.path().string() > best)
      best = e.path().string();
  }
  return best;
}

// One `run` in this process, as named steps: the event stream (fd 1 kept for events only),
// hello, the config, the backend and communicators, the recorder, the memory plan, the
// trainer with its stdin command reader, the summary and the exit code.
class EngineRun {
 public:
  explicit EngineRun(const RunOptions& o)
      : o_(o),
        world_(engine::launcherWorldSize()),
        worldRank_(engine::launcherWorldRank()),
        root_(worldRank_ == 0),
        eventFd_(takeEventFd()),
        writer_(eventFd_ < 0 ? STDERR_FILENO : eventFd_),
        human_(eventFd_ < 0 ? STDERR_FILENO : eventFd_) {}

  int run() {
    hello();
    if (!loadConfig()) return finish("failed", "invalid config", kExitBadInput);
    if (!makeBackend()) return finish("failed", "backend unavailable", kExitBadInput);
    if (!makeCommunicators()) return finish("failed", "MPI did not start", kExitRunFailed);
    startRecorder();
    emitMemoryPlan();
    const engine::TrainResult tr = train();
    printSummary(tr);
    int code = kExitOk;
    if (tr.status == "failed")
      code = tr.badInput ? kExitBadInput : kExitRunFailed;
    else if (tr.status == "stopped" && tr.interrupted)
      code = kExitInterrupted;
    const int rc = finish(tr.status, tr.reason, code);
    if (ranksLost_) engine::abortRanks(rc);
    return rc;
  }

 private:
  // Only events may reach fd 1: keep a private copy of it for the writer and point fd 1 at
  // stderr, so anything a library prints lands there. Signals stop the run at a step boundary.
  static int takeEventFd() {
    std::fflush(stdout);
    const int eventFd = ::dup(STDOUT_FILENO);
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
    std::signal(SIGPIPE, SIG_IGN);
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    return eventFd;
  }

  void emit(core::EventType type, nlohmann::json fields, bool droppable = false) {
    if (!root_) {
      // Rank 0 alone writes events and the run store; the others only say what went wrong.
      if (type == core::EventType::Error || type == core::EventType::Warning)
        std::fprintf(stderr, "rank %d: %s: %s\n", worldRank_,
                     type == core::EventType::Error ? "error" : "warning",
                     fields.value("message", std::string()).c_str());
      return;
    }
    if (o_.human) human_.onEvent(type, fields);
    std::string line = encoder_.encode(type, std::move(fields));
    if (recorder_)
      recorder_->record(nlohmann::json::parse(line, nullptr, false));
    else
      beforeRecorder_.push_back(line);
    if (!o_.human) writer_.write(std::move(line), droppable);
    if (recorder_ && type != core::EventType::Warning) {
      for (auto& w : recorder_->takeWarnings()) {
        std::string wl = encoder_.encode(core::EventType::Warning, {{"message", w}});
        recorder_->record(nlohmann::json::parse(wl, nullptr, false));
        if (o_.human)
          human_.onEvent(core::EventType::Warning, {{"message", w}});
        else
          writer_.write(std::move(wl));
      }
    }
  }

  int finish(const std::string& status, const std::string& reason, int code) {
    emit(core::EventType::Finished, {{"status", status}, {"reason", reason}, {"exit_code", code}});
    if (recorder_) recorder_->close();
    writer_.close();
    return code;
  }

  // hello first, whatever happens next.
  void hello() {
    ctx_.check_backend = true;
    ctx_.check_files = world_ == 1;  // under mpirun the hostfile did its work (not on every host)
    auto caps = engine::capabilitiesJson();
    for (const auto& b : caps["backends"])
      if (b["name"] == "cuda") ctx_.cuda_available = b.value("usable", false);
    nlohmann::json hello = {{"protocol_version", core::kProtocolVersion},
                            {"engine_version", TRAINSCOPE_VERSION},
                            {"pid", ::getpid()},
                            {"ranks", world_},
                            {"devices", caps["devices"]},
                            {"capabilities", caps},
                            // what precision.gemm auto means here, and how it was decided
                            {"gemm_auto", caps["precisions"]["bf16"]["gemm_calibration"]}};
    // The backend is known only after the config; announce the default choice.
    hello["backend"] = ctx_.cuda_available ? "cuda" : "cpu";
    emit(core::EventType::Hello, hello);
  }

  bool loadConfig() {
    auto result = core::loadConfigWithOverrides(o_.config, o_.sets, ctx_);
    if (!result.ok()) {
      std::string msg = "invalid config " + o_.config + ":";
      nlohmann::json issues = nlohmann::json::array();
      for (const auto& i : result.issues) {
        msg += "\n  " + i.toString();
        issues.push_back({{"path", i.path}, {"value", i.value}, {"message", i.message}});
      }
      emit(core::EventType::Error, {{"message", msg}, {"issues", issues}, {"fatal", true}});
      std::fprintf(stderr, "%s\n", msg.c_str());
      return false;
    }
    config_ = *result.config;
    ro_.dbPath = o_.db.empty() ? core::defaultDatabasePath() : o_.db;
    ro_.runDir = o_.runDir.empty() ? defaultRunDir(ro_.dbPath, config_.name) : o_.runDir;
    ro_.name = config_.name;
    return true;
  }

  bool makeBackend() {
    std::string why;
    backend_ = kernels::makeBackend(config_.device.backend, &why);
    // Tests only (docs/testing.md): the guarded CPU backend in place of the CPU one, so the
    // real binary's paths (ZeRO under mpirun, offload) prove they reach memory as a GPU must.
    if (const char* t = std::getenv("TRAINSCOPE_TEST_BACKEND");
        t && std::string(t) == "cpu-guarded" && backend_ && backend_->name() == "cpu")
      backend_ = kernels::makeGuardedCpuBackend();
    if (!backend_) {
      emit(core::EventType::Error,
           {{"message", "device.backend " + config_.device.backend + " is not usable: " + why},
            {"fatal", true}});
      return false;
    }
    backend_->setThreads(config_.device.threads);
    ro_.backend = backend_->name();
    ro_.ranks = world_;
    return true;
  }

  bool makeCommunicators() {
    if (world_ <= 1) return true;
    try {
      comm_ = engine::makeMpiCommunicator(backend_.get());
      // GPU ranks talk through NCCL (one device per rank on each machine), bootstrapped over
      // MPI.
      if (backend_->kind() == kernels::DeviceKind::Cuda && engine::ncclCompiled()) {
        int local = 0;
        if (const char* l = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local = std::atoi(l);
        bootstrap_ = std::move(comm_);
        comm_ = engine::makeNcclCommunicator(bootstrap_.get(), local);
      }
    } catch (const std::exception& e) {
      emit(core::EventType::Error, {{"message", e.what()}, {"fatal", true}});
      return false;
    }
    return true;
  }

  // The recorder sees events from here on; hello (already on stdout) is recorded first.
  void startRecorder() {
    if (root_) recorder_ = std::make_unique<core::RunRecorder>(ro_);
    if (recorder_)
      for (const auto& line : beforeRecorder_)
        recorder_->record(nlohmann::json::parse(line, nullptr, false));
    beforeRecorder_.clear();
    emit(core::EventType::Log,
         {{"message", "run directory " + ro_.runDir + ", database " + ro_.dbPath + ", backend " +
                          backend_->name() + " with " + std::to_string(backend_->threads()) +
                          " threads"},
          {"run_dir", ro_.runDir},
          {"db", ro_.dbPath},
          {"backend", backend_->name()},
          {"threads", backend_->threads()}});
    emit(core::EventType::Config, {{"config", core::toJson(config_)},
                                   {"run_id", recorder_ ? recorder_->runId() : int64_t(0)}});
  }

  void emitMemoryPlan() {
    try {
      // vocab 0 means "from the data": resolve it as the trainer will, or the estimator falls
      // back to GPT-2's 50257 for the tiny built-in corpora. A data error is the trainer's to
      // report (with its file and field), so it only leaves the fallback here.
      core::RunConfig planConfig = config_;
      // precision.gemm "auto" as the model resolves it on this backend.
      planConfig.precision.gemm = engine::useBf16Gemm(config_, &*backend_) ? "bf16" : "fp32";
      if (planConfig.model.vocab <= 0) {
        try {
          planConfig.model.vocab = engine::makeDataset(config_)->vocabSize();
        } catch (const std::exception&) {
        }
      }
      core::EstimateOptions po;
      po.cpu_kernel_threads = backend_->scratchThreads();  // as the model sizes its region
      if (!config_.distill.teacher_checkpoint.empty()) {
        try {  // the teacher's own shape (an unreadable one is the trainer's to report)
          po.teacher_model = engine::modelConfigAt(config_.distill.teacher_checkpoint);
        } catch (const std::exception&) {
        }
      }
      emit(core::EventType::MemoryPlan, core::memoryPlanJson(planConfig, po));
    } catch (const std::exception& e) {
      emit(core::EventType::Warning, {{"message", std::string("memory plan: ") + e.what()}});
    }
  }

  // The trainer, with stdin commands read beside it (polled, so the reader can be stopped; EOF,
  // the GUI gone, just ends the reader).
  engine::TrainResult train() {
    engine::TrainerOptions to;
    to.runDir = ro_.runDir;
    to.resumePath = o_.resume;
    to.interrupt = &g_interrupt;
    to.comm = comm_.get();
    to.emit = [&](core::EventType t, nlohmann::json f, bool d) { emit(t, std::move(f), d); };
    engine::Trainer trainer(config_, backend_.get(), to);
    // Rank 0 also listens in its run folder, so a run outlives the app that started it and
    // stays controllable (the app reopened, `runs stop`).
    std::unique_ptr<core::ControlServer> control;
    if (root_) {
      try {
        control = std::make_unique<core::ControlServer>(ro_.runDir);
        emit(core::EventType::Log, {{"message", "control socket " + control->path()},
                                    {"control_socket", control->path()}});
      } catch (const std::exception& e) {
        emit(core::EventType::Warning,
             {{"message", std::string(e.what()) + "; commands reach this run on stdin only"}});
      }
    }
    std::atomic<bool> readerStop{false};
    std::thread reader([&] { readCommands(trainer, control.get(), readerStop); });
    engine::TrainResult tr;
    try {
      tr = trainer.run();
    } catch (const engine::CommError& e) {
      // Another rank died or hangs: record the failure with the newest checkpoint, then take
      // the whole job down (MPI_Finalize would wait for the lost rank).
      ranksLost_ = true;
      tr.status = "failed";
      tr.lastCheckpoint = newestCheckpoint(ro_.runDir);
      tr.reason = std::string("a rank was lost: ") + e.what() + "; " +
                  (tr.lastCheckpoint.empty()
                       ? "no checkpoint was written"
                       : "last checkpoint " + tr.lastCheckpoint + " (continue with --resume)");
      emit(core::EventType::Error, {{"message", tr.reason}, {"fatal", true}});
    } catch (const std::exception& e) {
      tr.status = "failed";
      tr.reason = std::string("internal error: ") + e.what();
      emit(core::EventType::Error, {{"message", tr.reason}, {"fatal", true}});
    }
    readerStop.store(true);
    reader.join();
    return tr;
  }

  // Stdin and the control socket, polled together (so the reader can be stopped). EOF on stdin
  // (the app gone) closes that source only: the socket keeps serving.
  static void readCommands(engine::Trainer& trainer, core::ControlServer* control,
                           const std::atomic<bool>& stop) {
    std::string buf;
    char chunk[4096];
    bool stdinOpen = true;
    auto post = [&](const std::string& line) { trainer.post(core::decodeCommand(line)); };
    std::vector<pollfd> fds;
    while (!stop.load()) {
      fds.clear();
      if (stdinOpen) fds.push_back({STDIN_FILENO, POLLIN, 0});
      const size_t base = fds.size();
      if (control) control->addPollFds(fds);
      if (fds.empty()) return;
      if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
      if (stdinOpen && fds[0].revents) {
        const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
        if (n <= 0) {
          stdinOpen = false;
        } else {
          buf.append(chunk, static_cast<size_t>(n));
          size_t nl;
          while ((nl = buf.find('\n')) != std::string::npos) {
            std::string line = buf.substr(0, nl);
            buf.erase(0, nl + 1);
            if (line.find_first_not_of(" \t\r") != std::string::npos) post(line);
          }
        }
      }
      if (control) control->service(fds.data() + base, fds.size() - base, post);
    }
  }

  void printSummary(const engine::TrainResult& tr) {
    if (!o_.human || !root_) return;
    char buf[256];
    human_.put("\n== summary: " + tr.status + " (" + tr.reason + ")\n");
    std::snprintf(buf, sizeof buf,
                  "steps %lld  final loss %.4f  final val loss %.4f  best val loss %.4f\n",
                  (long long)tr.steps, tr.finalLoss, tr.finalValLoss, tr.bestValLoss);
    human_.put(buf);
    if (std::isfinite(tr.accuracy)) {
      std::snprintf(buf, sizeof buf, "exact-match accuracy %.1f%%\n", 100 * tr.accuracy);
      human_.put(buf);
    }
    std::snprintf(buf, sizeof buf, "throughput %.0f tokens/s  peak memory %s (tracked)\n",
                  tr.tokensPerSecond, fmtBytes(double(tr.peakBytes)).c_str());
    human_.put(buf);
    if (!tr.lastCheckpoint.empty()) human_.put("checkpoint " + tr.lastCheckpoint + "\n");
  }

  const RunOptions& o_;
  const int world_, worldRank_;
  const bool root_;
  const int eventFd_;
  engine::EventWriter writer_;
  HumanPrinter human_;
  core::EventEncoder encoder_;
  std::unique_ptr<core::RunRecorder> recorder_;
  std::vector<std::string> beforeRecorder_;  // hello etc., recorded once the recorder exists
  core::ValidationContext ctx_;
  core::RunConfig config_;
  core::RunRecorder::Options ro_;
  std::unique_ptr<kernels::Backend> backend_;
  std::unique_ptr<engine::Communicator> bootstrap_, comm_;  // comm_ (NCCL) goes first
  bool ranksLost_ = false;
};

int runMain(const RunOptions& o) {
  engine::ensurePassiveOmpWaitPolicy();
  // Ranks: started by mpirun (one process per rank), or relaunched under it.
  if (engine::launcherWorldSize() == 1) {
    core::ValidationContext pre;
    pre.check_files = true;
    auto cfg = core::loadConfigWithOverrides(o.config, o.sets, pre);
    if (cfg.ok() && cfg.config->parallel.ranks > 1) {
      const std::string dbPath = o.db.empty() ? core::defaultDatabasePath() : o.db;
      relaunchUnderMpirun(o, o.runDir.empty() ? defaultRunDir(dbPath, cfg.config->name) : o.runDir,
                          cfg.config->parallel.ranks, cfg.config->parallel.hostfile);
      return kExitRunFailed;  // exec failed (said why)
    }
  }
  return EngineRun(o).run();
}

}  // namespace

void addRunCommand(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Train a model from a run config, streaming NDJSON events");
  cmd->add_option("config", opts->config, "Run config (JSON)")->required();
  cmd->add_option("--db", opts->db, "Run database (default: $TRAINSCOPE_DB or the user data dir)");
  cmd->add_option("--run-dir", opts->runDir,
                  "Directory for events.ndjson and checkpoints (default: next to the database)");
  // One value per --set, so `run --set a=1 CONFIG` leaves CONFIG to the positional (CLI11 2.1
  // otherwise lets a vector option swallow it).
  cmd->add_option("--set", opts->sets, "Override a config field: key.path=value (repeatable)")
      ->take_all()
      ->allow_extra_args(false);
  cmd->add_option("--resume", opts->resume,
                  "Continue from a checkpoint directory (or its state.json)");
  cmd->add_flag("--human", opts->human, "Readable progress lines and a summary instead of NDJSON");
  cmd->callback([opts, &exitCode] {
    try {
      exitCode = runMain(*opts);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainscope-engine run: error: %s\n", e.what());
      exitCode = kExitRunFailed;
    }
  });
}

}  // namespace ts::app
