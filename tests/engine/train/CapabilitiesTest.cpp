// What `capabilities` says the engine runs where (the GUI refuses by it) agrees with what a run
// refuses (unsupportedFeatures): every precision policy and activation compression on each
// backend, and every architecture offered.
#include <gtest/gtest.h>

#include <algorithm>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/engine/train/Capabilities.h"
#include "trainscope/engine/train/Trainer.h"

using namespace ts;

namespace {
bool refuses(const core::RunConfig& c, const std::string& path) {
  for (const auto& i : engine::unsupportedFeatures(c))
    if (i.path == path) return true;
  return false;
}
bool offeredOn(const nlohmann::json& entry, const std::string& backend) {
  if (!entry.value("supported", true)) return false;
  if (!entry.contains("backends")) return true;
  const auto& b = entry["backends"];
  return std::find(b.begin(), b.end(), backend) != b.end();
}
}  // namespace

TEST(Capabilities, AgreeWithWhatARunRefuses) {
  const auto caps = engine::capabilitiesJson();
  for (const std::string backend : {"cpu", "cuda"}) {
    for (const auto& [policy, entry] : caps.at("precisions").items()) {
      core::RunConfig c;
      c.device.backend = backend;
      c.precision.policy = policy;
      EXPECT_EQ(offeredOn(entry, backend), !refuses(c, "precision.policy"))
          << policy << " on " << backend;
    }
    core::RunConfig c;
    c.device.backend = backend;
    c.memory.activation_compression = "int8";
    EXPECT_EQ(offeredOn(caps.at("techniques").at("activation_compression"), backend),
              !refuses(c, "memory.activation_compression"))
        << "int8 compression on " << backend;
    c.memory.activation_compression = "sparse";
    c.model.activation = "relu";
    EXPECT_EQ(offeredOn(caps.at("techniques").at("activation_compression_sparse"), backend),
              !refuses(c, "memory.activation_compression"))
        << "sparse compression on " << backend;
  }
  ASSERT_TRUE(caps.contains("architectures"));
  for (const auto& arch : caps["architectures"]) {
    core::RunConfig c;
    c.model.arch = arch.get<std::string>();
    c.model.heads = 4;
    c.model.d_model = 64;
    EXPECT_TRUE(engine::unsupportedFeatures(c).empty()) << arch;
  }
}

// What the llama description refuses before a run starts, naming the key and the reason.
TEST(Capabilities, LlamaRefusalsNameTheKey) {
  core::RunConfig c;
  c.model.arch = "llama";
  c.model.heads = 4;
  c.model.d_model = 12;  // head dim 3: no rotary pairs
  c.memory.activation_compression = "sparse";
  const auto issues = engine::unsupportedFeatures(c);
  ASSERT_EQ(issues.size(), 2u);
  EXPECT_EQ(issues[0].path, "model.d_model");
  EXPECT_NE(issues[0].message.find("even head dimension"), std::string::npos);
  EXPECT_EQ(issues[1].path, "memory.activation_compression");
  EXPECT_NE(issues[1].message.find("use int8"), std::string::npos);
  c.model.arch = "gpt2";  // GQA belongs to the llama description
  c.model.d_model = 64;
  c.memory.activation_compression = "none";
  c.model.kv_heads = 2;
  ASSERT_EQ(engine::unsupportedFeatures(c).size(), 1u);
  EXPECT_EQ(engine::unsupportedFeatures(c)[0].path, "model.kv_heads");
}

// The families the engine trains, as the GUI and scripts read them: every registered family
// with its display name and the Hugging Face classes it reads.
TEST(Capabilities, ListEveryModelFamily) {
  const auto caps = ts::engine::capabilitiesJson();
  const auto names = ts::core::modelFamilyNames();
  ASSERT_EQ(caps["families"].size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& f = caps["families"][i];
    EXPECT_EQ(f["name"], names[i]);
    EXPECT_EQ(f["display_name"], ts::core::modelFamily(names[i]).displayName());
    EXPECT_EQ(f["hf_architectures"], ts::core::modelFamily(names[i]).hfArchitectures());
  }
  EXPECT_EQ(caps["architectures"], names);
}
