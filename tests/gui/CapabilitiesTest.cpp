#include <gtest/gtest.h>

#include "trainscope/gui/Capabilities.h"

using namespace ts::gui;

static const char* kCaps = R"({
  "backends": [{"name": "cpu", "compiled": true, "usable": true},
               {"name": "cuda", "compiled": false, "usable": false, "why": "not built"}],
  "devices": [{"kind": "cpu", "name": "EPYC", "memory_bytes": 25769803776, "features": ["avx2", "fma"]}],
  "cpu": {"model": "EPYC", "threads": 2, "features": ["avx2", "fma"]},
  "precisions": {"fp32": {"supported": true}, "bf16": {"supported": false, "why": "later"}},
  "techniques": {"zero": {"supported": false, "why": "needs MPI"}, "lora": {"supported": true}}
})";

TEST(Capabilities, SummaryNamesCpuFeaturesAndMemory) {
  const auto s = summarizeCapabilities(nlohmann::json::parse(kCaps));
  EXPECT_TRUE(s.known);
  EXPECT_FALSE(s.cudaAvailable);
  EXPECT_EQ(s.deviceMemory, 25769803776);
  EXPECT_TRUE(s.text.contains("AVX2")) << s.text.toStdString();
  EXPECT_TRUE(s.text.contains("2 threads"));
  EXPECT_TRUE(s.text.contains("no GPU"));
}

TEST(Capabilities, GpuMemoryIsTheCapacity) {
  auto caps = nlohmann::json::parse(kCaps);
  caps["devices"].push_back({{"kind", "cuda"}, {"name", "H200"}, {"memory_bytes", 150000000000}});
  const auto s = summarizeCapabilities(caps);
  EXPECT_TRUE(s.cudaAvailable);
  EXPECT_EQ(s.deviceMemory, 150000000000);
  EXPECT_TRUE(s.text.contains("H200"));
}

TEST(Capabilities, UnsupportedTechniquesBecomeIssuesWithTheEnginesReason) {
  const auto caps = nlohmann::json::parse(kCaps);
  ts::core::RunConfig c;
  EXPECT_TRUE(engineLimitations(caps, c).empty());  // fp32, nothing else on
  c.precision.policy = "bf16";
  c.parallel.ranks = 2;
  c.parallel.zero_stage = 2;
  c.finetune.lora.r = 8;  // supported: no issue
  const auto issues = engineLimitations(caps, c);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].path, "precision.policy");
  EXPECT_NE(issues[0].message.find("later"), std::string::npos);
  EXPECT_EQ(issues[1].path, "parallel.zero_stage");
  EXPECT_NE(issues[1].message.find("needs MPI"), std::string::npos);
  EXPECT_TRUE(engineLimitations(nlohmann::json(), c).empty());  // unknown: no verdict
}

// Restrictions per backend: what runs on the cpu backend only is refused for cuda, and a
// backend without a usable device is refused itself ("auto" is cuda only where one answers).
TEST(Capabilities, BackendRestrictionsFollowTheChosenBackend) {
  auto caps = nlohmann::json::parse(kCaps);
  caps["precisions"]["bf16"] = {
      {"supported", true}, {"backends", {"cpu"}}, {"backends_why", "cpu only so far"}};
  ts::core::RunConfig c;
  c.precision.policy = "bf16";
  c.device.backend = "cpu";
  EXPECT_TRUE(engineLimitations(caps, c).empty());
  c.device.backend = "auto";  // no usable GPU: auto is cpu
  EXPECT_TRUE(engineLimitations(caps, c).empty());
  c.device.backend = "cuda";
  auto issues = engineLimitations(caps, c);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].path, "precision.policy");
  EXPECT_NE(issues[0].message.find("cuda backend"), std::string::npos) << issues[0].message;
  EXPECT_NE(issues[0].message.find("cpu only so far"), std::string::npos);
  EXPECT_EQ(issues[1].path, "device.backend");
  EXPECT_NE(issues[1].message.find("not built"), std::string::npos) << issues[1].message;
  // With a usable GPU, auto means cuda: bf16 is refused, the backend is not.
  caps["backends"][1]["usable"] = true;
  c.device.backend = "auto";
  issues = engineLimitations(caps, c);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "precision.policy");
  c.precision.policy = "fp32";
  EXPECT_TRUE(engineLimitations(caps, c).empty());
}

// precision.gemm "auto" follows the engine's machine: bf16 GEMMs only where it says so.
TEST(Capabilities, AutoGemmComesFromTheEngine) {
  auto caps = nlohmann::json::parse(kCaps);
  EXPECT_FALSE(summarizeCapabilities(caps).nativeBf16Gemm);  // not stated: fp32
  caps["precisions"]["bf16"] = {{"supported", true}, {"native_gemm", false}, {"auto_gemm", "fp32"}};
  EXPECT_FALSE(summarizeCapabilities(caps).nativeBf16Gemm);
  caps["precisions"]["bf16"]["auto_gemm"] = "bf16";
  EXPECT_TRUE(summarizeCapabilities(caps).nativeBf16Gemm);
}
