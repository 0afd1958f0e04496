#pragma once
// NVMe tier of ZeRO-Offload/Infinity: flat buffers (optimizer state, parameters) kept in files
// under parallel.nvme_path. Reads ahead and writes behind run on a small pool of I/O threads
// (pread/pwrite, no extra dependency), so the caller overlaps them with compute and waits only
// for the bytes it needs next.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::engine {

class OffloadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Flat buffers kept in files under a directory, read ahead and written behind by I/O threads.
// One store per directory (a per-rank subdirectory is the caller's choice): a second store with
// the same names there would replace this one's files.
class OffloadStore {
 public:
  struct Options {
    std::string dir;  // parallel.nvme_path
    int threads = 2;  // I/O threads (at least 1)
  };
  // Creates `dir` if its parent exists; checks it is a writable directory with room for every
  // buffer (statvfs), then creates one file per buffer at its full size (posix_fallocate, so a
  // full disk fails here, not mid-run). Throws OffloadError naming the directory and what is
  // wrong (parent "does not exist", "is not a directory", "is not writable", "needs X bytes, Y
  // free"). Files are "<name>.bin", opened O_CLOEXEC. A stale file of a previous (crashed) run is
  // removed and created anew: contents are never trusted across runs (the caller fills every
  // buffer before reading it; resuming always goes through checkpoints), so a crash cannot make
  // a run resume from half-written offloaded state.
  OffloadStore(Options options, const std::vector<std::pair<std::string, int64_t>>& buffers);
  ~OffloadStore();  // waits for I/O in flight, closes and removes its files
  OffloadStore(const OffloadStore&) = delete;
  OffloadStore& operator=(const OffloadStore&) = delete;

  using Ticket = uint64_t;  // 0 is never issued; wait(0) returns at once
  // Asynchronous: the caller keeps dst/src alive and untouched until wait(ticket). A region
  // outside the buffer (or a bad buffer index) throws std::out_of_range here, before anything is
  // queued. Requests in flight together have no order between them: a read of bytes whose write
  // is still in flight may see old or new data, so wait for the write first.
  Ticket read(int buffer, int64_t offset, void* dst, int64_t bytes);
  Ticket write(int buffer, int64_t offset, const void* src, int64_t bytes);
  // Throws OffloadError for a failed request (file, offset, reason). Each failure is reported
  // once: by wait() for its ticket, or else by the next waitAll().
  void wait(Ticket t);
  void waitAll();  // every request so far; throws the first failure not yet reported

  int numBuffers() const { return static_cast<int>(buffers_.size()); }
  int64_t size(int buffer) const;
  const std::string& path(int buffer) const;

  // Totals since the last take (for step events): bytes read / written, seconds spent in I/O
  // calls (summed over threads), and seconds the caller waited in wait()/waitAll().
  struct Stats {
    int64_t bytesRead = 0, bytesWritten = 0;
    double ioSeconds = 0, waitSeconds = 0;
  };
  Stats takeStats();
  // takeStats() as step-event fields: <prefix>read_bytes, write_bytes, io_ms, wait_ms.
  nlohmann::json takeStepFields(const std::string& prefix);

 private:
  struct Buffer {
    std::string name, path;
    int64_t size = 0;
    int fd = -1;
  };
  // One piece of a request: large requests are split so several threads work on them at once.
  struct Chunk {
    Ticket ticket;
    int buffer;
    int64_t offset;
    char* data;
    int64_t bytes;
    bool isWrite;
  };
  struct Pending {
    int chunksLeft = 0;
    std::string error;  // first failure among its chunks
  };

  Ticket submit(int buffer, int64_t offset, char* data, int64_t bytes, bool isWrite);
  void checkRegion(int buffer, int64_t offset, int64_t bytes, const char* what) const;
  void createFiles(const std::string& dir, const std::string& where,
                   const std::vector<std::pair<std::string, int64_t>>& buffers, int64_t needed);
  void workerLoop();
  void closeAndRemoveFiles() noexcept;

  Options options_;
  bool createdDir_ = false;
  std::vector<Buffer> buffers_;

  std::mutex mutex_;
  std::condition_variable workCv_;  // chunks queued, or stopping
  std::condition_variable doneCv_;  // a request finished
  std::deque<Chunk> queue_;
  // Requests not yet finished, and finished ones that failed and are not yet reported; a request
  // that succeeded leaves the map when its last chunk is done.
  std::unordered_map<Ticket, Pending> pending_;
  int64_t running_ = 0;  // requests with chunks left
  Ticket nextTicket_ = 1;
  bool stopping_ = false;
  Stats stats_;
  std::vector<std::thread> threads_;
};

// Raw sequential write and read rate of `dir` (a temporary file of `bytes`, O_DIRECT where the
// file system allows, fsync'd), bytes per second: what the benchmark compares the store against.
// Throws OffloadError if the file cannot be created, written or read.
std::pair<double, double> measureDiskRate(const std::string& dir, int64_t bytes);

}  // namespace ts::engine
