#pragma once
// Per-window aggregation and the JSON bodies of the `kernel_summary` and `kernels` events.
//
// kernel_summary body (fields besides type/seq/time):
//   {"rank":0, "window":0, "first_step":5, "last_step":7, "steps":3, "on_demand":false,
//    "step_time_ms":12.5, "dropped_records":0,
//    "ops":[{"name":"matmul", "category":"gemm", "device":false, "count":12,
//            "total_ms":3.1, "mean_ms":0.26, "min_ms":0.2, "max_ms":0.4,
//            "pct_of_step":24.8, "bytes":0, "flops":1.2e9}, ...]}   // ops by total_ms, desc
// kernels body (one batch, at most maxSpansPerBatch spans):
//   {"rank":0, "window":0, "batch":0, "batches":3, "first_step":5, "last_step":7,
//    "epoch_unix_ns":1700000000000000000,
//    "spans":[{"name":"matmul", "cat":"gemm", "lane":0, "device":false, "start_ns":1200,
//              "dur_ns":800, "depth":1, "step":5, "corr":1099511627777, "bytes":0,
//              "flops":2.0e6}, ...]}
//   start_ns is relative to the recording rank's tracer epoch (epoch_unix_ns) on the host
//   steady clock; device spans use the same clock.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/profiler/ProfileSchedule.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::profiler {

struct OpSummary {
  std::string name;
  SpanCategory category = SpanCategory::Other;
  bool device = false;
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0;
  int64_t max_ns = 0;
  double mean_ns = 0;
  double pct_of_step = 0;  // total / step time * 100 (summed over threads: may exceed 100)
  int64_t bytes = 0;       // summed
  double flops = 0;        // summed
};

struct WindowSummary {
  int rank = 0;
  int window = 0;
  int64_t first_step = 0;
  int64_t last_step = 0;
  bool on_demand = false;
  int64_t step_time_ns = 0;
  int64_t dropped_records = 0;
  std::vector<OpSummary> ops;  // by total_ns descending, then name
};

// Groups spans by (name, category, device). stepTimeNs > 0 is the denominator of pct_of_step;
// otherwise the summed duration of Step-category spans, else the extent of all spans.
WindowSummary summarize(const std::vector<Span>& spans, int64_t stepTimeNs = 0);
// Same, with window/step metadata; prefers Step spans over the controller's wall time.
WindowSummary summarize(const ProfileWindow& window, int rank = 0);

nlohmann::json toJson(const WindowSummary& s);  // kernel_summary body
// Throws std::invalid_argument naming the missing/mistyped field.
WindowSummary windowSummaryFromJson(const nlohmann::json& body);

nlohmann::json toJson(const Span& s);  // one element of kernels.spans
// Throws std::invalid_argument naming the field ("spans[3].dur_ns: expected an integer").
Span spanFromJson(const nlohmann::json& j, int rank = 0);

struct KernelsBatchInfo {
  int rank = 0;
  int window = 0;
  int64_t first_step = 0;
  int64_t last_step = 0;
  int64_t epoch_unix_ns = 0;
};
inline constexpr size_t kDefaultMaxSpansPerBatch = 2000;
// Splits spans (in order) into `kernels` bodies of at most maxSpansPerBatch spans each (>= 1).
// No spans -> no batches.
std::vector<nlohmann::json> kernelsBatches(const std::vector<Span>& spans,
                                           const KernelsBatchInfo& info,
                                           size_t maxSpansPerBatch = kDefaultMaxSpansPerBatch);
std::vector<nlohmann::json> kernelsBatches(const ProfileWindow& window, int rank,
                                           int64_t epochUnixNs,
                                           size_t maxSpansPerBatch = kDefaultMaxSpansPerBatch);
// Reads the spans of one `kernels` event (body or whole event), rank from its "rank".
// Throws std::invalid_argument naming the bad field.
std::vector<Span> spansFromKernelsEvent(const nlohmann::json& event);

}  // namespace ts::profiler
