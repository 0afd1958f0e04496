#pragma once
// Shared helpers for validation_tests: in-process training runs that record every event, and a
// child process for the real `trainscope-engine` binary with pipes on stdin/stdout.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../support/TrainerHarness.h"
#include "../support/WaitUntil.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/Backend.h"

namespace ts::validation {

namespace fs = std::filesystem;

inline fs::path tempDir(const std::string& name) {
  return testsupport::tempDir("validation", name);
}

using testsupport::Recorded;

// Runs `config` in-process on the CPU backend; every event lands in `rec`. `onEvent` (optional)
// sees each event with the trainer, e.g. to post commands mid-run.
inline engine::TrainResult runInProcess(
    const core::RunConfig& config, Recorded& rec, const std::string& runDir,
    std::function<void(engine::Trainer&, core::EventType, const nlohmann::json&)> onEvent = {}) {
  testsupport::RunOptions o;
  o.evalBatches = 1;
  o.exactMatchSamples = 2;
  o.onEvent = std::move(onEvent);
  return testsupport::runTrainer(config, rec, runDir, o);
}

// The real binary with stdin/stdout pipes; stderr is inherited.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1;
  std::string buffer;
  std::vector<std::string> lines;

  // Reads until a line satisfies `pred` (true) or EOF/timeout (false).
  bool readUntil(const std::function<bool(const std::string&)>& pred,
                 double seconds = ::testsupport::kWaitCapMs / 1000.0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        lines.push_back(buffer.substr(0, nl));
        buffer.erase(0, nl + 1);
        if (pred && pred(lines.back())) return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char chunk[4096];
      ssize_t n = ::read(out, chunk, sizeof chunk);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
  }
  void send(const std::string& line) {
    const std::string s = line + "\n";
    if (in >= 0) (void)!::write(in, s.data(), s.size());
  }
  // Closes stdin, reads to EOF (or kills the child after `seconds`), returns the exit code.
  int wait(double seconds = ::testsupport::kWaitCapMs / 1000.0) {
    if (in >= 0) ::close(in);
    in = -1;
    if (!readUntil(nullptr, seconds) && !buffer.empty()) lines.push_back(buffer);
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    ::close(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::vector<nlohmann::json> events() const {
    std::vector<nlohmann::json> v;
    for (const auto& l : lines) {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (!j.is_discarded()) v.push_back(std::move(j));
    }
    return v;
  }
};

// `env`: NAME=value entries added to the child's environment (e.g. LD_PRELOAD of a shim).
inline Child spawn(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  int outPipe[2], inPipe[2];
  Child c;
  if (::pipe(outPipe) != 0 || ::pipe(inPipe) != 0) return c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(inPipe[0], 0);
    ::dup2(outPipe[1], 1);
    ::close(outPipe[0]);
    ::close(inPipe[1]);
    for (const auto& e : env) {
      const size_t eq = e.find('=');
      if (eq != std::string::npos) ::setenv(e.substr(0, eq).c_str(), e.c_str() + eq + 1, 1);
    }
    std::vector<std::string> copy = args;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(outPipe[1]);
  ::close(inPipe[0]);
  c.out = outPipe[0];
  c.in = inPipe[1];
  return c;
}

}  // namespace ts::validation
