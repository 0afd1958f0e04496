// EventWriter: many producer threads, a reader on a pipe that is slow or gone. Every line a
// write() accepted reaches the reader whole and in its producer's order; droppable lines beyond
// the bound are dropped and counted, never others; a vanished reader turns the writer into a sink.
// Also built under ThreadSanitizer (tests/tsan).
#include "trainscope/engine/train/EventWriter.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../support/WaitUntil.h"

namespace ts::engine {
namespace {

// A pipe whose ends close with the test.
struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    closeRead();
    closeWrite();
  }
  void closeRead() {
    if (read >= 0) ::close(read);
    read = -1;
  }
  void closeWrite() {
    if (write >= 0) ::close(write);
    write = -1;
  }
};

// Reads the pipe to its end on a thread of its own, in small pieces, once allowed to start.
class Reader {
 public:
  explicit Reader(int fd) : thread_([this, fd] { loop(fd); }) {}
  ~Reader() { join(); }
  void start() { go_.store(true); }
  // Everything read, once the write end is closed.
  const std::string& join() {
    start();
    if (thread_.joinable()) thread_.join();
    return data_;
  }

 private:
  void loop(int fd) {
    while (!go_.load()) std::this_thread::yield();
    char buf[256];  // small reads: the writer keeps meeting a full pipe
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      data_.append(buf, static_cast<size_t>(n));
      std::this_thread::yield();
    }
  }
  std::atomic<bool> go_{false};
  std::string data_;
  std::thread thread_;
};

std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t nl; (nl = s.find('\n', begin)) != std::string::npos; begin = nl + 1)
    lines.push_back(s.substr(begin, nl - begin));
  EXPECT_EQ(begin, s.size()) << "output ends inside a line";
  return lines;
}

// "<kind> <producer> <index> <padding>": kind s (always kept) or k (droppable).
std::string line(char kind, int producer, int index, size_t pad) {
  return std::string(1, kind) + " " + std::to_string(producer) + " " + std::to_string(index) + " " +
         std::string(pad, 'x') + "\n";
}

// Pipe buffer as small as Linux allows (a page), so the writer meets a full pipe early.
void shrinkPipe(int fd) {
  ASSERT_EQ(::fcntl(fd, F_SETPIPE_SZ, 4096), 4096);
}

struct Accepted {
  std::vector<int> kept;       // indices of `s` lines, in the order written
  std::vector<int> droppable;  // indices of `k` lines write() accepted
  int refused = 0;             // `k` lines write() returned false for
};

// Checks the reader's output against what the producers were told was accepted: every accepted
// line exactly once, whole, in its producer's order; nothing else.
void expectDelivered(const std::string& out, const std::vector<Accepted>& accepted) {
  std::map<std::pair<char, int>, std::vector<int>> seen;
  for (const std::string& l : splitLines(out)) {
    char kind = 0;
    int producer = -1, index = -1;
    ASSERT_EQ(std::sscanf(l.c_str(), "%c %d %d", &kind, &producer, &index), 3) << l;
    ASSERT_TRUE(kind == 's' || kind == 'k') << l;
    ASSERT_EQ(l.find_first_not_of('x', l.rfind(' ') + 1), std::string::npos) << "torn: " << l;
    seen[{kind, producer}].push_back(index);
  }
  for (int p = 0; p < static_cast<int>(accepted.size()); ++p) {
    EXPECT_EQ((seen[{'s', p}]), accepted[p].kept) << "producer " << p;
    EXPECT_EQ((seen[{'k', p}]), accepted[p].droppable) << "producer " << p;
  }
}

TEST(EventWriter, ManyProducersSlowReaderDropOnlyDroppableLines) {
  Pipe pipe;
  ASSERT_NO_FATAL_FAILURE(shrinkPipe(pipe.write));
  Reader reader(pipe.read);
  constexpr int kProducers = 8, kLines = 300;
  constexpr size_t kMaxDroppable = 4;
  std::vector<Accepted> accepted(kProducers);
  {
    EventWriter writer(pipe.write, kMaxDroppable);
    auto produce = [&](int p, int from, int to) {
      for (int i = from; i < to; ++i) {
        // Alternating: a kept line (step event), then a droppable one (a timeline batch).
        ASSERT_TRUE(writer.write(line('s', p, i, 40 + i % 50)));
        accepted[p].kept.push_back(i);
        if (writer.write(line('k', p, i, 20), true))
          accepted[p].droppable.push_back(i);
        else
          ++accepted[p].refused;
      }
    };
    auto round = [&](int from, int to) {
      std::vector<std::thread> producers;
      for (int p = 0; p < kProducers; ++p) producers.emplace_back(produce, p, from, to);
      for (auto& t : producers) t.join();
    };
    // First with nobody reading: the 4 KiB pipe fills after a few dozen lines and the rest
    // queue up, so all but a handful of the droppable lines must be refused.
    round(0, kLines);
    int refused = 0;
    for (const auto& a : accepted) refused += a.refused;
    EXPECT_GT(refused, kProducers * kLines - 300);
    EXPECT_EQ(writer.dropped(), refused);
    // Then while the reader drains the backlog in small reads.
    reader.start();
    round(kLines, 2 * kLines);
    refused = 0;
    for (const auto& a : accepted) refused += a.refused;
    EXPECT_EQ(writer.dropped(), refused);
    writer.close();  // returns once every queued line is in the pipe
    EXPECT_FALSE(writer.readerGone());
  }
  pipe.closeWrite();
  expectDelivered(reader.join(), accepted);
}

TEST(EventWriter, CloseFlushesEverythingQueuedAndIsIdempotent) {
  Pipe pipe;
  ASSERT_NO_FATAL_FAILURE(shrinkPipe(pipe.write));
  Reader reader(pipe.read);
  std::vector<Accepted> accepted(1);
  EventWriter writer(pipe.write, 2);
  // Far more than the pipe holds, queued while nobody reads; close() must still deliver it all.
  for (int i = 0; i < 2000; ++i) {
    EXPECT_TRUE(writer.write(line('s', 0, i, 30)));
    accepted[0].kept.push_back(i);
  }
  // Nobody reads yet: all of it waits but what the 4 KiB pipe took (lines over 30 bytes) and the
  // one line in the writer's hands.
  EXPECT_LE(writer.highWater(), 2000u);
  EXPECT_GE(writer.highWater(), 2000u - 4096 / 30 - 1);
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    writer.close();
    closed = true;
  });
  reader.start();
  closer.join();
  EXPECT_TRUE(closed);
  EXPECT_FALSE(writer.write(line('s', 0, 2000, 30))) << "a write after close is refused";
  writer.close();  // again: nothing happens, nothing is written twice
  EXPECT_EQ(writer.dropped(), 0);
  pipe.closeWrite();
  expectDelivered(reader.join(), accepted);
}

// close() while producers still write: whatever write() accepted is delivered, the rest refused.
TEST(EventWriter, CloseDuringWritesDeliversEveryAcceptedLine) {
  Pipe pipe;
  Reader reader(pipe.read);
  reader.start();
  constexpr int kProducers = 6;
  std::vector<Accepted> accepted(kProducers);
  std::atomic<int> written{0};
  EventWriter writer(pipe.write);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0;; ++i) {
        if (!writer.write(line('s', p, i, 10))) return;  // closed
        accepted[p].kept.push_back(i);
        ++written;
      }
    });
  EXPECT_TRUE(
      testsupport::waitUntil([&] { return written.load() >= 2000; }, testsupport::kWaitCapMs, 1));
  writer.close();
  for (auto& t : producers) t.join();
  pipe.closeWrite();
  expectDelivered(reader.join(), accepted);
}

// The GUI went away: writes fail with EPIPE, the writer discards from then on and never blocks.
TEST(EventWriter, ReaderGoneTurnsTheWriterIntoASink) {
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &old);  // as the engine runs (RunCommand)
  {
    Pipe pipe;
    pipe.closeRead();
    EventWriter writer(pipe.write, 4);
    EXPECT_TRUE(writer.write(line('s', 0, 0, 10)));
    EXPECT_TRUE(
        testsupport::waitUntil([&] { return writer.readerGone(); }, testsupport::kWaitCapMs, 1));
    std::vector<std::thread> producers;
    for (int p = 0; p < 4; ++p)
      producers.emplace_back([&, p] {
        for (int i = 0; i < 500; ++i) EXPECT_TRUE(writer.write(line('s', p, i, 100)));
      });
    for (auto& t : producers) t.join();
    writer.close();  // returns: nothing is waiting on a reader
    EXPECT_TRUE(writer.readerGone());
    EXPECT_EQ(writer.dropped(), 0) << "discarded after EPIPE, not counted as dropped";
  }
  ::sigaction(SIGPIPE, &old, nullptr);
}

}  // namespace
}  // namespace ts::engine
