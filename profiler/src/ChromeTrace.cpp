#include "trainscope/profiler/ChromeTrace.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace ts::profiler {

namespace {

// Hand-written writer: a 10-step profile is ~100k events and nlohmann's DOM would double the
// time and memory. Strings go through a JSON escaper; numbers through to_chars.
void appendEscaped(std::string& out, std::string_view s) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

template <typename T>
void appendInt(std::string& out, T v) {
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

void appendDouble(std::string& out, double v) {
  if (!std::isfinite(v)) v = 0;  // JSON has no inf/nan
  char buf[32];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

// ns -> microseconds with exactly three decimals, computed in integers (no rounding drift).
void appendMicros(std::string& out, int64_t ns) {
  if (ns < 0) {
    out.push_back('-');
    ns = -ns;
  }
  appendInt(out, ns / 1000);
  int64_t frac = ns % 1000;
  out.push_back('.');
  out.push_back(static_cast<char>('0' + frac / 100));
  out.push_back(static_cast<char>('0' + frac / 10 % 10));
  out.push_back(static_cast<char>('0' + frac % 10));
}

int tidOf(const Span& s) {
  return s.device ? kDeviceTidBase + s.lane : s.lane;
}

void appendMeta(std::string& out, const char* what, int pid, int tid, const std::string& name) {
  out += "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":";
  appendInt(out, pid);
  out += ",\"tid\":";
  appendInt(out, tid);
  out += ",\"args\":{\"name\":";
  appendEscaped(out, name);
  out += "}}";
}

void appendSortIndex(std::string& out, int pid, int tid, int index) {
  out += "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":";
  appendInt(out, pid);
  out += ",\"tid\":";
  appendInt(out, tid);
  out += ",\"args\":{\"sort_index\":";
  appendInt(out, index);
  out += "}}";
}

}  // namespace

std::string chromeTraceJson(const std::vector<Span>& spans,
                            const std::vector<CounterSample>& counters,
                            const ChromeTraceOptions& options) {
  std::string out;
  out.reserve(spans.size() * 190 + counters.size() * 120 + 256);
  out += "{\"displayTimeUnit\":";
  appendEscaped(out, options.displayTimeUnit);
  out += ",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out.push_back(',');
    out.push_back('\n');
    first = false;
  };

  std::set<int> pids;
  std::set<std::pair<int, int>> tids;  // (pid, tid)
  for (const Span& s : spans) {
    pids.insert(s.rank);
    tids.insert({s.rank, tidOf(s)});
    sep();
    out += "{\"ph\":\"X\",\"name\":";
    appendEscaped(out, s.name);
    out += ",\"cat\":\"";
    out += toString(s.category);
    out += "\",\"pid\":";
    appendInt(out, s.rank);
    out += ",\"tid\":";
    appendInt(out, tidOf(s));
    out += ",\"ts\":";
    appendMicros(out, s.start_ns);
    out += ",\"dur\":";
    appendMicros(out, std::max<int64_t>(0, s.duration_ns));
    out += ",\"args\":{\"bytes\":";
    appendInt(out, s.bytes);
    out += ",\"flops\":";
    appendDouble(out, s.flops);
    out += ",\"correlation\":";
    appendInt(out, s.correlation);
    out += ",\"step\":";
    appendInt(out, s.step);
    out += "}}";
  }
  for (const CounterSample& c : counters) {
    pids.insert(c.rank);
    sep();
    out += "{\"ph\":\"C\",\"name\":";
    appendEscaped(out, c.name);
    out += ",\"pid\":";
    appendInt(out, c.rank);
    out += ",\"tid\":0,\"ts\":";
    appendMicros(out, c.time_ns);
    out += ",\"args\":{";
    bool firstArg = true;
    for (const auto& [k, v] : c.values) {
      if (!firstArg) out.push_back(',');
      firstArg = false;
      appendEscaped(out, k);
      out.push_back(':');
      appendDouble(out, v);
    }
    out += "}}";
  }
  for (int pid : pids) {
    sep();
    auto it = options.processNames.find(pid);
    appendMeta(out, "process_name", pid, 0,
               it != options.processNames.end() ? it->second : "rank " + std::to_string(pid));
  }
  for (const auto& [pid, tid] : tids) {
    std::string name;
    if (tid >= kDeviceTidBase) {
      name = "GPU stream " + std::to_string(tid - kDeviceTidBase);
    } else {
      auto it = options.laneNames.find({pid, tid});
      name = it != options.laneNames.end() ? it->second : "thread " + std::to_string(tid);
    }
    sep();
    appendMeta(out, "thread_name", pid, tid, name);
    sep();
    appendSortIndex(out, pid, tid, tid);
  }
  out += "\n]}\n";
  return out;
}

void writeChromeTrace(std::ostream& out, const std::vector<Span>& spans,
                      const std::vector<CounterSample>& counters,
                      const ChromeTraceOptions& options) {
  out << chromeTraceJson(spans, counters, options);
}

bool writeChromeTrace(const std::string& path, const std::vector<Span>& spans,
                      const std::vector<CounterSample>& counters, const ChromeTraceOptions& options,
                      std::string* error) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) {
    if (error) *error = "cannot open " + path + " for writing: " + std::strerror(errno);
    return false;
  }
  const std::string json = chromeTraceJson(spans, counters, options);
  f.write(json.data(), static_cast<std::streamsize>(json.size()));
  f.close();
  if (!f) {
    if (error) *error = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace ts::profiler
