#include "trainscope/profiler/Aggregation.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

namespace ts::profiler {

namespace {

constexpr double kNsPerMs = 1e6;

[[noreturn]] void bad(const std::string& where, const std::string& what) {
  throw std::invalid_argument(where + ": " + what);
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object()) bad(where, "expected an object");
  auto it = j.find(key);
  if (it == j.end()) bad(where + "." + key, "missing");
  return *it;
}

int64_t intField(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_number_integer()) bad(where + "." + key, "expected an integer");
  return v.get<int64_t>();
}

int64_t intFieldOr(const nlohmann::json& j, const char* key, const std::string& where,
                   int64_t dflt) {
  if (!j.contains(key)) return dflt;
  return intField(j, key, where);
}

double numField(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_number()) bad(where + "." + key, "expected a number");
  return v.get<double>();
}

std::string strField(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where);
  if (!v.is_string()) bad(where + "." + key, "expected a string");
  return v.get<std::string>();
}

bool boolFieldOr(const nlohmann::json& j, const char* key, const std::string& where, bool dflt) {
  if (!j.contains(key)) return dflt;
  const auto& v = j[key];
  if (!v.is_boolean()) bad(where + "." + key, "expected true or false");
  return v.get<bool>();
}

int64_t extentNs(const std::vector<Span>& spans) {
  if (spans.empty()) return 0;
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const Span& s : spans) {
    lo = std::min(lo, s.start_ns);
    hi = std::max(hi, s.start_ns + s.duration_ns);
  }
  return hi - lo;
}

}  // namespace

WindowSummary summarize(const std::vector<Span>& spans, int64_t stepTimeNs) {
  WindowSummary out;
  if (stepTimeNs <= 0) {
    for (const Span& s : spans)
      if (s.category == SpanCategory::Step) stepTimeNs += s.duration_ns;
  }
  if (stepTimeNs <= 0) stepTimeNs = extentNs(spans);
  out.step_time_ns = stepTimeNs;

  std::map<std::tuple<std::string, SpanCategory, bool>, OpSummary> groups;
  for (const Span& s : spans) {
    auto [it, fresh] = groups.try_emplace({s.name, s.category, s.device});
    OpSummary& o = it->second;
    if (fresh) {
      o.name = s.name;
      o.category = s.category;
      o.device = s.device;
      o.min_ns = s.duration_ns;
      o.max_ns = s.duration_ns;
    }
    ++o.count;
    o.total_ns += s.duration_ns;
    o.min_ns = std::min(o.min_ns, s.duration_ns);
    o.max_ns = std::max(o.max_ns, s.duration_ns);
    o.bytes += s.bytes;
    o.flops += s.flops;
  }
  out.ops.reserve(groups.size());
  for (auto& [key, o] : groups) {
    o.mean_ns = static_cast<double>(o.total_ns) / static_cast<double>(o.count);
    o.pct_of_step = stepTimeNs > 0
                        ? 100.0 * static_cast<double>(o.total_ns) / static_cast<double>(stepTimeNs)
                        : 0.0;
    out.ops.push_back(std::move(o));
  }
  std::stable_sort(out.ops.begin(), out.ops.end(),
                   [](const OpSummary& a, const OpSummary& b) { return a.total_ns > b.total_ns; });
  return out;
}

WindowSummary summarize(const ProfileWindow& window, int rank) {
  bool haveStepSpans = std::any_of(window.spans.begin(), window.spans.end(),
                                   [](const Span& s) { return s.category == SpanCategory::Step; });
  WindowSummary out = summarize(window.spans, haveStepSpans ? 0 : window.stepTimeNs);
  out.rank = rank;
  out.window = window.index;
  out.first_step = window.firstStep;
  out.last_step = window.lastStep;
  out.on_demand = window.onDemand;
  out.dropped_records = window.droppedDeviceRecords;
  return out;
}

nlohmann::json toJson(const WindowSummary& s) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpSummary& o : s.ops) {
    ops.push_back({{"name", o.name},
                   {"category", toString(o.category)},
                   {"device", o.device},
                   {"count", o.count},
                   {"total_ms", static_cast<double>(o.total_ns) / kNsPerMs},
                   {"mean_ms", o.mean_ns / kNsPerMs},
                   {"min_ms", static_cast<double>(o.min_ns) / kNsPerMs},
                   {"max_ms", static_cast<double>(o.max_ns) / kNsPerMs},
                   {"pct_of_step", o.pct_of_step},
                   {"bytes", o.bytes},
                   {"flops", o.flops}});
  }
  return {{"rank", s.rank},
          {"window", s.window},
          {"first_step", s.first_step},
          {"last_step", s.last_step},
          {"steps", s.last_step - s.first_step + 1},
          {"on_demand", s.on_demand},
          {"step_time_ms", static_cast<double>(s.step_time_ns) / kNsPerMs},
          {"dropped_records", s.dropped_records},
          {"ops", std::move(ops)}};
}

WindowSummary windowSummaryFromJson(const nlohmann::json& j) {
  const std::string where = "kernel_summary";
  WindowSummary s;
  s.rank = static_cast<int>(intField(j, "rank", where));
  s.window = static_cast<int>(intField(j, "window", where));
  s.first_step = intField(j, "first_step", where);
  s.last_step = intField(j, "last_step", where);
  s.on_demand = boolFieldOr(j, "on_demand", where, false);
  s.step_time_ns = static_cast<int64_t>(numField(j, "step_time_ms", where) * kNsPerMs + 0.5);
  s.dropped_records = intFieldOr(j, "dropped_records", where, 0);
  const auto& ops = field(j, "ops", where);
  if (!ops.is_array()) bad(where + ".ops", "expected an array");
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string w = where + ".ops[" + std::to_string(i) + "]";
    const auto& o = ops[i];
    OpSummary op;
    op.name = strField(o, "name", w);
    op.category = categoryFromString(strField(o, "category", w));
    op.device = boolFieldOr(o, "device", w, false);
    op.count = intField(o, "count", w);
    op.total_ns = static_cast<int64_t>(numField(o, "total_ms", w) * kNsPerMs + 0.5);
    op.mean_ns = numField(o, "mean_ms", w) * kNsPerMs;
    op.min_ns = static_cast<int64_t>(numField(o, "min_ms", w) * kNsPerMs + 0.5);
    op.max_ns = static_cast<int64_t>(numField(o, "max_ms", w) * kNsPerMs + 0.5);
    op.pct_of_step = numField(o, "pct_of_step", w);
    op.bytes = intFieldOr(o, "bytes", w, 0);
    op.flops = o.contains("flops") ? numField(o, "flops", w) : 0.0;
    s.ops.push_back(std::move(op));
  }
  return s;
}

nlohmann::json toJson(const Span& s) {
  // Filled in place: initializer lists copy every value once more (a 100k-span window is
  // encoded on the training thread at window end).
  nlohmann::json j(nlohmann::json::value_t::object);
  auto& m = j.get_ref<nlohmann::json::object_t&>();
  m.emplace("name", s.name);
  m.emplace("cat", toString(s.category));
  m.emplace("lane", s.lane);
  m.emplace("device", s.device);
  m.emplace("start_ns", s.start_ns);
  m.emplace("dur_ns", s.duration_ns);
  m.emplace("depth", s.depth);
  m.emplace("step", s.step);
  m.emplace("corr", s.correlation);
  m.emplace("bytes", s.bytes);
  m.emplace("flops", s.flops);
  return j;
}

Span spanFromJson(const nlohmann::json& j, int rank) {
  const std::string where = "span";
  Span s;
  s.rank = rank;
  s.name = strField(j, "name", where);
  s.category = categoryFromString(strField(j, "cat", where));
  s.lane = static_cast<int>(intField(j, "lane", where));
  s.device = boolFieldOr(j, "device", where, false);
  s.start_ns = intField(j, "start_ns", where);
  s.duration_ns = intField(j, "dur_ns", where);
  if (s.duration_ns < 0) bad(where + ".dur_ns", "must be >= 0");
  s.depth = static_cast<int>(intFieldOr(j, "depth", where, 0));
  s.step = intFieldOr(j, "step", where, -1);
  if (j.contains("corr")) {
    const auto& c = j["corr"];
    if (!c.is_number_integer()) bad(where + ".corr", "expected an integer");
    s.correlation = c.get<uint64_t>();
  }
  s.bytes = intFieldOr(j, "bytes", where, 0);
  s.flops = j.contains("flops") ? numField(j, "flops", where) : 0.0;
  return s;
}

std::vector<nlohmann::json> kernelsBatches(const std::vector<Span>& spans,
                                           const KernelsBatchInfo& info, size_t maxSpansPerBatch) {
  maxSpansPerBatch = std::max<size_t>(1, maxSpansPerBatch);
  const size_t n = (spans.size() + maxSpansPerBatch - 1) / maxSpansPerBatch;
  std::vector<nlohmann::json> out;
  out.reserve(n);
  for (size_t b = 0; b < n; ++b) {
    nlohmann::json arr = nlohmann::json::array();
    const size_t lo = b * maxSpansPerBatch, hi = std::min(spans.size(), lo + maxSpansPerBatch);
    arr.get_ref<nlohmann::json::array_t&>().reserve(hi - lo);
    for (size_t i = lo; i < hi; ++i) arr.push_back(toJson(spans[i]));
    out.push_back({{"rank", info.rank},
                   {"window", info.window},
                   {"batch", b},
                   {"batches", n},
                   {"first_step", info.first_step},
                   {"last_step", info.last_step},
                   {"epoch_unix_ns", info.epoch_unix_ns},
                   {"spans", std::move(arr)}});
  }
  return out;
}

std::vector<nlohmann::json> kernelsBatches(const ProfileWindow& window, int rank,
                                           int64_t epochUnixNs, size_t maxSpansPerBatch) {
  return kernelsBatches(
      window.spans,
      KernelsBatchInfo{rank, window.index, window.firstStep, window.lastStep, epochUnixNs},
      maxSpansPerBatch);
}

std::vector<Span> spansFromKernelsEvent(const nlohmann::json& event) {
  const std::string where = "kernels";
  const int rank = static_cast<int>(intFieldOr(event, "rank", where, 0));
  const auto& arr = field(event, "spans", where);
  if (!arr.is_array()) bad(where + ".spans", "expected an array");
  std::vector<Span> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    try {
      out.push_back(spanFromJson(arr[i], rank));
    } catch (const std::invalid_argument& e) {
      // Re-anchor "span.x" to "kernels.spans[i].x".
      std::string msg = e.what();
      if (msg.rfind("span", 0) == 0) msg = msg.substr(4);
      throw std::invalid_argument(where + ".spans[" + std::to_string(i) + "]" + msg);
    }
  }
  return out;
}

}  // namespace ts::profiler
