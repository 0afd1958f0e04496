#pragma once
// Writes event lines to a file descriptor on its own thread, so a slow or vanished reader
// (a GUI that was closed, a full pipe) never stalls training. The queue is bounded for
// droppable lines only (`kernels` timeline batches): when more than `maxDroppable` of them wait,
// new ones are dropped and counted. Every other line (steps, evals, finished) is always queued.
// A reader that went away (EPIPE) turns the writer into a sink that discards.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace ts::engine {

class EventWriter {
 public:
  explicit EventWriter(int fd, size_t maxDroppable = 64);
  ~EventWriter();  // close()
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // Never blocks on the descriptor. Returns false when a droppable line was dropped.
  bool write(std::string line, bool droppable = false);
  // Writes everything queued, then stops the thread. Idempotent.
  void close();
  int64_t dropped() const;
  bool readerGone() const;
  // The most lines that ever waited at once: how far a slow reader fell behind while the
  // producers went on.
  size_t highWater() const;

 private:
  void loop();
  int fd_;
  size_t maxDroppable_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<std::string, bool>> queue_;
  size_t droppableQueued_ = 0;
  size_t highWater_ = 0;
  int64_t dropped_ = 0;
  bool closing_ = false;
  bool gone_ = false;
  std::thread thread_;
};

}  // namespace ts::engine
