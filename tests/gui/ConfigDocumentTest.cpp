#include <fstream>

#include <gtest/gtest.h>
#include <QSignalSpy>

#include "trainscope/core/config/Config.h"
#include "trainscope/gui/ConfigDocument.h"

using namespace ts::gui;

static nlohmann::json readJson(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

TEST(ConfigDocument, EmptyDocumentResolvesToDefaults) {
  ConfigDocument d;
  EXPECT_TRUE(d.isValid());
  EXPECT_EQ(d.resolved(), ts::core::toJson(ts::core::RunConfig{}));
  EXPECT_EQ(d.value("model.layers"), ts::core::RunConfig{}.model.layers);
}

TEST(ConfigDocument, SetValueEditsOneKeyAndSignalsOnlyOnChange) {
  ConfigDocument d;
  QSignalSpy spy(&d, &ConfigDocument::changed);
  d.setValue("model.layers", 6);
  d.setValue("model.layers", 6);
  EXPECT_EQ(spy.count(), 1);
  EXPECT_EQ(d.document()["model"]["layers"], 6);
  EXPECT_EQ(d.resolved()["model"]["layers"], 6);
  // Array element keeps its sibling from the defaults.
  d.setValue("optimizer.betas.1", 0.95);
  ASSERT_TRUE(d.document()["optimizer"]["betas"].is_array());
  EXPECT_EQ(d.document()["optimizer"]["betas"].size(), 2u);
  EXPECT_DOUBLE_EQ(d.document()["optimizer"]["betas"][0].get<double>(), 0.9);
  EXPECT_TRUE(d.isValid());
}

TEST(ConfigDocument, InvalidCombinationIsReportedWithItsPath) {
  ConfigDocument d;
  d.setValue("parallel.zero_stage", 2);  // needs ranks > 1
  d.setValue("parallel.ranks", 1);
  ASSERT_FALSE(d.isValid());
  bool found = false;
  for (const auto& i : d.issues())
    found |=
        i.path.find("zero_stage") != std::string::npos || i.path.find("ranks") != std::string::npos;
  EXPECT_TRUE(found);
  EXPECT_FALSE(d.estimate().has_value());
  d.setValue("parallel.ranks", 2);
  EXPECT_TRUE(d.isValid());
  EXPECT_TRUE(d.estimate().has_value());
}

TEST(ConfigDocument, UnknownKeyIsAnIssue) {
  ConfigDocument d;
  d.setValue("model.colour", "blue");
  EXPECT_FALSE(d.isValid());
}

TEST(ConfigDocument, EffectiveBatch) {
  ConfigDocument d;
  d.setValue("train.micro_batch", 8);
  d.setValue("train.grad_accum", 4);
  d.setValue("parallel.ranks", 2);
  EXPECT_EQ(d.effectiveBatch(), 64);
}

TEST(ConfigDocument, PresetsValidateAndEstimate) {
  for (const char* p : {"default", "consumer-gpu", "workstation", "cluster"}) {
    ConfigDocument d;
    d.reset(readJson(std::string(TRAINSCOPE_PRESET_DIR) + "/" + p + ".json"));
    EXPECT_TRUE(d.isValid()) << p << ": " << (d.issues().empty() ? "" : d.issues()[0].toString());
    ASSERT_TRUE(d.estimate().has_value()) << p;
    EXPECT_GT(d.estimate()->params.total, 0) << p;
  }
}

TEST(ConfigDocument, ImportsDeepSpeedJson) {
  ConfigDocument d;
  const std::string ds = R"({
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8,
    "gradient_clipping": 0.5, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.0002, "betas": [0.9, 0.95], "weight_decay": 0.05}},
    "scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 100, "total_num_steps": 2000}}
  })";
  ASSERT_EQ(d.importText(ds), "");
  const auto& j = d.document();
  EXPECT_EQ(j["train"]["micro_batch"], 4);
  EXPECT_EQ(j["train"]["grad_accum"], 8);
  EXPECT_EQ(j["precision"]["policy"], "bf16");
  EXPECT_EQ(j["parallel"]["zero_stage"], 2);
  EXPECT_EQ(j["parallel"]["offload_optimizer"], "cpu");
  EXPECT_DOUBLE_EQ(j["optimizer"]["lr"].get<double>(), 0.0002);
  EXPECT_EQ(j["schedule"]["type"], "cosine");
  EXPECT_EQ(j["schedule"]["warmup_steps"], 100);
  EXPECT_EQ(j["train"]["steps"], 2000);
  EXPECT_NE(d.importText("{not json"), "");
}

// With bf16 GEMMs ("auto" on an AMX machine, or "bf16") the estimate adds their two bf16 scratch
// operands, 2 x (micro_batch * seq_len x 4 d_model) x 2 bytes, to the workspace. The fp32
// windows stay: one linear weight's window is open at a time either way (its fp32 values for an
// fp32 GEMM, its gradient for both), and the largest is c_fc's gradient.
TEST(ConfigDocument, NativeBf16GemmChangesTheWorkspaceEstimate) {
  ConfigDocument doc;
  doc.setValue("precision.policy", "bf16");
  doc.setValue("device.threads", 1);  // one kernel scratch slice
  ASSERT_TRUE(doc.estimate().has_value());
  auto workspace = [&] {
    return doc.estimate()
        ->report.ranks.at(0)
        .at(ts::core::MemoryTier::Device, ts::core::MemoryCategory::Workspace)
        .peak;
  };
  const int64_t fp32Gemm = workspace();
  QSignalSpy spy(&doc, &ConfigDocument::changed);
  doc.setNativeBf16Gemm(true);
  EXPECT_EQ(spy.count(), 1);
  const auto c = *doc.config();
  // The bf16 operands x16 and g16, and the emulated GEMM's two fp32 blocks (512 x 256 each at
  // B*T = 512 tokens) replacing LayerNorm's 2C as the kernel scratch slice (docs/memory.md).
  const int64_t tokens = int64_t(c.train.micro_batch) * c.model.seq_len;
  ASSERT_GE(tokens, 512);
  const int64_t scratch =
      2 * 2 * tokens * 4 * c.model.d_model + 4 * (2 * 512 * 256 - 2 * c.model.d_model);
  ASSERT_EQ(c.model.arch, "gpt2");
  EXPECT_EQ(workspace() - fp32Gemm, scratch);
  doc.setValue("precision.gemm", "fp32");  // explicit fp32 wins over the machine
  EXPECT_EQ(workspace(), fp32Gemm);
  doc.setNativeBf16Gemm(false);
  doc.setValue("precision.gemm", "bf16");  // explicit bf16 everywhere
  EXPECT_EQ(workspace() - fp32Gemm, scratch);
}
