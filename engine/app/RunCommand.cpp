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
#include <thread>

#include "Commands.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/engine/platform/Capabilities.h"
#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/train/EventWriter.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/GuardedCpuBackend.h"
#if __has_include("trainscope/core/Estimator.h")
#include "trainscope/core/plan/Estimator.h"
#define TRAINSCOPE_HAVE_ESTIMATOR 1
#endif

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

std::string fmtDuration(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string fmtBytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, u[i]);
  return buf;
}

// Readable progress for `scripts/trainscope run` headless.
class HumanPrinter {
 public:
  explicit HumanPrinter(int fd) : fd_(fd) {}
  void onEvent(core::EventType t, const nlohmann::json& f) {
    char buf[512];
    switch (t) {
      case core::EventType::Step: {
        const int64_t step = f.value("step", int64_t(0)),
                      total = f.value("total_steps", int64_t(0));
        const double tps = f.value("tokens_per_s", 0.0);
        sumMs_ += f.value("step_ms", 0.0);
        ++n_;
        const int64_t every = std::max<int64_t>(1, total / 25);
        if (step % every != 0 && step != total && step != 1) return;
        const double eta = n_ > 0 ? (total - step) * (sumMs_ / n_) / 1000.0 : 0;
        std::snprintf(buf, sizeof buf,
                      "step %6lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  ETA %s\n",
                      (long long)step, (long long)total, f.value("loss", 0.0), f.value("lr", 0.0),
                      f.value("grad_norm", 0.0), tps, fmtDuration(eta).c_str());
        put(buf);
        break;
      }
      case core::EventType::Eval: {
        std::string line = "eval  step " + std::to_string(f.value("step", int64_t(0)));
        if (f.contains("val_loss")) {
          std::snprintf(buf, sizeof buf, "  val_loss %.4f", f["val_loss"].get<double>());
          line += buf;
        }
        if (f.contains("accuracy")) {
          std::snprintf(buf, sizeof buf, "  exact-match %.1f%%", 100 * f["accuracy"].get<double>());
          line += buf;
        }
        put(line + "\n");
        break;
      }
      case core::EventType::Checkpoint:
        put("checkpoint  " + f.value("path", std::string()) + "\n");
        break;
      case core::EventType::Warning:
        put("warning: " + f.value("message", std::string()) + "\n");
        break;
      case core::EventType::Error:
        put("error: " + f.value("message", std::string()) + "\n");
        break;
      case core::EventType::Log:
        put(f.value("message", std::string()) + "\n");
        break;
      default:
        break;
    }
  }
  void put(const std::string& s) {
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  double sumMs_ = 0;
  int64_t n_ = 0;
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

int runMain(const RunOptions& o) {
  engine::ensurePassiveOmpWaitPolicy();
  // Ranks: started by mpirun (one process per rank), or relaunched under it.
  const int world = engine::launcherWorldSize();
  if (world == 1) {
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
  const int worldRank = engine::launcherWorldRank();
  const bool root = worldRank == 0;
  // Only events may reach fd 1: keep a private copy of it for the writer and point fd 1 at
  // stderr, so anything a library prints lands there.
  std::fflush(stdout);
  const int eventFd = ::dup(STDOUT_FILENO);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  engine::EventWriter writer(eventFd < 0 ? STDERR_FILENO : eventFd);
  HumanPrinter human(eventFd < 0 ? STDERR_FILENO : eventFd);
  core::EventEncoder encoder;
  std::unique_ptr<core::RunRecorder> recorder;
  std::vector<std::string> beforeRecorder;  // hello etc., recorded once the recorder exists

  auto emit = [&](core::EventType type, nlohmann::json fields, bool droppable) {
    if (!root) {
      // Rank 0 alone writes events and the run store; the others only say what went wrong.
      if (type == core::EventType::Error || type == core::EventType::Warning)
        std::fprintf(stderr, "rank %d: %s: %s\n", worldRank,
                     type == core::EventType::Error ? "error" : "warning",
                     fields.value("message", std::string()).c_str());
      return;
    }
    if (o.human) human.onEvent(type, fields);
    std::string line = encoder.encode(type, std::move(fields));
    if (recorder)
      recorder->record(nlohmann::json::parse(line, nullptr, false));
    else
      beforeRecorder.push_back(line);
    if (!o.human) writer.write(std::move(line), droppable);
    if (recorder && type != core::EventType::Warning) {
      for (auto& w : recorder->takeWarnings()) {
        std::string wl = encoder.encode(core::EventType::Warning, {{"message", w}});
        recorder->record(nlohmann::json::parse(wl, nullptr, false));
        if (o.human)
          human.onEvent(core::EventType::Warning, {{"message", w}});
        else
          writer.write(std::move(wl));
      }
    }
  };
  auto finish = [&](const std::string& status, const std::string& reason, int code) {
    emit(core::EventType::Finished, {{"status", status}, {"reason", reason}, {"exit_code", code}},
         false);
    if (recorder) recorder->close();
    writer.close();
    return code;
  };

  // hello first, whatever happens next.
  core::ValidationContext ctx;
  std::string why;
  ctx.check_backend = true;
  ctx.check_files =
      world == 1;  // under mpirun the hostfile did its work (and is not on every host)
  {
    auto caps = engine::capabilitiesJson();
    for (const auto& b : caps["backends"])
      if (b["name"] == "cuda") ctx.cuda_available = b.value("usable", false);
    nlohmann::json hello = {{"protocol_version", core::kProtocolVersion},
                            {"engine_version", TRAINSCOPE_VERSION},
                            {"pid", ::getpid()},
                            {"ranks", world},
                            {"devices", caps["devices"]},
                            {"capabilities", caps},
                            // what precision.gemm auto means here, and how it was decided
                            {"gemm_auto", caps["precisions"]["bf16"]["gemm_calibration"]}};
    // The backend is known only after the config; announce the default choice.
    hello["backend"] = ctx.cuda_available ? "cuda" : "cpu";
    emit(core::EventType::Hello, hello, false);
  }

  auto result = core::loadConfigWithOverrides(o.config, o.sets, ctx);
  if (!result.ok()) {
    std::string msg = "invalid config " + o.config + ":";
    nlohmann::json issues = nlohmann::json::array();
    for (const auto& i : result.issues) {
      msg += "\n  " + i.toString();
      issues.push_back({{"path", i.path}, {"value", i.value}, {"message", i.message}});
    }
    emit(core::EventType::Error, {{"message", msg}, {"issues", issues}, {"fatal", true}}, false);
    std::fprintf(stderr, "%s\n", msg.c_str());
    return finish("failed", "invalid config", kExitBadInput);
  }
  core::RunConfig config = *result.config;

  core::RunRecorder::Options ro;
  ro.dbPath = o.db.empty() ? core::defaultDatabasePath() : o.db;
  ro.runDir = o.runDir.empty() ? defaultRunDir(ro.dbPath, config.name) : o.runDir;
  ro.name = config.name;
  auto backend = kernels::makeBackend(config.device.backend, &why);
  // Tests only (docs/testing.md): the guarded CPU backend in place of the CPU one, so the real
  // binary's paths (ZeRO under mpirun, offload) prove they reach memory as a GPU run must.
  if (const char* t = std::getenv("TRAINSCOPE_TEST_BACKEND");
      t && std::string(t) == "cpu-guarded" && backend && backend->name() == "cpu")
    backend = kernels::makeGuardedCpuBackend();
  if (!backend) {
    emit(core::EventType::Error,
         {{"message", "device.backend " + config.device.backend + " is not usable: " + why},
          {"fatal", true}},
         false);
    return finish("failed", "backend unavailable", kExitBadInput);
  }
  backend->setThreads(config.device.threads);
  ro.backend = backend->name();
  ro.ranks = world;
  std::unique_ptr<engine::Communicator> bootstrap, comm;  // comm (NCCL) goes first
  if (world > 1) {
    try {
      comm = engine::makeMpiCommunicator(backend.get());
      // GPU ranks talk through NCCL (one device per rank on each machine), bootstrapped over MPI.
      if (backend->kind() == kernels::DeviceKind::Cuda && engine::ncclCompiled()) {
        int local = 0;
        if (const char* l = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local = std::atoi(l);
        bootstrap = std::move(comm);
        comm = engine::makeNcclCommunicator(bootstrap.get(), local);
      }
    } catch (const std::exception& e) {
      emit(core::EventType::Error, {{"message", e.what()}, {"fatal", true}}, false);
      return finish("failed", "MPI did not start", kExitRunFailed);
    }
  }
  // The recorder sees events from here on; hello (already on stdout) is recorded first.
  if (root) recorder = std::make_unique<core::RunRecorder>(ro);
  if (recorder)
    for (const auto& line : beforeRecorder)
      recorder->record(nlohmann::json::parse(line, nullptr, false));
  beforeRecorder.clear();
  emit(core::EventType::Log,
       {{"message", "run directory " + ro.runDir + ", database " + ro.dbPath + ", backend " +
                        backend->name() + " with " + std::to_string(backend->threads()) +
                        " threads"},
        {"run_dir", ro.runDir},
        {"db", ro.dbPath},
        {"backend", backend->name()},
        {"threads", backend->threads()}},
       false);
  emit(core::EventType::Config,
       {{"config", core::toJson(config)}, {"run_id", recorder ? recorder->runId() : int64_t(0)}},
       false);
#ifdef TRAINSCOPE_HAVE_ESTIMATOR
  try {
    // vocab 0 means "from the data": resolve it as the trainer will, or the estimator falls
    // back to GPT-2's 50257 for the tiny built-in corpora. A data error is the trainer's to
    // report (with its file and field), so it only leaves the fallback here.
    core::RunConfig planConfig = config;
    // precision.gemm "auto" as the model resolves it on this backend.
    planConfig.precision.gemm = engine::useBf16Gemm(config, &*backend) ? "bf16" : "fp32";
    if (planConfig.model.vocab <= 0) {
      try {
        planConfig.model.vocab = engine::makeDataset(config)->vocabSize();
      } catch (const std::exception&) {
      }
    }
    core::EstimateOptions po;
    po.cpu_kernel_threads = backend->scratchThreads();  // as the model sizes its region
    if (!config.distill.teacher_checkpoint.empty()) {
      try {  // the teacher's own shape (an unreadable one is the trainer's to report)
        po.teacher_model = engine::modelConfigAt(config.distill.teacher_checkpoint);
      } catch (const std::exception&) {
      }
    }
    emit(core::EventType::MemoryPlan, core::memoryPlanJson(planConfig, po), false);
  } catch (const std::exception& e) {
    emit(core::EventType::Warning, {{"message", std::string("memory plan: ") + e.what()}}, false);
  }
#endif

  engine::TrainerOptions to;
  to.runDir = ro.runDir;
  to.resumePath = o.resume;
  to.interrupt = &g_interrupt;
  to.comm = comm.get();
  to.emit = [&](core::EventType t, nlohmann::json f, bool d) { emit(t, std::move(f), d); };
  engine::Trainer trainer(config, backend.get(), to);

  // stdin commands, polled so the reader can be stopped; EOF (GUI gone) just ends the reader.
  std::atomic<bool> readerStop{false};
  std::thread reader([&] {
    std::string buf;
    char chunk[4096];
    while (!readerStop.load()) {
      pollfd p{STDIN_FILENO, POLLIN, 0};
      int r = ::poll(&p, 1, 100);
      if (r <= 0) continue;
      ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n <= 0) return;
      buf.append(chunk, static_cast<size_t>(n));
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        trainer.post(core::decodeCommand(line));
      }
    }
  });

  engine::TrainResult tr;
  bool ranksLost = false;
  try {
    tr = trainer.run();
  } catch (const engine::CommError& e) {
    // Another rank died or hangs: record the failure with the newest checkpoint, then take the
    // whole job down (MPI_Finalize would wait for the lost rank).
    ranksLost = true;
    tr.status = "failed";
    tr.lastCheckpoint = newestCheckpoint(ro.runDir);
    tr.reason = std::string("a rank was lost: ") + e.what() + "; " +
                (tr.lastCheckpoint.empty()
                     ? "no checkpoint was written"
                     : "last checkpoint " + tr.lastCheckpoint + " (continue with --resume)");
    emit(core::EventType::Error, {{"message", tr.reason}, {"fatal", true}}, false);
  } catch (const std::exception& e) {
    tr.status = "failed";
    tr.reason = std::string("internal error: ") + e.what();
    emit(core::EventType::Error, {{"message", tr.reason}, {"fatal", true}}, false);
  }
  readerStop.store(true);
  reader.join();

  if (o.human && root) {
    char buf[256];
    human.put("\n== summary: " + tr.status + " (" + tr.reason + ")\n");
    std::snprintf(buf, sizeof buf,
                  "steps %lld  final loss %.4f  final val loss %.4f  best val loss %.4f\n",
                  (long long)tr.steps, tr.finalLoss, tr.finalValLoss, tr.bestValLoss);
    human.put(buf);
    if (std::isfinite(tr.accuracy)) {
      std::snprintf(buf, sizeof buf, "exact-match accuracy %.1f%%\n", 100 * tr.accuracy);
      human.put(buf);
    }
    std::snprintf(buf, sizeof buf, "throughput %.0f tokens/s  peak memory %s (tracked)\n",
                  tr.tokensPerSecond, fmtBytes(double(tr.peakBytes)).c_str());
    human.put(buf);
    if (!tr.lastCheckpoint.empty()) human.put("checkpoint " + tr.lastCheckpoint + "\n");
  }
  int code = kExitOk;
  if (tr.status == "failed")
    code = tr.badInput ? kExitBadInput : kExitRunFailed;
  else if (tr.status == "stopped" && tr.interrupted)
    code = kExitInterrupted;
  const int rc = finish(tr.status, tr.reason, code);
  if (ranksLost) engine::abortRanks(rc);
  return rc;
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
