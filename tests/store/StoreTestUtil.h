#pragma once
// Helpers for the store tests: temporary directories, child processes, event files.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace ts::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ts-store-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto& e : fs::recursive_directory_iterator(path_, ec))
      if (e.is_directory(ec))
        fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

// A child process with its stdout on a pipe.
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe(fds) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      wait();
    }
    if (out_) fclose(out_);
  }
  pid_t pid() const { return pid_; }
  // Next stdout line without the newline; false at end of output.
  bool readLine(std::string& line) {
    line.clear();
    if (!out_) return false;
    int c;
    while ((c = fgetc(out_)) != EOF && c != '\n') line += static_cast<char>(c);
    return c != EOF || !line.empty();
  }
  std::string readAll() {
    std::string all, line;
    while (readLine(line)) all += line + "\n";
    return all;
  }
  void kill9() { kill(pid_, SIGKILL); }
  // Exit status (or 128 + signal).
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = 0;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

inline double driverLoss(int64_t step) {
  return 2.0 + std::sin(0.01 * static_cast<double>(step));
}

inline std::vector<nlohmann::json> readNdjson(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

inline int64_t countType(const std::vector<nlohmann::json>& events, const std::string& type) {
  int64_t n = 0;
  for (auto& e : events) n += e.value("type", "") == type;
  return n;
}

}  // namespace ts::test
