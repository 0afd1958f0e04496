#include "trainscope/engine/train/EventWriter.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ts::engine {

EventWriter::EventWriter(int fd, size_t maxDroppable)
    : fd_(fd), maxDroppable_(maxDroppable), thread_([this] { loop(); }) {}

EventWriter::~EventWriter() {
  close();
}

bool EventWriter::write(std::string line, bool droppable) {
  {
    std::lock_guard lock(mutex_);
    if (closing_) return false;
    if (droppable) {
      if (droppableQueued_ >= maxDroppable_) {
        ++dropped_;
        return false;
      }
      ++droppableQueued_;
    }
    queue_.emplace_back(std::move(line), droppable);
    highWater_ = std::max(highWater_, queue_.size());
  }
  cv_.notify_one();
  return true;
}

void EventWriter::loop() {
  for (;;) {
    std::pair<std::string, bool> item;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty()) return;  // closing and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      if (item.second) --droppableQueued_;
      if (gone_) continue;
    }
    const std::string& s = item.first;
    size_t done = 0;
    while (done < s.size()) {
      ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        std::lock_guard lock(mutex_);
        gone_ = true;  // EPIPE or worse: nobody is reading; keep training, discard events
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
}

void EventWriter::close() {
  {
    std::lock_guard lock(mutex_);
    if (closing_ && !thread_.joinable()) return;
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t EventWriter::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

size_t EventWriter::highWater() const {
  std::lock_guard lock(mutex_);
  return highWater_;
}

bool EventWriter::readerGone() const {
  std::lock_guard lock(mutex_);
  return gone_;
}

}  // namespace ts::engine
