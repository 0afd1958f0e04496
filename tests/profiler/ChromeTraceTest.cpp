// Chrome Trace Event Format export: parse the JSON back and check every field of every event.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/ChromeTrace.h"

using namespace ts::profiler;

namespace {

std::vector<Span> sampleSpans() {
  std::vector<Span> out;
  auto add = [&](std::string name, SpanCategory c, int rank, int lane, bool dev, int64_t start,
                 int64_t dur, int64_t step) {
    Span s;
    s.name = std::move(name);
    s.category = c;
    s.rank = rank;
    s.lane = lane;
    s.device = dev;
    s.start_ns = start;
    s.duration_ns = dur;
    s.step = step;
    s.bytes = start % 7;
    s.flops = static_cast<double>(dur) * 2;
    s.correlation = static_cast<uint64_t>(start) * 3;
    out.push_back(s);
  };
  add("step", SpanCategory::Step, 0, 0, false, 1000, 9000, 1);
  add("matmul \"q\"\n", SpanCategory::Gemm, 0, 0, false, 1500, 2500, 1);
  add("omp chunk", SpanCategory::Gemm, 0, 1, false, 1600, 1234567, 1);
  add("sgemm_kernel", SpanCategory::Gemm, 0, 7, true, 2001, 999, 1);
  add("allreduce", SpanCategory::Communication, 1, 0, false, 5000, 0, 1);
  add("memcpy HtoD", SpanCategory::Memcpy, 1, 7, true, 6000, 17, 1);
  return out;
}

// Every X event, checked field by field against the span it came from.
void checkTrace(const nlohmann::json& t, const std::vector<Span>& spans,
                const std::vector<CounterSample>& counters) {
  ASSERT_TRUE(t.is_object());
  ASSERT_TRUE(t.contains("traceEvents"));
  ASSERT_TRUE(t["traceEvents"].is_array());
  EXPECT_EQ(t.at("displayTimeUnit"), "ms");
  std::vector<nlohmann::json> xs, cs;
  std::map<int, std::string> processNames;
  std::map<std::pair<int, int>, std::string> threadNames;
  for (const auto& e : t["traceEvents"]) {
    ASSERT_TRUE(e.is_object());
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    ASSERT_TRUE(e.contains("pid") && e["pid"].is_number_integer());
    ASSERT_TRUE(e.contains("tid") && e["tid"].is_number_integer());
    ASSERT_TRUE(e.contains("name") && e["name"].is_string());
    const std::string ph = e["ph"];
    if (ph == "X") {
      xs.push_back(e);
    } else if (ph == "C") {
      cs.push_back(e);
    } else if (ph == "M") {
      ASSERT_TRUE(e["args"].is_object());
      if (e["name"] == "process_name")
        processNames[e["pid"]] = e["args"].at("name");
      else if (e["name"] == "thread_name")
        threadNames[{e["pid"], e["tid"]}] = e["args"].at("name");
      else
        EXPECT_EQ(e["name"], "thread_sort_index");
    } else {
      ADD_FAILURE() << "unexpected phase " << ph;
    }
  }
  ASSERT_EQ(xs.size(), spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& e = xs[i];
    const Span& s = spans[i];
    ASSERT_TRUE(e["ts"].is_number());
    ASSERT_TRUE(e["dur"].is_number());
    EXPECT_EQ(e["name"], s.name);
    EXPECT_EQ(e["cat"], toString(s.category));
    EXPECT_EQ(e["pid"], s.rank);
    EXPECT_EQ(e["tid"], s.device ? kDeviceTidBase + s.lane : s.lane);
    EXPECT_NEAR(e["ts"].get<double>(), s.start_ns / 1000.0, 1e-9);
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_NEAR(e["dur"].get<double>(), s.duration_ns / 1000.0, 1e-9);
    const auto& a = e.at("args");
    EXPECT_EQ(a.at("bytes"), s.bytes);
    EXPECT_DOUBLE_EQ(a.at("flops").get<double>(), s.flops);
    EXPECT_EQ(a.at("correlation").get<uint64_t>(), s.correlation);
    EXPECT_EQ(a.at("step"), s.step);
    // Metadata names every process and every lane that has events.
    EXPECT_TRUE(processNames.count(s.rank)) << s.rank;
    EXPECT_TRUE(threadNames.count({e["pid"], e["tid"]})) << e.dump();
  }
  ASSERT_EQ(cs.size(), counters.size());
  for (size_t i = 0; i < counters.size(); ++i) {
    EXPECT_EQ(cs[i]["name"], counters[i].name);
    EXPECT_EQ(cs[i]["pid"], counters[i].rank);
    EXPECT_NEAR(cs[i]["ts"].get<double>(), counters[i].time_ns / 1000.0, 1e-9);
    ASSERT_EQ(cs[i]["args"].size(), counters[i].values.size());
    for (const auto& [k, v] : counters[i].values) EXPECT_DOUBLE_EQ(cs[i]["args"].at(k), v);
  }
}

}  // namespace

TEST(ChromeTrace, EveryEventHasValidFields) {
  auto spans = sampleSpans();
  std::vector<CounterSample> counters = {
      {0, 1000, "memory", {{"parameters", 4096}, {"activations", 123456789}}},
      {1, 2500, "memory", {{"parameters", 8192}}},
  };
  ChromeTraceOptions opt;
  opt.laneNames[{0, 1}] = "omp worker 1";
  opt.processNames[1] = "rank 1 (node b)";
  auto t = nlohmann::json::parse(chromeTraceJson(spans, counters, opt));
  checkTrace(t, spans, counters);

  std::map<std::pair<int, int>, std::string> names;
  std::set<int> procs;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "M") continue;
    if (e["name"] == "thread_name") names[{e["pid"], e["tid"]}] = e["args"]["name"];
    if (e["name"] == "process_name") procs.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(procs, (std::set<int>{0, 1}));
  EXPECT_EQ(names.size(), 5u);  // (0,0) (0,1) (0,dev7) (1,0) (1,dev7)
  EXPECT_EQ(names[std::make_pair(0, 0)], "thread 0");
  EXPECT_EQ(names[std::make_pair(0, 1)], "omp worker 1");
  EXPECT_EQ(names[std::make_pair(0, kDeviceTidBase + 7)], "GPU stream 7");
  for (const auto& e : t["traceEvents"]) {
    if (e["name"] == "process_name" && e["pid"] == 1) {
      EXPECT_EQ(e["args"]["name"], "rank 1 (node b)");
    }
  }
}

TEST(ChromeTrace, MicrosecondsAreExactAndNegativeStartsKept) {
  Span s;
  s.name = "x";
  s.start_ns = -1234567;  // a device record slightly before the epoch
  s.duration_ns = 1001;
  std::string json = chromeTraceJson({s});
  EXPECT_NE(json.find("\"ts\":-1234.567"), std::string::npos) << json;
  EXPECT_NE(json.find("\"dur\":1.001"), std::string::npos) << json;
  auto t = nlohmann::json::parse(json);
  checkTrace(t, {s}, {});
}

TEST(ChromeTrace, EmptyTraceIsValid) {
  auto t = nlohmann::json::parse(chromeTraceJson({}));
  EXPECT_TRUE(t["traceEvents"].empty());
}

TEST(ChromeTrace, FromRecordedKernelsEventsAndToFile) {
  // The run store's path: kernels events -> spans -> trace file.
  auto spans = sampleSpans();
  std::vector<Span> rank0;
  for (const Span& s : spans)
    if (s.rank == 0) rank0.push_back(s);
  std::vector<Span> back;
  for (const auto& b : kernelsBatches(rank0, KernelsBatchInfo{0, 0, 1, 1, 0}, 2)) {
    auto part = spansFromKernelsEvent(nlohmann::json::parse(b.dump()));
    back.insert(back.end(), part.begin(), part.end());
  }
  const std::string path = ::testing::TempDir() + "trace_" + std::to_string(::getpid()) + ".json";
  std::string err;
  ASSERT_TRUE(writeChromeTrace(path, back, {}, {}, &err)) << err;
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  checkTrace(nlohmann::json::parse(ss.str()), rank0, {});
  std::remove(path.c_str());

  EXPECT_FALSE(writeChromeTrace("/nonexistent-dir/x.json", back, {}, {}, &err));
  EXPECT_NE(err.find("/nonexistent-dir/x.json"), std::string::npos);
}

TEST(ChromeTrace, LiveTracerSpansExport) {
  Tracer& t = Tracer::instance();
  t.drain();
  t.setEnabled(true);
  {
    ScopedRange a("outer", SpanCategory::Block);
    ScopedRange b("inner", SpanCategory::Norm);
  }
  t.setEnabled(false);
  auto spans = t.drain();
  ASSERT_EQ(spans.size(), 2u);
  ChromeTraceOptions opt;
  for (const auto& [lane, name] : t.laneNames()) opt.laneNames[{0, lane}] = name;
  checkTrace(nlohmann::json::parse(chromeTraceJson(spans, {}, opt)), spans, {});
}
