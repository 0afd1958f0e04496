#include "trainscope/engine/optim/OffloadStore.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <system_error>
#include <unordered_set>

namespace ts::engine {

namespace {

// Pieces of this size let several threads (and the device queue) work on one large request.
constexpr int64_t kChunkBytes = int64_t{4} << 20;
// Returned by transferAll for a read that hit the end of the file.
constexpr int kEndOfFile = -1;

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// strerror is not thread-safe; the generic category's message is.
std::string reason(int err) {
  if (err == kEndOfFile) return "unexpected end of file (the file is shorter than the buffer)";
  return std::error_code(err, std::generic_category()).message();
}

std::string inQuotes(const std::string& s) {
  return "'" + s + "'";
}

std::string humanBytes(double bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

// Moves all `bytes`, looping over short transfers and EINTR. Returns 0, an errno value, or
// kEndOfFile; `moved` counts the bytes that did move either way.
int transferAll(int fd, bool isWrite, char* data, int64_t bytes, int64_t offset, int64_t& moved) {
  moved = 0;
  while (moved < bytes) {
    const auto count = static_cast<size_t>(bytes - moved);
    const ssize_t n = isWrite ? ::pwrite(fd, data + moved, count, offset + moved)
                              : ::pread(fd, data + moved, count, offset + moved);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return isWrite ? EIO : kEndOfFile;
    moved += n;
  }
  return 0;
}

std::string stripTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

}  // namespace

OffloadStore::OffloadStore(Options options,
                           const std::vector<std::pair<std::string, int64_t>>& buffers)
    : options_(std::move(options)) {
  if (options_.dir.empty())
    throw OffloadError("offload directory is not set (parallel.nvme_path is empty)");
  const std::string dir = stripTrailingSlashes(options_.dir);
  const std::string where = "offload directory " + inQuotes(options_.dir);

  // Names become file names; refuse anything that could leave the directory or collide.
  std::unordered_set<std::string> names;
  int64_t needed = 0;
  for (const auto& [name, size] : buffers) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
      throw OffloadError(where + ": invalid buffer name " + inQuotes(name));
    if (!names.insert(name).second)
      throw OffloadError(where + ": buffer name " + inQuotes(name) + " used twice");
    if (size < 0)
      throw OffloadError(where + ": buffer " + inQuotes(name) + " has negative size " +
                         std::to_string(size));
    if (size > std::numeric_limits<int64_t>::max() - needed)
      throw OffloadError(where + ": buffer sizes overflow");
    needed += size;
  }

  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) throw OffloadError(where + " cannot be accessed: " + reason(errno));
    // Only the last component is created: a missing parent is more likely a typo in the path
    // than a wish for a new tree.
    const std::filesystem::path parentPath = std::filesystem::path(dir).parent_path();
    const std::string parent = parentPath.empty() ? std::string(".") : parentPath.string();
    struct stat ps {};
    if (::stat(parent.c_str(), &ps) != 0)
      throw OffloadError(where + ": parent directory " + inQuotes(parent) + " does not exist");
    if (!S_ISDIR(ps.st_mode))
      throw OffloadError(where + ": parent " + inQuotes(parent) + " is not a directory");
    if (::mkdir(dir.c_str(), 0700) == 0) {
      createdDir_ = true;
    } else if (errno != EEXIST) {
      throw OffloadError(where + " cannot be created: " + reason(errno));
    }
    if (::stat(dir.c_str(), &st) != 0)
      throw OffloadError(where + " cannot be accessed: " + reason(errno));
  }
  if (!S_ISDIR(st.st_mode)) throw OffloadError(where + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw OffloadError(where + " is not writable: " + reason(errno));

  try {
    createFiles(dir, where, buffers, needed);
    const int threads = std::max(1, options_.threads);
    threads_.reserve(threads);
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { workerLoop(); });
  } catch (...) {
    // The destructor does not run for a half-built store: undo here what was made.
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    workCv_.notify_all();
    for (std::thread& t : threads_) t.join();
    closeAndRemoveFiles();
    if (createdDir_) ::rmdir(dir.c_str());
    throw;
  }
}

void OffloadStore::createFiles(const std::string& dir, const std::string& where,
                               const std::vector<std::pair<std::string, int64_t>>& buffers,
                               int64_t needed) {
  // Stale files of an earlier run go first: their contents are never used, and their blocks
  // count as free space for this run.
  buffers_.reserve(buffers.size());
  for (const auto& [name, size] : buffers) {
    Buffer b;
    b.name = name;
    b.path = dir + "/" + name + ".bin";
    b.size = size;
    if (::unlink(b.path.c_str()) != 0 && errno != ENOENT)
      throw OffloadError(where + ": cannot remove stale file " + inQuotes(b.path) + ": " +
                         reason(errno));
    buffers_.push_back(std::move(b));
  }

  struct statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0)
    throw OffloadError(where + ": cannot query free space: " + reason(errno));
  const long double freeBytes =
      static_cast<long double>(vfs.f_bavail) * static_cast<long double>(vfs.f_frsize);
  if (static_cast<long double>(needed) > freeBytes)
    throw OffloadError(where + " needs " + std::to_string(needed) + " bytes (" +
                       humanBytes(static_cast<double>(needed)) + "), " +
                       std::to_string(static_cast<unsigned long long>(freeBytes)) + " bytes (" +
                       humanBytes(static_cast<double>(freeBytes)) + ") free");

  // Full size now, so that a disk filled by someone else fails here and not mid-run.
  for (Buffer& b : buffers_) {
    b.fd =
        ::open(b.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);  // the umask decides
    int err = b.fd < 0 ? errno : 0;
    if (err == 0 && b.size > 0) {
      err = ::posix_fallocate(b.fd, 0, b.size);
      if (err == EOPNOTSUPP && ::ftruncate(b.fd, b.size) == 0) err = 0;
    }
    if (err != 0) {
      const std::string what = err == ENOSPC ? " has no room for " : ": cannot create ";
      throw OffloadError(where + what + inQuotes(b.path) + " (" + std::to_string(b.size) +
                         " bytes): " + reason(err));
    }
  }
}

OffloadStore::~OffloadStore() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  workCv_.notify_all();
  // Workers drain the queue before they leave: the caller's buffers are promised to stay valid
  // until then, and unreported failures die with the store.
  for (std::thread& t : threads_) t.join();
  closeAndRemoveFiles();
  if (createdDir_) ::rmdir(stripTrailingSlashes(options_.dir).c_str());
}

void OffloadStore::closeAndRemoveFiles() noexcept {
  for (Buffer& b : buffers_) {
    if (b.fd < 0) continue;
    ::close(b.fd);
    b.fd = -1;
    ::unlink(b.path.c_str());
  }
}

int64_t OffloadStore::size(int buffer) const {
  if (buffer < 0 || buffer >= numBuffers())
    throw std::out_of_range("OffloadStore: no buffer " + std::to_string(buffer));
  return buffers_[buffer].size;
}

const std::string& OffloadStore::path(int buffer) const {
  if (buffer < 0 || buffer >= numBuffers())
    throw std::out_of_range("OffloadStore: no buffer " + std::to_string(buffer));
  return buffers_[buffer].path;
}

void OffloadStore::checkRegion(int buffer, int64_t offset, int64_t bytes, const char* what) const {
  if (buffer < 0 || buffer >= numBuffers())
    throw std::out_of_range(std::string("OffloadStore ") + what + ": no buffer " +
                            std::to_string(buffer));
  const Buffer& b = buffers_[buffer];
  if (offset < 0 || bytes < 0 || offset > b.size || bytes > b.size - offset)
    throw std::out_of_range(std::string("OffloadStore ") + what + " of " + std::to_string(bytes) +
                            " bytes at offset " + std::to_string(offset) + " outside " +
                            inQuotes(b.path) + " (" + std::to_string(b.size) + " bytes)");
}

OffloadStore::Ticket OffloadStore::read(int buffer, int64_t offset, void* dst, int64_t bytes) {
  checkRegion(buffer, offset, bytes, "read");
  return submit(buffer, offset, static_cast<char*>(dst), bytes, false);
}

OffloadStore::Ticket OffloadStore::write(int buffer, int64_t offset, const void* src,
                                         int64_t bytes) {
  checkRegion(buffer, offset, bytes, "write");
  // The workers only read through this pointer for a write.
  return submit(buffer, offset, static_cast<char*>(const_cast<void*>(src)), bytes, true);
}

OffloadStore::Ticket OffloadStore::submit(int buffer, int64_t offset, char* data, int64_t bytes,
                                          bool isWrite) {
  if (bytes > 0 && data == nullptr)
    throw std::invalid_argument("OffloadStore: null pointer for a request of " +
                                std::to_string(bytes) + " bytes");
  std::unique_lock lock(mutex_);
  const Ticket ticket = nextTicket_++;
  if (bytes == 0) return ticket;  // done already: not in pending_
  const int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  pending_[ticket] = Pending{static_cast<int>(chunks), {}};
  ++running_;
  for (int64_t done = 0; done < bytes; done += kChunkBytes)
    queue_.push_back(Chunk{ticket, buffer, offset + done, data + done,
                           std::min(kChunkBytes, bytes - done), isWrite});
  lock.unlock();
  if (chunks == 1)
    workCv_.notify_one();
  else
    workCv_.notify_all();
  return ticket;
}

void OffloadStore::workerLoop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    workCv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to do
    const Chunk c = queue_.front();
    queue_.pop_front();
    lock.unlock();

    // buffers_ does not change once the threads run, so it is read without the lock.
    const Buffer& b = buffers_[c.buffer];
    int64_t moved = 0;
    const auto start = Clock::now();
    const int err = transferAll(b.fd, c.isWrite, c.data, c.bytes, c.offset, moved);
    const double seconds = secondsSince(start);
    std::string error;
    if (err != 0)
      error = std::string(c.isWrite ? "write" : "read") + " of " + std::to_string(c.bytes) +
              " bytes at offset " + std::to_string(c.offset) + " of " + inQuotes(b.path) +
              " failed: " + reason(err);

    lock.lock();
    (c.isWrite ? stats_.bytesWritten : stats_.bytesRead) += moved;
    stats_.ioSeconds += seconds;
    auto it = pending_.find(c.ticket);
    Pending& p = it->second;
    if (!error.empty() && p.error.empty()) p.error = std::move(error);
    if (--p.chunksLeft == 0) {
      --running_;
      if (p.error.empty()) pending_.erase(it);  // failures wait to be reported
      doneCv_.notify_all();
    }
  }
}

void OffloadStore::wait(Ticket t) {
  if (t == 0) return;
  std::unique_lock lock(mutex_);
  if (t >= nextTicket_)
    throw std::invalid_argument("OffloadStore: ticket " + std::to_string(t) + " was never issued");
  const auto start = Clock::now();
  doneCv_.wait(lock, [&] {
    auto it = pending_.find(t);
    return it == pending_.end() || it->second.chunksLeft == 0;
  });
  stats_.waitSeconds += secondsSince(start);
  auto it = pending_.find(t);
  if (it == pending_.end()) return;
  std::string error = std::move(it->second.error);
  pending_.erase(it);
  throw OffloadError(error);
}

void OffloadStore::waitAll() {
  std::unique_lock lock(mutex_);
  const auto start = Clock::now();
  doneCv_.wait(lock, [this] { return running_ == 0; });
  stats_.waitSeconds += secondsSince(start);
  if (pending_.empty()) return;
  // Everything left failed; report the earliest, count the rest.
  auto first = std::min_element(pending_.begin(), pending_.end(),
                                [](const auto& a, const auto& b) { return a.first < b.first; });
  std::string error = std::move(first->second.error);
  if (pending_.size() > 1)
    error += " (and " + std::to_string(pending_.size() - 1) + " more failed requests)";
  pending_.clear();
  throw OffloadError(error);
}

nlohmann::json OffloadStore::takeStepFields(const std::string& prefix) {
  const Stats s = takeStats();
  return {{prefix + "read_bytes", s.bytesRead},
          {prefix + "write_bytes", s.bytesWritten},
          {prefix + "io_ms", s.ioSeconds * 1000},
          {prefix + "wait_ms", s.waitSeconds * 1000}};
}

OffloadStore::Stats OffloadStore::takeStats() {
  std::lock_guard lock(mutex_);
  Stats s = stats_;
  stats_ = Stats{};
  return s;
}

std::pair<double, double> measureDiskRate(const std::string& dir, int64_t bytes) {
  if (bytes <= 0)
    throw std::invalid_argument("measureDiskRate: bytes must be positive, got " +
                                std::to_string(bytes));
  // O_DIRECT wants block-aligned buffers, offsets and sizes.
  constexpr int64_t kAlign = 4096;
  constexpr int64_t kBlock = int64_t{1} << 20;
  const int64_t total = (bytes + kAlign - 1) / kAlign * kAlign;
  const std::string where = "disk rate of " + inQuotes(dir);

  std::string name = stripTrailingSlashes(dir) + "/.trainscope-diskrate-XXXXXX";
  const int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) throw OffloadError(where + ": cannot create a temporary file: " + reason(errno));
  // Unlinked at once: nothing is left behind, even by a crash.
  ::unlink(name.c_str());
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  // Without O_DIRECT (tmpfs, some network file systems) the page cache is measured instead.
  const int flags = ::fcntl(fd, F_GETFL);
  bool direct = flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;

  std::unique_ptr<char, decltype(&std::free)> buffer(
      static_cast<char*>(std::aligned_alloc(kAlign, kBlock)), &std::free);
  if (!buffer) throw std::bad_alloc();
  // Not zeros: some file systems store zero blocks for free.
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < kBlock; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    std::copy_n(reinterpret_cast<const char*>(&x), 8, buffer.get() + i);
  }

  auto pass = [&](bool isWrite) {
    const auto start = Clock::now();
    for (int64_t off = 0; off < total;) {
      const int64_t n = std::min(kBlock, total - off);
      int64_t moved = 0;
      const int err = transferAll(fd, isWrite, buffer.get(), n, off, moved);
      off += moved;
      if (err == 0) continue;
      // Some file systems accept O_DIRECT at open but refuse the I/O: go on buffered.
      if (err == EINVAL && direct && flags >= 0 && ::fcntl(fd, F_SETFL, flags) == 0) {
        direct = false;
        continue;
      }
      throw OffloadError(where + ": " + (isWrite ? "write" : "read") + " at offset " +
                         std::to_string(off) + " failed: " + reason(err));
    }
    if (isWrite && ::fsync(fd) != 0) throw OffloadError(where + ": fsync failed: " + reason(errno));
    return std::max(secondsSince(start), 1e-9);
  };
  const double writeSeconds = pass(true);
  // Clean pages can be dropped now, so a buffered read comes from the disk where it can.
  if (!direct) ::posix_fadvise(fd, 0, total, POSIX_FADV_DONTNEED);
  const double readSeconds = pass(false);
  return {static_cast<double>(total) / writeSeconds, static_cast<double>(total) / readSeconds};
}

}  // namespace ts::engine
