#pragma once
// Chrome Trace Event Format export (loads in Perfetto and chrome://tracing):
//   {"displayTimeUnit":"ms", "traceEvents":[
//     {"ph":"X", "name":"matmul", "cat":"gemm", "pid":<rank>, "tid":<lane>, "ts":<us>,
//      "dur":<us>, "args":{"bytes":0, "flops":2e6, "correlation":123, "step":5}},
//     {"ph":"M", "name":"process_name", "pid":0, "tid":0, "args":{"name":"rank 0"}},
//     {"ph":"M", "name":"thread_name", "pid":0, "tid":3, "args":{"name":"thread 3"}},
//     {"ph":"C", "name":"memory", "pid":0, "tid":0, "ts":<us>, "args":{"parameters":1024,...}}]}
// ts/dur are microseconds with ns precision. Device spans sit on tid kDeviceTidBase + stream
// ("GPU stream N") so they never share a row with a host thread.
#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/profiler/Tracer.h"

namespace ts::profiler {

inline constexpr int kDeviceTidBase = 1000000;

// One sample of a counter track (e.g. memory bytes per category) at a point in time.
struct CounterSample {
  int rank = 0;
  int64_t time_ns = 0;                                 // same clock as Span::start_ns
  std::string name = "memory";                         // the counter track
  std::vector<std::pair<std::string, double>> values;  // series name -> value
};

struct ChromeTraceOptions {
  std::map<int, std::string> processNames;               // rank -> name; default "rank N"
  std::map<std::pair<int, int>, std::string> laneNames;  // (rank, lane) -> name of host lanes;
                                                         // default "thread N"
  std::string displayTimeUnit = "ms";
};

void writeChromeTrace(std::ostream& out, const std::vector<Span>& spans,
                      const std::vector<CounterSample>& counters = {},
                      const ChromeTraceOptions& options = {});
std::string chromeTraceJson(const std::vector<Span>& spans,
                            const std::vector<CounterSample>& counters = {},
                            const ChromeTraceOptions& options = {});
// Writes the trace to a file; false with *error naming the path and the reason.
bool writeChromeTrace(const std::string& path, const std::vector<Span>& spans,
                      const std::vector<CounterSample>& counters, const ChromeTraceOptions& options,
                      std::string* error);

}  // namespace ts::profiler
