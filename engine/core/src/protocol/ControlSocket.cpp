#include "trainscope/core/protocol/ControlSocket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace ts::core {
namespace {

constexpr size_t kMaxLine = 64 * 1024;  // a command is a few bytes; more is not a command
constexpr size_t kMaxClients = 16;

// A socket address for `path`. sun_path holds 107 bytes and run folders can be deeper, so a
// long path goes through /proc/self/fd/N of the opened folder (Linux resolves it for bind and
// connect alike). dirFd keeps that folder open until the call is made.
struct Address {
  sockaddr_un addr{};
  int dirFd = -1;
  Address(const Address&) = delete;
  Address() = default;
  ~Address() {
    if (dirFd >= 0) ::close(dirFd);
  }
};

bool makeAddress(const std::string& runDir, Address& a) {
  a.addr.sun_family = AF_UNIX;
  std::string p = controlSocketPath(runDir);
  if (p.size() >= sizeof a.addr.sun_path) {
    a.dirFd = ::open(runDir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (a.dirFd < 0) return false;
    p = "/proc/self/fd/" + std::to_string(a.dirFd) + "/control.sock";
  }
  std::memcpy(a.addr.sun_path, p.c_str(), p.size() + 1);
  return true;
}

// A connected client socket, or nullopt with errno set.
std::optional<int> connectTo(const std::string& runDir) {
  Address a;
  if (!makeAddress(runDir, a)) return std::nullopt;
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), sizeof a.addr) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return std::nullopt;
  }
  return fd;
}

}  // namespace

std::string controlSocketPath(const std::string& runDir) {
  return runDir + "/control.sock";
}

ControlServer::ControlServer(const std::string& runDir) : path_(controlSocketPath(runDir)) {
  auto fail = [&](const std::string& what) {
    const std::string msg = "control socket " + path_ + ": " + what + ": " + std::strerror(errno);
    if (listenFd_ >= 0) ::close(listenFd_);
    listenFd_ = -1;
    throw std::runtime_error(msg);
  };
  Address a;
  if (!makeAddress(runDir, a)) fail("cannot open the run folder");
  listenFd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listenFd_ < 0) fail("socket");
  auto bindIt = [&] {
    return ::bind(listenFd_, reinterpret_cast<const sockaddr*>(&a.addr), sizeof a.addr) == 0;
  };
  if (!bindIt()) {
    if (errno != EADDRINUSE) fail("bind");
    // A file is there: an engine that died left it, or one is alive in this folder.
    if (auto other = connectTo(runDir)) {
      ::close(*other);
      errno = EADDRINUSE;
      fail("another engine is running in this run folder");
    }
    ::unlink(path_.c_str());
    if (!bindIt()) fail("bind");
  }
  // Owner only: whoever can connect can stop the run.
  ::chmod(path_.c_str(), 0600);
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) inode_ = st.st_ino;
  if (::listen(listenFd_, 8) != 0) fail("listen");
}

ControlServer::~ControlServer() {
  for (auto& c : clients_) ::close(c.fd);
  if (listenFd_ >= 0) ::close(listenFd_);
  // Only our own file: a later engine in the same folder may have replaced it.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_ino == inode_) ::unlink(path_.c_str());
}

void ControlServer::addPollFds(std::vector<pollfd>& fds) const {
  fds.push_back({listenFd_, POLLIN, 0});
  for (const auto& c : clients_) fds.push_back({c.fd, POLLIN, 0});
}

void ControlServer::service(const pollfd* fds, size_t count,
                            const std::function<void(const std::string&)>& onLine) {
  // Clients first (their indices match clients_ as addPollFds listed them), then accept.
  std::vector<size_t> closed;
  for (size_t i = 1; i < count && i - 1 < clients_.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    Client& c = clients_[i - 1];
    char chunk[4096];
    const ssize_t n = ::read(c.fd, chunk, sizeof chunk);
    if (n <= 0) {
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      // A last line without "\n" still counts: `echo -n stop | nc -U` is a command.
      if (c.buffer.find_first_not_of(" \t\r") != std::string::npos) onLine(c.buffer);
      closed.push_back(i - 1);
      continue;
    }
    c.buffer.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = c.buffer.find('\n')) != std::string::npos) {
      std::string line = c.buffer.substr(0, nl);
      c.buffer.erase(0, nl + 1);
      if (line.find_first_not_of(" \t\r") != std::string::npos) onLine(line);
    }
    if (c.buffer.size() > kMaxLine) closed.push_back(i - 1);
  }
  for (auto it = closed.rbegin(); it != closed.rend(); ++it) {
    ::close(clients_[*it].fd);
    clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(*it));
  }
  if (count > 0 && (fds[0].revents & POLLIN)) {
    for (;;) {
      const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      if (clients_.size() >= kMaxClients) {
        ::close(fd);  // a flood of idle connections must not starve the ones that send
        continue;
      }
      clients_.push_back({fd, {}});
    }
  }
}

std::string sendControlLine(const std::string& runDir, const std::string& line) {
  auto fd = connectTo(runDir);
  if (!fd) {
    if (errno == ENOENT || errno == ECONNREFUSED || errno == ENOTDIR)
      return "no engine is listening on " + controlSocketPath(runDir) +
             " (the run finished or crashed, or its engine predates control sockets)";
    return "cannot reach " + controlSocketPath(runDir) + ": " + std::strerror(errno);
  }
  std::string msg = line;
  if (msg.empty() || msg.back() != '\n') msg += '\n';
  size_t off = 0;
  std::string err;
  while (off < msg.size()) {
    const ssize_t n = ::send(*fd, msg.data() + off, msg.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // a full socket buffer: wait briefly for the engine to read
        pollfd p{*fd, POLLOUT, 0};
        if (::poll(&p, 1, 1000) > 0) continue;
      }
      err = "sending to " + controlSocketPath(runDir) + ": " + std::strerror(errno);
      break;
    }
    off += static_cast<size_t>(n);
  }
  ::close(*fd);
  return err;
}

bool controlListening(const std::string& runDir) {
  auto fd = connectTo(runDir);
  if (!fd) return false;
  ::close(*fd);
  return true;
}

}  // namespace ts::core
