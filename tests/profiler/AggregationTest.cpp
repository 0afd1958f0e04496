// Per-window summary arithmetic against hand-computed values, the kernel_summary JSON, and the
// bounded `kernels` batches round-tripping through JSON text.
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "trainscope/profiler/Aggregation.h"

using namespace ts::profiler;

namespace {

Span mk(const std::string& name, SpanCategory cat, int64_t start, int64_t dur, bool device = false,
        int64_t bytes = 0, double flops = 0) {
  Span s;
  s.name = name;
  s.category = cat;
  s.start_ns = start;
  s.duration_ns = dur;
  s.device = device;
  s.bytes = bytes;
  s.flops = flops;
  return s;
}

// Two steps of 1000 ns each. Hand-computed below.
std::vector<Span> synthetic() {
  return {
      mk("step", SpanCategory::Step, 0, 1000),
      mk("matmul", SpanCategory::Gemm, 10, 100, false, 0, 1e6),
      mk("ln", SpanCategory::Norm, 120, 40),
      mk("matmul", SpanCategory::Gemm, 200, 300, false, 0, 3e6),
      mk("matmul", SpanCategory::Gemm, 220, 50, true, 4096),
      mk("step", SpanCategory::Step, 1000, 1000),
      mk("matmul", SpanCategory::Gemm, 1010, 200, false, 0, 2e6),
      mk("ln", SpanCategory::Norm, 1300, 60),
  };
}

const OpSummary* op(const WindowSummary& s, const std::string& name, bool device) {
  for (const auto& o : s.ops)
    if (o.name == name && o.device == device) return &o;
  return nullptr;
}

}  // namespace

TEST(Summary, ArithmeticMatchesHandComputedValues) {
  WindowSummary s = summarize(synthetic());
  EXPECT_EQ(s.step_time_ns, 2000);  // sum of the Step spans
  ASSERT_EQ(s.ops.size(), 4u);
  // Sorted by total: step 2000, matmul(host) 600, ln 100, matmul(device) 50.
  EXPECT_EQ(s.ops[0].name, "step");
  EXPECT_EQ(s.ops[1].name, "matmul");
  EXPECT_FALSE(s.ops[1].device);
  EXPECT_EQ(s.ops[2].name, "ln");
  EXPECT_TRUE(s.ops[3].device);

  const OpSummary* mm = op(s, "matmul", false);
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->category, SpanCategory::Gemm);
  EXPECT_EQ(mm->count, 3);
  EXPECT_EQ(mm->total_ns, 600);
  EXPECT_DOUBLE_EQ(mm->mean_ns, 200.0);
  EXPECT_EQ(mm->min_ns, 100);
  EXPECT_EQ(mm->max_ns, 300);
  EXPECT_DOUBLE_EQ(mm->pct_of_step, 30.0);
  EXPECT_DOUBLE_EQ(mm->flops, 6e6);

  const OpSummary* dev = op(s, "matmul", true);
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(dev->count, 1);
  EXPECT_DOUBLE_EQ(dev->pct_of_step, 2.5);
  EXPECT_EQ(dev->bytes, 4096);

  const OpSummary* ln = op(s, "ln", false);
  ASSERT_NE(ln, nullptr);
  EXPECT_EQ(ln->total_ns, 100);
  EXPECT_DOUBLE_EQ(ln->mean_ns, 50.0);
  EXPECT_EQ(ln->min_ns, 40);
  EXPECT_EQ(ln->max_ns, 60);
  EXPECT_DOUBLE_EQ(ln->pct_of_step, 5.0);
  EXPECT_DOUBLE_EQ(op(s, "step", false)->pct_of_step, 100.0);
}

TEST(Summary, StepTimeDenominatorChoices) {
  EXPECT_DOUBLE_EQ(op(summarize(synthetic(), 4000), "matmul", false)->pct_of_step, 15.0);
  // No Step spans, no step time: the extent of the spans (10 .. 1360 -> 1350 ns).
  std::vector<Span> noSteps;
  for (const Span& s : synthetic())
    if (s.category != SpanCategory::Step) noSteps.push_back(s);
  WindowSummary s = summarize(noSteps);
  EXPECT_EQ(s.step_time_ns, 1350);
  EXPECT_NEAR(op(s, "matmul", false)->pct_of_step, 100.0 * 600 / 1350, 1e-12);
  EXPECT_TRUE(summarize(std::vector<Span>{}).ops.empty());
}

TEST(Summary, FromWindowPrefersStepSpansAndCarriesMetadata) {
  ProfileWindow w;
  w.index = 4;
  w.firstStep = 10;
  w.lastStep = 11;
  w.onDemand = true;
  w.stepTimeNs = 999999;  // ignored: Step spans exist
  w.droppedDeviceRecords = 7;
  w.spans = synthetic();
  WindowSummary s = summarize(w, 1);
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.window, 4);
  EXPECT_EQ(s.first_step, 10);
  EXPECT_EQ(s.last_step, 11);
  EXPECT_TRUE(s.on_demand);
  EXPECT_EQ(s.dropped_records, 7);
  EXPECT_EQ(s.step_time_ns, 2000);
  w.spans.erase(w.spans.begin());      // first step span
  w.spans.erase(w.spans.begin() + 4);  // second step span: no Step spans left
  EXPECT_EQ(summarize(w).step_time_ns, 999999);
}

TEST(Summary, JsonFieldsAndRoundTrip) {
  ProfileWindow w;
  w.index = 2;
  w.firstStep = 5;
  w.lastStep = 6;
  w.spans = synthetic();
  nlohmann::json j = toJson(summarize(w, 3));
  EXPECT_EQ(j.at("rank"), 3);
  EXPECT_EQ(j.at("window"), 2);
  EXPECT_EQ(j.at("first_step"), 5);
  EXPECT_EQ(j.at("last_step"), 6);
  EXPECT_EQ(j.at("steps"), 2);
  EXPECT_EQ(j.at("on_demand"), false);
  EXPECT_DOUBLE_EQ(j.at("step_time_ms").get<double>(), 0.002);
  EXPECT_EQ(j.at("dropped_records"), 0);
  ASSERT_EQ(j.at("ops").size(), 4u);
  const auto& mm = j.at("ops")[1];
  EXPECT_EQ(mm.at("name"), "matmul");
  EXPECT_EQ(mm.at("category"), "gemm");
  EXPECT_EQ(mm.at("device"), false);
  EXPECT_EQ(mm.at("count"), 3);
  EXPECT_DOUBLE_EQ(mm.at("total_ms").get<double>(), 0.0006);
  EXPECT_DOUBLE_EQ(mm.at("mean_ms").get<double>(), 0.0002);
  EXPECT_DOUBLE_EQ(mm.at("min_ms").get<double>(), 0.0001);
  EXPECT_DOUBLE_EQ(mm.at("max_ms").get<double>(), 0.0003);
  EXPECT_DOUBLE_EQ(mm.at("pct_of_step").get<double>(), 30.0);
  EXPECT_EQ(mm.at("bytes"), 0);
  EXPECT_DOUBLE_EQ(mm.at("flops").get<double>(), 6e6);

  WindowSummary back = windowSummaryFromJson(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.step_time_ns, 2000);
  ASSERT_EQ(back.ops.size(), 4u);
  EXPECT_EQ(back.ops[1].total_ns, 600);
  EXPECT_EQ(back.ops[1].min_ns, 100);
  EXPECT_EQ(back.ops[1].category, SpanCategory::Gemm);

  nlohmann::json bad = j;
  bad["ops"][1].erase("count");
  try {
    windowSummaryFromJson(bad);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kernel_summary.ops[1].count: missing");
  }
}

TEST(KernelsBatches, BoundedAndRoundTripThroughJsonText) {
  std::vector<Span> spans;
  for (int i = 0; i < 10; ++i) {
    Span s =
        mk("op\"" + std::to_string(i) + "\\", i % 2 ? SpanCategory::Attention : SpanCategory::IO,
           1000 * i - 500, 10 * i, i == 3, i * 7, i * 1.5);
    s.rank = 2;
    s.lane = i % 3;
    s.depth = i % 2;
    s.step = 40 + i / 5;
    s.correlation = (uint64_t{1} << 63) | static_cast<uint64_t>(i);
    spans.push_back(s);
  }
  KernelsBatchInfo info{2, 1, 40, 41, 1700000000123456789};
  auto batches = kernelsBatches(spans, info, 3);
  ASSERT_EQ(batches.size(), 4u);
  std::vector<Span> back;
  for (size_t b = 0; b < batches.size(); ++b) {
    const auto& j = batches[b];
    EXPECT_LE(j.at("spans").size(), 3u);
    EXPECT_EQ(j.at("spans").size(), b < 3 ? 3u : 1u);
    EXPECT_EQ(j.at("rank"), 2);
    EXPECT_EQ(j.at("window"), 1);
    EXPECT_EQ(j.at("batch"), b);
    EXPECT_EQ(j.at("batches"), 4);
    EXPECT_EQ(j.at("first_step"), 40);
    EXPECT_EQ(j.at("last_step"), 41);
    EXPECT_EQ(j.at("epoch_unix_ns").get<int64_t>(), 1700000000123456789);
    // As a whole event line, the way the run store reads it back.
    nlohmann::json event = j;
    event["type"] = "kernels";
    event["seq"] = 12;
    event["time"] = 1.5;
    auto part = spansFromKernelsEvent(nlohmann::json::parse(event.dump()));
    back.insert(back.end(), part.begin(), part.end());
  }
  ASSERT_EQ(back.size(), spans.size());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_EQ(back[i].name, spans[i].name);
    EXPECT_EQ(back[i].category, spans[i].category);
    EXPECT_EQ(back[i].rank, 2);
    EXPECT_EQ(back[i].lane, spans[i].lane);
    EXPECT_EQ(back[i].device, spans[i].device);
    EXPECT_EQ(back[i].start_ns, spans[i].start_ns);
    EXPECT_EQ(back[i].duration_ns, spans[i].duration_ns);
    EXPECT_EQ(back[i].depth, spans[i].depth);
    EXPECT_EQ(back[i].correlation, spans[i].correlation);
    EXPECT_EQ(back[i].bytes, spans[i].bytes);
    EXPECT_EQ(back[i].flops, spans[i].flops);
    EXPECT_EQ(back[i].step, spans[i].step);
  }
  EXPECT_TRUE(kernelsBatches({}, info).empty());
  EXPECT_EQ(kernelsBatches(spans, info, 0).size(), 10u);  // 0 means 1 per batch, not a hang
}

TEST(KernelsBatches, BadEventsNameTheField) {
  auto expectError = [](const nlohmann::json& j, const std::string& msg) {
    try {
      spansFromKernelsEvent(j);
      ADD_FAILURE() << "expected invalid_argument for " << j.dump();
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), msg);
    }
  };
  nlohmann::json ok = {{"name", "a"}, {"cat", "gemm"}, {"lane", 0}, {"start_ns", 1}, {"dur_ns", 2}};
  expectError({{"rank", 0}}, "kernels.spans: missing");
  expectError({{"spans", 3}}, "kernels.spans: expected an array");
  nlohmann::json noDur = ok;
  noDur.erase("dur_ns");
  expectError({{"spans", nlohmann::json::array({ok, noDur})}}, "kernels.spans[1].dur_ns: missing");
  nlohmann::json neg = ok;
  neg["dur_ns"] = -5;
  expectError({{"spans", nlohmann::json::array({neg})}}, "kernels.spans[0].dur_ns: must be >= 0");
  nlohmann::json str = ok;
  str["lane"] = "zero";
  expectError({{"spans", nlohmann::json::array({str})}},
              "kernels.spans[0].lane: expected an integer");
  expectError({{"spans", nlohmann::json::array({42})}}, "kernels.spans[0]: expected an object");
  // Optional fields default.
  auto spans = spansFromKernelsEvent({{"rank", 5}, {"spans", nlohmann::json::array({ok})}});
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].rank, 5);
  EXPECT_EQ(spans[0].step, -1);
  EXPECT_EQ(spans[0].depth, 0);
  EXPECT_FALSE(spans[0].device);
}
