#pragma once
// Host-side tracer: scoped, nestable ranges recorded per thread into one event model shared with
// the CUPTI collector. Zero cost when disabled (one relaxed atomic load per range).
//
// Each thread that opens a range gets its own buffer and lane (OpenMP workers included: a range
// inside a parallel region lands on the worker's lane). A thread only touches its own buffer;
// drain() takes the completed spans of every thread under a per-buffer spin lock that is
// uncontended except while draining.
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ts::profiler {

enum class SpanCategory {
  Gemm,
  Attention,
  Norm,
  Elementwise,
  Optimizer,
  Communication,
  Memcpy,
  IO,
  Data,
  Block,
  Step,
  Other
};
const char* toString(SpanCategory c);  // "gemm", "attention", "norm", ... "io", "other"
// Inverse of toString; anything unknown is Other.
SpanCategory categoryFromString(std::string_view s);
// Best guess from a kernel/op name (CUPTI kernel names, names recorded without a category):
// "sgemm"/"matmul" -> Gemm, "flash"/"attn" -> Attention, "norm" -> Norm, "adam" -> Optimizer,
// "nccl"/"allreduce" -> Communication, "memcpy"/"memset" -> Memcpy, ... else Elementwise for
// kernels, Other for anything not recognizably a kernel.
SpanCategory categoryForName(std::string_view name, bool deviceKernel = false);

struct Span {
  std::string name;
  SpanCategory category = SpanCategory::Other;
  int rank = 0;
  int lane = 0;          // thread index (host) or stream id (device)
  bool device = false;   // true for GPU activity records
  int64_t start_ns = 0;  // host clock (steady), ns since the tracer's epoch
  int64_t duration_ns = 0;
  int depth = 0;             // nesting depth within its lane
  uint64_t correlation = 0;  // links a device record to the host range that launched it
  int64_t bytes = 0;
  double flops = 0;
  int64_t step = -1;
};

// Told about every range begin/end while installed (the CUPTI collector pushes the range's
// correlation id as CUPTI external correlation id so kernels link to the range).
class RangeListener {
 public:
  virtual ~RangeListener() = default;
  virtual void onRangeBegin(uint64_t correlation) = 0;
  virtual void onRangeEnd(uint64_t correlation) = 0;
};

namespace detail {
// The on/off switch read by every ScopedRange (inline so the disabled path is one load).
inline std::atomic<bool> g_tracingEnabled{false};
}  // namespace detail

class Tracer {
 public:
  static Tracer& instance();
  void setEnabled(bool on);
  bool enabled() const { return detail::g_tracingEnabled.load(std::memory_order_relaxed); }
  void setStep(int64_t step);
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  void setRank(int rank);
  int rank() const { return rank_.load(std::memory_order_relaxed); }
  // Takes every completed span recorded so far (all threads), ordered by start time (ties: lane,
  // then depth). Ranges still open stay open and are returned by a later drain.
  std::vector<Span> drain();
  // Drops every completed span (e.g. those recorded during warmup steps).
  void clear();
  int64_t nowNs() const;
  // Unix time (ns) of the tracer's epoch, so timelines of different ranks can be aligned.
  int64_t epochUnixNs() const { return epochUnixNs_; }

  // Lanes: the calling thread's lane (registers it on first use) and an optional display name.
  int currentLane();
  void setThreadName(const std::string& name);
  std::map<int, std::string> laneNames() const;  // every lane seen: "thread N" unless named
  // Lane of a thread that has recorded ranges, by gettid() or pthread_self() (or its low 32
  // bits, as some tools report it); -1 when unknown.
  int laneOfOsThread(uint64_t osThreadId) const;

  void setRangeListener(RangeListener* listener);

  // Used by ScopedRange.
  void begin(const char* name, SpanCategory cat, double flops, int64_t bytes);
  void end();

 private:
  Tracer();
  std::atomic<int64_t> step_{-1};
  std::atomic<int> rank_{0};
  std::atomic<RangeListener*> listener_{nullptr};
  int64_t epochUnixNs_ = 0;
};

// RAII range: `ScopedRange r("matmul", SpanCategory::Gemm, flops);`
// The name is copied (interned) when the range opens, so temporaries are fine.
class ScopedRange {
 public:
  ScopedRange(const char* name, SpanCategory cat, double flops = 0, int64_t bytes = 0)
      : active_(detail::g_tracingEnabled.load(std::memory_order_relaxed)) {
    if (active_) Tracer::instance().begin(name, cat, flops, bytes);
  }
  ~ScopedRange() {
    if (active_) Tracer::instance().end();
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

 private:
  bool active_;
};

}  // namespace ts::profiler
