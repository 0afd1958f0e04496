// model.arch "auto": the run's model.* is its base's (a Hugging Face folder written by
// transformers, or a trainscope checkpoint's run config); explicit keys that disagree are
// listed, with the key, the value set and the base's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/HfConfig.h"

namespace ts::core {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kFamilies = fs::path(TRAINSCOPE_TEST_DATA) / "families";

nlohmann::json autoRun(const std::string& base) {
  return {{"model", {{"arch", "auto"}}}, {"finetune", {{"base_checkpoint", base}}}};
}

TEST(AutoArch, TakesEveryShapeKeyFromAHuggingFaceFolder) {
  for (const char* fam : {"qwen3", "gemma3", "phi3"}) {
    SCOPED_TRACE(fam);
    const std::string base = (kFamilies / fam).string();
    const auto r = parseConfigJson(autoRun(base));
    ASSERT_TRUE(r.ok()) << r.issues.front().toString();
    const ModelConfig want = readHfConfig(base).model;
    const ModelConfig& got = r.config->model;
    EXPECT_EQ(got.arch, fam);
    EXPECT_EQ(got.layers, want.layers);
    EXPECT_EQ(got.head_dim, want.head_dim);
    EXPECT_EQ(got.tie_embeddings, want.tie_embeddings);
    EXPECT_EQ(got.rope_scaling, want.rope_scaling);
    EXPECT_EQ(got.sliding_window, want.sliding_window);
    EXPECT_EQ(got.seq_len, std::min(want.seq_len, 1024));
  }
}

TEST(AutoArch, KeepsTheRunsSeqLenAndListsDisagreeingKeys) {
  const std::string base = (kFamilies / "qwen3").string();
  auto doc = autoRun(base);
  doc["model"]["seq_len"] = 12;
  doc["model"]["layers"] = 2;  // agrees
  auto r = parseConfigJson(doc);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.config->model.seq_len, 12);
  doc["model"]["layers"] = 5;
  doc["model"]["head_dim"] = 16;
  r = parseConfigJson(doc);
  ASSERT_FALSE(r.ok());
  ASSERT_EQ(r.issues.size(), 2u);
  std::string all;
  for (const auto& i : r.issues) all += i.toString() + "\n";
  EXPECT_THAT(all, HasSubstr("model.head_dim = 16: disagrees with the base"));
  EXPECT_THAT(all, HasSubstr("model.layers = 5: disagrees with the base"));
  EXPECT_THAT(all, HasSubstr("(24)"));
}

TEST(AutoArch, NeedsAReadableBase) {
  auto r = parseConfigJson(nlohmann::json{{"model", {{"arch", "auto"}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.issues.front().toString(), HasSubstr("finetune.base_checkpoint"));
  r = parseConfigJson(autoRun("/nonexistent/folder"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.issues.front().toString(), HasSubstr("/nonexistent/folder: neither"));
}

}  // namespace
}  // namespace ts::core

namespace ts::core {
namespace {

// A trainscope checkpoint as the base: its run config's model, or an error naming state.json.
TEST(AutoArch, ReadsACheckpointsRunConfig) {
  const fs::path dir = fs::temp_directory_path() / "ts_autoarch_ck";
  fs::remove_all(dir);
  fs::create_directories(dir);
  RunConfig trained;
  trained.model.arch = "qwen3";
  trained.model.head_dim = 24;
  trained.model.layers = 3;
  std::ofstream(dir / "state.json") << nlohmann::json{{"config", toJson(trained)}}.dump();
  auto r = parseConfigJson(autoRun(dir.string()));
  ASSERT_TRUE(r.ok()) << r.issues.front().toString();
  EXPECT_EQ(r.config->model.arch, "qwen3");
  EXPECT_EQ(r.config->model.head_dim, 24);
  EXPECT_EQ(r.config->model.layers, 3);
  std::ofstream(dir / "state.json") << nlohmann::json{{"step", 3}}.dump();
  r = parseConfigJson(autoRun(dir.string()));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.issues.front().toString(), HasSubstr("state.json: has no run config ('config')"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ts::core
