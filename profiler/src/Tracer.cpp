#include "trainscope/profiler/Tracer.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace ts::profiler {

namespace {

// A completed range as stored on the recording thread: the name is an interned id so that
// recording never allocates for names.
struct RawSpan {
  int64_t start;
  int64_t duration;
  uint64_t correlation;
  int64_t bytes;
  double flops;
  int64_t step;
  uint32_t name;
  int16_t depth;
  uint8_t category;
};

struct OpenRange {
  int64_t start;
  uint64_t correlation;
  int64_t bytes;
  double flops;
  int64_t step;
  uint32_t name;
  uint8_t category;
};

// Interned names: ids index a deque so references stay valid while it grows.
class NameTable {
 public:
  uint32_t intern(const char* s) {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(std::string_view(s));
    if (it != ids_.end()) return it->second;
    names_.emplace_back(s);
    auto id = static_cast<uint32_t>(names_.size() - 1);
    ids_.emplace(std::string_view(names_.back()), id);
    return id;
  }
  const std::string& name(uint32_t id) const { return names_[id]; }  // caller holds lock()
  std::mutex& mutex() { return mutex_; }

 private:
  std::mutex mutex_;
  std::deque<std::string> names_;
  std::unordered_map<std::string_view, uint32_t> ids_;
};

struct ThreadBuffer {
  int lane = 0;
  uint64_t osThreadId = 0;  // gettid()
  uint64_t pthreadId = 0;   // pthread_self(): some tools report this (or its low 32 bits)
  std::atomic<bool> alive{true};
  std::atomic_flag lock = ATOMIC_FLAG_INIT;  // guards `done` (owner appends, drain swaps)
  std::vector<RawSpan> done;
  std::vector<OpenRange> open;  // owner thread only
  uint64_t nextCorrelation = 1;
  std::string threadName;       // guarded by the registry mutex

  // Direct-mapped cache: name pointer -> interned id. A hit also compares the text, so a
  // reused buffer holding a different name never gets a stale id.
  struct CacheEntry {
    const char* ptr = nullptr;
    uint32_t id = 0;
    const char* text = nullptr;
  };
  CacheEntry cache[256];

  void acquire() {
    while (lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  void release() { lock.clear(std::memory_order_release); }
};

struct State {
  std::mutex registryMutex;
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  int nextLane = 0;
  NameTable names;
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();
};

// Leaked on purpose: thread_local holders may outlive static destruction at exit.
State& state() {
  static State* s = new State();
  return *s;
}

thread_local ThreadBuffer* tlsBuffer = nullptr;

struct BufferHolder {
  std::shared_ptr<ThreadBuffer> buffer;
  ~BufferHolder() {
    if (buffer) buffer->alive.store(false, std::memory_order_release);
    tlsBuffer = nullptr;
  }
};
thread_local BufferHolder tlsHolder;

ThreadBuffer& localBuffer() {
  if (tlsBuffer) return *tlsBuffer;
  auto buf = std::make_shared<ThreadBuffer>();
  buf->osThreadId = static_cast<uint64_t>(::syscall(SYS_gettid));
  buf->pthreadId = static_cast<uint64_t>(::pthread_self());
  buf->done.reserve(4096);
  buf->open.reserve(32);
  State& s = state();
  {
    std::lock_guard lock(s.registryMutex);
    buf->lane = s.nextLane++;
    s.buffers.push_back(buf);
  }
  tlsHolder.buffer = buf;
  tlsBuffer = buf.get();
  return *buf;
}

uint32_t internCached(ThreadBuffer& b, const char* name) {
  if (!name) name = "(null)";
  auto& e = b.cache[(reinterpret_cast<uintptr_t>(name) >> 3) & 255];
  if (e.ptr == name && std::strcmp(e.text, name) == 0) return e.id;
  NameTable& t = state().names;
  uint32_t id = t.intern(name);
  {
    std::lock_guard lock(t.mutex());
    e.text = t.name(id).c_str();
  }
  e.ptr = name;
  e.id = id;
  return id;
}

}  // namespace

Tracer& Tracer::instance() {
  static Tracer* t = new Tracer();  // leaked: usable from thread exits during shutdown
  return *t;
}

Tracer::Tracer() {
  state();  // fixes the epoch
  auto unixNow = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count();
  epochUnixNs_ = unixNow - nowNs();
}

void Tracer::setEnabled(bool on) { detail::g_tracingEnabled.store(on, std::memory_order_relaxed); }
void Tracer::setStep(int64_t step) { step_.store(step, std::memory_order_relaxed); }
void Tracer::setRank(int rank) { rank_.store(rank, std::memory_order_relaxed); }
void Tracer::setRangeListener(RangeListener* l) { listener_.store(l, std::memory_order_release); }

int64_t Tracer::nowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              state().epoch)
      .count();
}

int Tracer::currentLane() { return localBuffer().lane; }

void Tracer::setThreadName(const std::string& name) {
  ThreadBuffer& b = localBuffer();
  std::lock_guard lock(state().registryMutex);
  b.threadName = name;
}

std::map<int, std::string> Tracer::laneNames() const {
  std::map<int, std::string> out;
  std::lock_guard lock(state().registryMutex);
  for (const auto& b : state().buffers)
    out[b->lane] = b->threadName.empty() ? "thread " + std::to_string(b->lane) : b->threadName;
  return out;
}

int Tracer::laneOfOsThread(uint64_t osThreadId) const {
  std::lock_guard lock(state().registryMutex);
  for (const auto& b : state().buffers)
    if (b->osThreadId == osThreadId || b->pthreadId == osThreadId ||
        (b->pthreadId & 0xffffffffu) == osThreadId)
      return b->lane;
  return -1;
}

void Tracer::begin(const char* name, SpanCategory cat, double flops, int64_t bytes) {
  ThreadBuffer& b = localBuffer();
  uint32_t id = internCached(b, name);
  // Correlation ids are unique per process without a shared counter: lane in the high bits.
  uint64_t corr = (static_cast<uint64_t>(b.lane + 1) << 40) | b.nextCorrelation++;
  if (RangeListener* l = listener_.load(std::memory_order_acquire)) l->onRangeBegin(corr);
  // The clock is read last so the bookkeeping above is not billed to the range.
  b.open.push_back(OpenRange{nowNs(), corr, bytes, flops, step_.load(std::memory_order_relaxed),
                             id, static_cast<uint8_t>(cat)});
}

void Tracer::end() {
  int64_t now = nowNs();
  ThreadBuffer& b = localBuffer();
  if (b.open.empty()) return;
  OpenRange o = b.open.back();
  b.open.pop_back();
  if (RangeListener* l = listener_.load(std::memory_order_acquire)) l->onRangeEnd(o.correlation);
  RawSpan r{o.start,  now - o.start, o.correlation, o.bytes,
            o.flops,  o.step,        o.name,        static_cast<int16_t>(b.open.size()),
            o.category};
  b.acquire();
  b.done.push_back(r);
  b.release();
}

std::vector<Span> Tracer::drain() {
  State& s = state();
  struct Taken {
    int lane;
    std::vector<RawSpan> spans;
  };
  std::vector<Taken> taken;
  {
    std::lock_guard lock(s.registryMutex);
    for (auto& b : s.buffers) {
      Taken t{b->lane, {}};
      // The owner gets back an empty buffer of the same capacity (allocated outside its lock).
      b->acquire();
      size_t capacity = b->done.capacity();
      b->release();
      t.spans.reserve(capacity);
      b->acquire();
      t.spans.swap(b->done);
      b->release();
      if (!t.spans.empty()) taken.push_back(std::move(t));
    }
    // Buffers of exited threads are forgotten once emptied (their ranges were all closed).
    std::erase_if(s.buffers, [](const std::shared_ptr<ThreadBuffer>& b) {
      return !b->alive.load(std::memory_order_acquire) && b->done.empty();
    });
  }
  size_t total = 0;
  for (const auto& t : taken) total += t.spans.size();
  std::vector<Span> out;
  out.reserve(total);
  const int rankNow = rank();
  {
    std::lock_guard lock(s.names.mutex());
    for (const auto& t : taken) {
      for (const RawSpan& r : t.spans) {
        Span sp;
        sp.name = s.names.name(r.name);
        sp.category = static_cast<SpanCategory>(r.category);
        sp.rank = rankNow;
        sp.lane = t.lane;
        sp.start_ns = r.start;
        sp.duration_ns = r.duration;
        sp.depth = r.depth;
        sp.correlation = r.correlation;
        sp.bytes = r.bytes;
        sp.flops = r.flops;
        sp.step = r.step;
        out.push_back(std::move(sp));
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Span& a, const Span& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    if (a.lane != b.lane) return a.lane < b.lane;
    return a.depth < b.depth;
  });
  return out;
}

void Tracer::clear() {
  State& s = state();
  std::lock_guard lock(s.registryMutex);
  for (auto& b : s.buffers) {
    b->acquire();
    b->done.clear();
    b->release();
  }
}

}  // namespace ts::profiler
