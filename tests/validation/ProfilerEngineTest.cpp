// The profiler inside the engine: it must not change training, a profiled window must cover
// the ops a step runs, its spans must export to a valid Chrome trace, and the stdin `profile`
// command must open a window mid-run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "Support.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/ChromeTrace.h"

using namespace ts;
using namespace ts::validation;
using nlohmann::json;

namespace {

core::RunConfig presetWith(const std::vector<std::string>& sets) {
  auto r =
      core::loadConfigWithOverrides(std::string(TRAINSCOPE_PRESET_DIR) + "/default.json", sets);
  EXPECT_TRUE(r.ok()) << (r.issues.empty() ? "" : r.issues.front().toString());
  return r.config.value_or(core::RunConfig{});
}

std::vector<double> losses(const Recorded& rec) {
  std::vector<double> out;
  for (const auto& s : rec.of(core::EventType::Step)) out.push_back(s["loss"].get<double>());
  return out;
}

bool bitwiseEqual(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

// Profiling only observes: with the whole run profiled, losses, grad norms and the final
// validation loss are bitwise those of the unprofiled run.
TEST(ProfilerEngine, ProfilingOnAndOffGiveBitwiseIdenticalTraining) {
  const std::vector<std::string> common = {"train.steps=6", "train.micro_batch=8",
                                           "train.eval_every=0", "device.threads=2"};
  auto off = presetWith(common);
  auto on = off;
  on.profile = {true, 0, 0, 3, 2};  // two back-to-back windows cover all six steps
  const fs::path dir = tempDir("onoff");
  Recorded recOff, recOn;
  auto rOff = runInProcess(off, recOff, (dir / "off").string());
  auto rOn = runInProcess(on, recOn, (dir / "on").string());
  fs::remove_all(dir);
  ASSERT_EQ(rOff.status, "completed") << rOff.reason;
  ASSERT_EQ(rOn.status, "completed") << rOn.reason;
  EXPECT_TRUE(recOff.of(core::EventType::KernelSummary).empty());
  ASSERT_EQ(recOn.of(core::EventType::KernelSummary).size(), 2u) << "profiling was not active";

  const auto a = losses(recOff), b = losses(recOn);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  const auto sa = recOff.of(core::EventType::Step), sb = recOn.of(core::EventType::Step);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(bitwiseEqual(a[i], b[i])) << "step " << i + 1 << ": " << a[i] << " vs " << b[i];
    EXPECT_TRUE(bitwiseEqual(sa[i]["grad_norm"].get<double>(), sb[i]["grad_norm"].get<double>()))
        << "step " << i + 1;
  }
  EXPECT_TRUE(bitwiseEqual(rOff.finalValLoss, rOn.finalValLoss));
  EXPECT_EQ(rOff.memory, rOn.memory);
}

// A 10-step profile of the default preset: one window, a summary whose every op is backed by
// the streamed spans (same count and total time), spans of every category a step runs, and a
// Chrome trace with one X event per span.
TEST(ProfilerEngine, TenStepProfileOfDefaultPresetExportsToChromeTrace) {
  auto c =
      presetWith({"train.steps=10", "train.eval_every=0", "profile.enabled=true", "profile.wait=0",
                  "profile.warmup=0", "profile.active=10", "profile.repeat=1", "device.threads=1"});
  const fs::path dir = tempDir("profile10");
  Recorded rec;
  auto r = runInProcess(c, rec, dir.string());
  fs::remove_all(dir);
  ASSERT_EQ(r.status, "completed") << r.reason;

  const auto summaries = rec.of(core::EventType::KernelSummary);
  ASSERT_EQ(summaries.size(), 1u);
  const auto summary = profiler::windowSummaryFromJson(summaries[0]);
  EXPECT_EQ(summary.first_step, 0);
  EXPECT_EQ(summary.last_step, 9);
  EXPECT_FALSE(summary.on_demand);

  std::vector<profiler::Span> spans;
  const auto batches = rec.of(core::EventType::Kernels);
  ASSERT_FALSE(batches.empty());
  for (const auto& b : batches) {
    EXPECT_EQ(b["rank"], 0);
    EXPECT_EQ(b["batches"].get<size_t>(), batches.size());
    auto part = profiler::spansFromKernelsEvent(b);
    EXPECT_LE(part.size(), profiler::kDefaultMaxSpansPerBatch);
    spans.insert(spans.end(), part.begin(), part.end());
  }

  // Every step of the window is in the spans, and every category a training step runs.
  std::set<int64_t> steps;
  std::set<std::string> cats;
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>> byOp;  // count, ns
  for (const auto& s : spans) {
    steps.insert(s.step);
    cats.insert(profiler::toString(s.category));
    auto& e = byOp[{s.name, profiler::toString(s.category)}];
    e.first += 1;
    e.second += s.duration_ns;
    EXPECT_GE(s.duration_ns, 0) << s.name;
  }
  for (int64_t st = 0; st < 10; ++st) EXPECT_TRUE(steps.count(st)) << "no spans for step " << st;
  for (const char* want : {"gemm", "attention", "norm", "optimizer", "step"})
    EXPECT_TRUE(cats.count(want)) << "no " << want << " spans in the profile";

  std::set<std::string> summaryCats;
  ASSERT_FALSE(summary.ops.empty());
  for (const auto& op : summary.ops) {
    summaryCats.insert(profiler::toString(op.category));
    auto it = byOp.find({op.name, profiler::toString(op.category)});
    ASSERT_NE(it, byOp.end()) << "summary op " << op.name << " has no spans";
    EXPECT_EQ(it->second.first, op.count) << op.name;
    EXPECT_EQ(it->second.second, op.total_ns) << op.name;
  }
  for (const char* want : {"gemm", "attention", "norm", "optimizer"})
    EXPECT_TRUE(summaryCats.count(want)) << "no " << want << " ops in kernel_summary";

  const auto t0 = std::chrono::steady_clock::now();
  const std::string trace = profiler::chromeTraceJson(spans);
  const double exportMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("chrome trace export: %zu spans -> %zu bytes in %.2f ms\n", spans.size(),
              trace.size(), exportMs);

  const json doc = json::parse(trace, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "export is not valid JSON";
  ASSERT_TRUE(doc.contains("traceEvents") && doc["traceEvents"].is_array());
  size_t xEvents = 0;
  std::set<std::string> xCats;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e["ph"].is_string());
    if (e["ph"] != "X") continue;
    ++xEvents;
    EXPECT_TRUE(e["name"].is_string());
    EXPECT_TRUE(e["cat"].is_string());
    EXPECT_TRUE(e["pid"].is_number_integer());
    EXPECT_TRUE(e["tid"].is_number_integer());
    EXPECT_TRUE(e["ts"].is_number());
    ASSERT_TRUE(e["dur"].is_number());
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    xCats.insert(e["cat"].get<std::string>());
  }
  EXPECT_EQ(xEvents, spans.size());
  EXPECT_EQ(xCats, cats);
}

// The stdin `profile` command on the real binary: profiling is off in the config; after step 3
// the test asks for the next 2 steps, and one on-demand window of exactly 2 later steps comes
// back. Then `stop` ends the long run.
TEST(E2eProfiler, StdinProfileCommandCapturesAWindowMidRun) {
  const fs::path dir = tempDir("stdinprofile");
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", "--set", "train.steps=100000", "--set",
                   "train.eval_every=0", "--set", "train.micro_batch=4", "--set",
                   "device.threads=1", std::string(TRAINSCOPE_PRESET_DIR) + "/default.json", "--db",
                   (dir / "runs.db").string(), "--run-dir", (dir / "run").string()});
  ASSERT_GT(c.pid, 0);
  auto isStep = [](const std::string& l, int64_t n) {
    auto j = json::parse(l, nullptr, false);
    return !j.is_discarded() && j.value("type", "") == "step" && j.value("step", int64_t(0)) >= n;
  };
  ASSERT_TRUE(c.readUntil([&](const std::string& l) { return isStep(l, 3); })) << "no step 3 event";
  c.send(R"({"cmd":"profile","steps":2})");
  const bool gotSummary = c.readUntil([](const std::string& l) {
    return l.find("\"type\":\"kernel_summary\"") != std::string::npos;
  });
  c.send(R"({"cmd":"stop"})");
  const int code = c.wait();
  fs::remove_all(dir);
  ASSERT_TRUE(gotSummary) << "no kernel_summary after the profile command";
  EXPECT_EQ(code, 0);

  int summaries = 0;
  int64_t kernelsSpans = 0;
  for (const auto& e : c.events()) {
    if (e["type"] == "kernel_summary") {
      ++summaries;
      EXPECT_TRUE(e.value("on_demand", false));
      EXPECT_GE(e["first_step"].get<int64_t>(), 3);
      EXPECT_EQ(e["last_step"].get<int64_t>() - e["first_step"].get<int64_t>(), 1);
      EXPECT_FALSE(e["ops"].empty());
    } else if (e["type"] == "kernels") {
      kernelsSpans += static_cast<int64_t>(e["spans"].size());
    }
  }
  EXPECT_EQ(summaries, 1);
  EXPECT_GT(kernelsSpans, 0);
  EXPECT_EQ(c.events().back()["type"], "finished");
}
