#include "trainscope/profiler/Tracer.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <unordered_map>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define TRAINSCOPE_HAVE_RDTSC 1
#endif

namespace ts::profiler {

namespace {

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Range timestamps are raw ticks converted to ns at drain time. Ticks are the invariant TSC
// where the CPU has one (a few ns to read; clock_gettime costs 20-150 ns in some VMs), else
// steady_clock ns. The TSC rate is measured against steady_clock over an ever longer baseline
// (refined at every drain), so converted times stay on the steady clock.
class TickClock {
 public:
  TickClock() {
    useTsc_ = tscUsable();
    ns0_ = steadyNs();
    tick0_ = raw();
    if (useTsc_) {
      // Initial rate over ~2 ms; later refined.
      int64_t s;
      uint64_t t;
      do {
        s = steadyNs();
        t = raw();
      } while (s - ns0_ < 2000000);
      nsPerTick_.store(static_cast<double>(s - ns0_) / static_cast<double>(t - tick0_),
                       std::memory_order_relaxed);
    }
  }
  uint64_t ticks() const { return raw(); }
  // ns since the epoch (construction).
  int64_t toNs(uint64_t t) const {
    const auto d = static_cast<int64_t>(t - tick0_);
    if (!useTsc_) return d;
    return std::llround(static_cast<double>(d) * nsPerTick_.load(std::memory_order_relaxed));
  }
  void recalibrate() {
    if (!useTsc_) return;
    const int64_t s = steadyNs();
    const uint64_t t = raw();
    if (s - ns0_ > 10000000 && t > tick0_)
      nsPerTick_.store(static_cast<double>(s - ns0_) / static_cast<double>(t - tick0_),
                       std::memory_order_relaxed);
  }
  bool usesTsc() const { return useTsc_; }

 private:
  static bool tscUsable() {
#ifdef TRAINSCOPE_HAVE_RDTSC
    if (const char* e = std::getenv("TRAINSCOPE_TRACE_CLOCK"); e && std::strcmp(e, "steady") == 0)
      return false;
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind("flags", 0) == 0)
        return line.find(" constant_tsc") != std::string::npos &&
               line.find(" nonstop_tsc") != std::string::npos;
    }
#endif
    return false;
  }
  uint64_t raw() const {
#ifdef TRAINSCOPE_HAVE_RDTSC
    if (useTsc_) return __rdtsc();
#endif
    return static_cast<uint64_t>(steadyNs());
  }
  bool useTsc_ = false;
  int64_t ns0_ = 0;
  uint64_t tick0_ = 0;
  std::atomic<double> nsPerTick_{1.0};
};

// A completed range as stored on the recording thread: the name is an interned id so that
// recording never allocates for names.
struct RawSpan {
  uint64_t start;     // ticks
  uint64_t duration;  // ticks
  uint64_t correlation;
  int64_t bytes;
  double flops;
  int64_t step;
  uint32_t name;
  int16_t depth;
  uint8_t category;
};

struct OpenRange {
  uint64_t start;  // ticks
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
  std::string threadName;  // guarded by the registry mutex

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
  TickClock clock;
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

void Tracer::setEnabled(bool on) {
  detail::g_tracingEnabled.store(on, std::memory_order_relaxed);
}
void Tracer::setStep(int64_t step) {
  step_.store(step, std::memory_order_relaxed);
}
void Tracer::setRank(int rank) {
  rank_.store(rank, std::memory_order_relaxed);
}
void Tracer::setRangeListener(RangeListener* l) {
  listener_.store(l, std::memory_order_release);
}

int64_t Tracer::nowNs() const {
  const TickClock& c = state().clock;
  return c.toNs(c.ticks());
}

int Tracer::currentLane() {
  return localBuffer().lane;
}

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
  b.open.push_back(OpenRange{state().clock.ticks(), corr, bytes, flops,
                             step_.load(std::memory_order_relaxed), id, static_cast<uint8_t>(cat)});
}

void Tracer::end() {
  const uint64_t now = state().clock.ticks();
  ThreadBuffer& b = localBuffer();
  if (b.open.empty()) return;
  OpenRange o = b.open.back();
  b.open.pop_back();
  if (RangeListener* l = listener_.load(std::memory_order_acquire)) l->onRangeEnd(o.correlation);
  RawSpan r{o.start, now > o.start ? now - o.start : 0,   o.correlation, o.bytes, o.flops, o.step,
            o.name,  static_cast<int16_t>(b.open.size()), o.category};
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
  s.clock.recalibrate();
  // Sort the small POD records first; build the Spans (with their name strings) once, in order.
  struct Ref {
    const RawSpan* raw;
    int lane;
  };
  size_t total = 0;
  for (const auto& t : taken) total += t.spans.size();
  std::vector<Ref> refs;
  refs.reserve(total);
  for (const auto& t : taken)
    for (const RawSpan& r : t.spans) refs.push_back({&r, t.lane});
  std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) {
    if (a.raw->start != b.raw->start) return static_cast<int64_t>(a.raw->start - b.raw->start) < 0;
    if (a.lane != b.lane) return a.lane < b.lane;
    return a.raw->depth < b.raw->depth;
  });
  std::vector<Span> out(total);
  const int rankNow = rank();
  std::lock_guard lock(s.names.mutex());
  for (size_t i = 0; i < total; ++i) {
    const RawSpan& r = *refs[i].raw;
    Span& sp = out[i];
    sp.name = s.names.name(r.name);
    sp.category = static_cast<SpanCategory>(r.category);
    sp.rank = rankNow;
    sp.lane = refs[i].lane;
    // The end converted as a point too (not start + rounded duration): converting ticks is
    // monotonic, so a span nested in ticks stays nested in nanoseconds (rounding start and
    // duration separately could push an inner end 1 ns past its parent's).
    sp.start_ns = s.clock.toNs(r.start);
    sp.duration_ns = s.clock.toNs(r.start + r.duration) - sp.start_ns;
    sp.depth = r.depth;
    sp.correlation = r.correlation;
    sp.bytes = r.bytes;
    sp.flops = r.flops;
    sp.step = r.step;
  }
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
