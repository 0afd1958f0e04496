// The control socket in a run folder (ControlSocket.h): lines in as sent, from several clients,
// in any chunking; run folders deeper than sun_path allows; a file left by a dead engine is
// replaced, a live one is not; the socket goes with its server.
#include "trainscope/core/protocol/ControlSocket.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "trainscope/core/protocol/Protocol.h"

namespace fs = std::filesystem;
using ts::core::ControlServer;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ts_control_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Polls the server until `want` lines arrived or two seconds of no progress passed.
std::vector<std::string> serve(ControlServer& server, size_t want) {
  std::vector<std::string> lines;
  auto last = std::chrono::steady_clock::now();
  while (lines.size() < want && std::chrono::steady_clock::now() - last < std::chrono::seconds(2)) {
    std::vector<pollfd> fds;
    server.addPollFds(fds);
    if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
    const size_t before = lines.size();
    server.service(fds.data(), fds.size(), [&](const std::string& l) { lines.push_back(l); });
    if (lines.size() != before) last = std::chrono::steady_clock::now();
  }
  return lines;
}

// A raw client that writes `parts` one by one (to split lines across reads).
void sendRaw(const fs::path& sock, const std::vector<std::string>& parts, ControlServer& server,
             std::vector<std::string>& got, size_t want) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path, sizeof a.sun_path, "%s", sock.c_str());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  for (const auto& p : parts) {
    ASSERT_EQ(::write(fd, p.data(), p.size()), static_cast<ssize_t>(p.size()));
    // One service pass per write, so the server reads each chunk on its own.
    std::vector<pollfd> fds;
    server.addPollFds(fds);
    ::poll(fds.data(), fds.size(), 50);
    server.service(fds.data(), fds.size(), [&](const std::string& l) { got.push_back(l); });
  }
  ::close(fd);
  auto rest = serve(server, want - std::min(want, got.size()));
  got.insert(got.end(), rest.begin(), rest.end());
}

}  // namespace

TEST(ControlSocket, CommandsArriveAsSentAndDecodeLikeStdin) {
  TempDir dir;
  ControlServer server(dir.path.string());
  EXPECT_EQ(server.path(), (dir.path / "control.sock").string());
  EXPECT_TRUE(fs::is_socket(server.path()));
  EXPECT_EQ(fs::status(server.path()).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write)
      << "whoever can connect can stop the run: owner only";
  EXPECT_TRUE(ts::core::controlListening(dir.path.string()));

  ts::core::Command profile;
  profile.type = ts::core::CommandType::Profile;
  profile.steps = 7;
  EXPECT_EQ(ts::core::sendControlLine(dir.path.string(), "pause"), "");
  EXPECT_EQ(ts::core::sendControlLine(dir.path.string(), ts::core::encodeCommand(profile)), "");
  const auto lines = serve(server, 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(ts::core::decodeCommand(lines[0]).type, ts::core::CommandType::Pause);
  const auto p = ts::core::decodeCommand(lines[1]);
  EXPECT_EQ(p.type, ts::core::CommandType::Profile);
  EXPECT_EQ(p.steps, 7);
}

TEST(ControlSocket, LinesSplitAcrossWritesSeveralPerWriteAndALastOneWithoutNewline) {
  TempDir dir;
  ControlServer server(dir.path.string());
  std::vector<std::string> got;
  sendRaw(dir.path / "control.sock", {"st", "op\ncheckpoint\n\n  \nres", "ume"}, server, got, 3);
  EXPECT_EQ(got, (std::vector<std::string>{"stop", "checkpoint", "resume"}));
}

TEST(ControlSocket, ARunFolderDeeperThanSunPathStillWorks) {
  TempDir dir;
  fs::path deep = dir.path;
  while (deep.string().size() < 200) deep /= "a-rather-long-folder-name";
  fs::create_directories(deep);
  ASSERT_GT((deep / "control.sock").string().size(), sizeof(sockaddr_un::sun_path));
  ControlServer server(deep.string());
  EXPECT_TRUE(fs::is_socket(deep / "control.sock"));
  EXPECT_EQ(ts::core::sendControlLine(deep.string(), "stop"), "");
  const auto lines = serve(server, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "stop");
}

TEST(ControlSocket, AStaleFileIsReplacedALiveServerIsNot) {
  TempDir dir;
  {
    // A socket file nobody listens on, as a killed engine leaves it.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::snprintf(a.sun_path, sizeof a.sun_path, "%s", (dir.path / "control.sock").c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ::close(fd);
  }
  ASSERT_TRUE(fs::exists(dir.path / "control.sock"));
  EXPECT_FALSE(ts::core::controlListening(dir.path.string()));
  EXPECT_NE(ts::core::sendControlLine(dir.path.string(), "stop").find("no engine is listening"),
            std::string::npos);
  {
    ControlServer server(dir.path.string());
    EXPECT_TRUE(ts::core::controlListening(dir.path.string()));
    try {
      ControlServer second(dir.path.string());
      ADD_FAILURE() << "a second server took over a live one";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("another engine is running"), std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(ts::core::controlListening(dir.path.string())) << "the refusal broke the first";
  }
  EXPECT_FALSE(fs::exists(dir.path / "control.sock")) << "the socket outlived its server";
  EXPECT_FALSE(ts::core::controlListening(dir.path.string()));
}

TEST(ControlSocket, NothingListensInAFolderThatDoesNotExist) {
  const std::string err = ts::core::sendControlLine("/nonexistent/run/folder", "stop");
  EXPECT_NE(err.find("/nonexistent/run/folder/control.sock"), std::string::npos) << err;
  EXPECT_THROW(ControlServer("/nonexistent/run/folder"), std::runtime_error);
}
