#pragma once
// Host-side tracer: scoped, nestable ranges recorded per thread into one event model shared with
// the CUPTI collector. Zero cost when disabled (one relaxed atomic load per range).
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace ts::profiler {

enum class SpanCategory {
  Gemm, Attention, Norm, Elementwise, Optimizer, Communication, Memcpy, IO, Data, Block, Step,
  Other
};
const char* toString(SpanCategory c);  // "gemm", "attention", "norm", ...

struct Span {
  std::string name;
  SpanCategory category = SpanCategory::Other;
  int rank = 0;
  int lane = 0;            // thread index (host) or stream id (device)
  bool device = false;     // true for GPU activity records
  int64_t start_ns = 0;    // host clock (steady), ns since the tracer's epoch
  int64_t duration_ns = 0;
  int depth = 0;           // nesting depth within its lane
  uint64_t correlation = 0;  // links a device record to the host range that launched it
  int64_t bytes = 0;
  double flops = 0;
  int64_t step = -1;
};

class Tracer {
 public:
  static Tracer& instance();
  void setEnabled(bool on);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void setStep(int64_t step);
  void setRank(int rank);
  // Takes every completed span recorded so far (all threads), ordered by start time.
  std::vector<Span> drain();
  int64_t nowNs() const;

  // Used by ScopedRange.
  void begin(const char* name, SpanCategory cat, double flops, int64_t bytes);
  void end();

 private:
  Tracer();
  std::atomic<bool> enabled_{false};
};

// RAII range: `ScopedRange r("matmul", SpanCategory::Gemm, flops);`
class ScopedRange {
 public:
  ScopedRange(const char* name, SpanCategory cat, double flops = 0, int64_t bytes = 0)
      : active_(Tracer::instance().enabled()) {
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
