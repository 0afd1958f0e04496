// precision.gemm "auto": the rule on measured rates, the cache per machine in the data
// directory (written once, trusted only for this machine's key, a broken one measured again),
// and the forced choice through TRAINSCOPE_GEMM_AUTO as `capabilities` reports it. No timing is
// asserted: which GEMM is faster is this machine's business, only that every reader agrees.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "../../support/TrainerHarness.h"
#include "trainscope/engine/platform/GemmCalibration.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testsupport::scratchDir;

// A cache file holding this machine's entry (as another process would have written it) and one
// of another machine.
void writeCache(const std::string& file, const std::string& key, const std::string& choice) {
  const json entry = {{"fp32_gflops", 100.0}, {"bf16_gflops", 90.0}, {"choice", choice}};
  const json other = {{"fp32_gflops", 1.0}, {"bf16_gflops", 9.0}, {"choice", "bf16"}};
  std::ofstream(file)
      << json{{"machines", {{key, entry}, {"Other CPU | x | 64 threads", other}}}}.dump();
}

json readJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

bool native() {
  return kernels::cpu::matmulBf16Native();
}

TEST(GemmCalibration, RulePicksBf16OnlyWhenNativeAndClearlyFaster) {
  EXPECT_EQ(chooseGemm(false, 100, 400), "fp32");  // the emulation is never what auto means
  EXPECT_EQ(chooseGemm(true, 100, 100), "fp32");
  EXPECT_EQ(chooseGemm(true, 100, 114), "fp32");  // within noise of sgemm
  EXPECT_EQ(chooseGemm(true, 100, 116), "bf16");
  EXPECT_EQ(chooseGemm(true, 100, 200), "bf16");
  EXPECT_EQ(chooseGemm(true, 0, 200), "fp32");  // nothing measured
}

TEST(GemmCalibration, MeasuresOnceThenEveryReaderGetsTheCachedResult) {
  const auto d = scratchDir("gemmcal_cache");
  const auto file = (d / "sub" / "gemm-calibration.json").string();
  const GemmCalibration first = calibrateGemm(file);
  if (!native()) {
    EXPECT_EQ(first.source, "no native kernel");
    EXPECT_EQ(first.choice, "fp32");
    EXPECT_FALSE(fs::exists(file));  // nothing to measure, nothing to cache
    return;
  }
  EXPECT_EQ(first.source, "measured");
  EXPECT_GT(first.fp32Gflops, 0);
  EXPECT_GT(first.bf16Gflops, 0);
  EXPECT_EQ(first.choice, chooseGemm(true, first.fp32Gflops, first.bf16Gflops));
  EXPECT_EQ(first.cacheProblem, "");
  const json j = readJson(file);
  ASSERT_TRUE(j["machines"].contains(first.key)) << j.dump();
  EXPECT_EQ(j["machines"][first.key]["choice"], first.choice);
  const GemmCalibration second = calibrateGemm(file);
  EXPECT_EQ(second.source, "cached");
  EXPECT_EQ(second.choice, first.choice);
  EXPECT_DOUBLE_EQ(second.fp32Gflops, first.fp32Gflops);
  EXPECT_DOUBLE_EQ(second.bf16Gflops, first.bf16Gflops);
}

TEST(GemmCalibration, TrustsOnlyThisMachinesValidEntry) {
  if (!native()) GTEST_SKIP() << "no native bf16 GEMM here: auto is fp32 without measuring";
  const auto d = scratchDir("gemmcal_entries");
  const auto file = (d / "gemm-calibration.json").string();
  const std::string key = calibrateGemm("").key;
  // Another process measured first (and found fp32 faster): this one agrees with it.
  writeCache(file, key, "fp32");
  GemmCalibration c = calibrateGemm(file);
  EXPECT_EQ(c.source, "cached");
  EXPECT_EQ(c.choice, "fp32");
  // An entry out of range is measured again, said, and replaced; other machines' entries stay.
  writeCache(file, key, "maybe");
  c = calibrateGemm(file);
  EXPECT_EQ(c.source, "measured");
  EXPECT_NE(c.cacheProblem.find(file + ": ignored"), std::string::npos) << c.cacheProblem;
  json j = readJson(file);
  EXPECT_EQ(j["machines"][key]["choice"], c.choice);
  EXPECT_TRUE(j["machines"].contains("Other CPU | x | 64 threads"));
  // Not JSON at all: measured again and rewritten.
  std::ofstream(file) << "{\"machines\": ";
  c = calibrateGemm(file);
  EXPECT_EQ(c.source, "measured");
  EXPECT_NE(c.cacheProblem.find(file + ": ignored"), std::string::npos) << c.cacheProblem;
  EXPECT_EQ(readJson(file)["machines"][key]["choice"], c.choice);
}

// The real binary, its environment set as a user would.
json capabilitiesWith(const std::string& forced, const fs::path& dataHome) {
  const std::string cmd =
      "env XDG_DATA_HOME=" + dataHome.string() + " TRAINSCOPE_DB= " +
      (forced.empty() ? std::string() : "TRAINSCOPE_GEMM_AUTO=" + forced + " ") +
      TRAINSCOPE_ENGINE_BIN + " capabilities --json";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return json::parse(out, nullptr, false);
}

TEST(GemmCalibration, CapabilitiesReportTheChoiceAndHowItWasMade) {
  const auto d = scratchDir("gemmcal_caps");
  const json measured = capabilitiesWith("", d);
  ASSERT_FALSE(measured.is_discarded());
  const json& bf16 = measured["precisions"]["bf16"];
  const json& cal = bf16["gemm_calibration"];
  EXPECT_EQ(bf16["auto_gemm"], cal["choice"]);
  EXPECT_EQ(cal["source"], native() ? "measured" : "no native kernel");
  if (native()) {
    EXPECT_EQ(cal["cache"], (d / "trainscope" / "gemm-calibration.json").string());
    EXPECT_TRUE(fs::exists(d / "trainscope" / "gemm-calibration.json"));
    EXPECT_EQ(capabilitiesWith("", d)["precisions"]["bf16"]["gemm_calibration"]["source"],
              "cached");
  }
  const json fp32 = capabilitiesWith("fp32", d);
  EXPECT_EQ(fp32["precisions"]["bf16"]["auto_gemm"], "fp32");
  const json forced = capabilitiesWith("bf16", d);
  EXPECT_EQ(forced["precisions"]["bf16"]["auto_gemm"], native() ? "bf16" : "fp32");
  EXPECT_EQ(forced["precisions"]["bf16"]["gemm_calibration"]["source"],
            native() ? "forced" : "no native kernel");
  const json bad = capabilitiesWith("fast", d);
  EXPECT_NE(bad["precisions"]["bf16"]["gemm_calibration"]["cache_problem"].get<std::string>().find(
                "TRAINSCOPE_GEMM_AUTO='fast' ignored (allowed: bf16, fp32)"),
            std::string::npos);
  // What fp16 and fp8 do on this CPU.
  EXPECT_NE(measured["precisions"]["fp16"]["gemm"].get<std::string>().find("fp32 math"),
            std::string::npos);
  EXPECT_NE(measured["precisions"]["fp8"]["gemm"].get<std::string>().find("emulated"),
            std::string::npos);
}

}  // namespace
}  // namespace ts::engine
