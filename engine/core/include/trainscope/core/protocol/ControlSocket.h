#pragma once
// The control channel of a running engine: a Unix socket in its run folder (`control.sock`)
// that takes the same command lines as stdin (docs/protocol.md). Any process that sees the run
// folder (the app reopened after "Keep running", `trainscope-engine runs stop`) can pause,
// resume, stop, checkpoint or profile a run it did not start.
#include <functional>
#include <string>
#include <vector>

struct pollfd;

namespace ts::core {

// runDir + "/control.sock".
std::string controlSocketPath(const std::string& runDir);

// Rank 0 of a run listens here. The socket file is created owner-only and removed when the
// server goes; a file left by an engine that died is replaced.
class ControlServer {
 public:
  // Throws std::runtime_error naming the path when it cannot listen (another live engine
  // listens in the same run folder, the folder is not writable).
  explicit ControlServer(const std::string& runDir);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  const std::string& path() const { return path_; }
  // Appends the descriptors to wait on (the listening socket and every connected client).
  void addPollFds(std::vector<pollfd>& fds) const;
  // Accepts and reads what poll() reported on the descriptors addPollFds() added (fds points
  // at the first of them); each complete, non-blank line goes to onLine.
  void service(const pollfd* fds, size_t count,
               const std::function<void(const std::string&)>& onLine);

 private:
  struct Client {
    int fd;
    std::string buffer;
  };
  std::string path_;
  int listenFd_ = -1;
  unsigned long inode_ = 0;  // ours: removed on destruction only if still this file
  std::vector<Client> clients_;
};

// Sends one command line ("\n" added when missing) to the engine listening in runDir. Returns ""
// when it was delivered, else why not in words (no engine listens there: it finished, crashed,
// or was started before control sockets existed).
std::string sendControlLine(const std::string& runDir, const std::string& line);
// True when an engine accepts connections in runDir (nothing is sent).
bool controlListening(const std::string& runDir);

}  // namespace ts::core
