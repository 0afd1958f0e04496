// Every llama-like family's Hugging Face folder (tests/data/families, written by transformers)
// through the whole product path: a full fine-tune whose loss falls and whose export-hf folder
// reads back bit for bit in fp32 with the family's own architecture and keys; LoRA on the
// family's own module names whose PEFT files, applied as PEFT applies them, are the run's model;
// QLoRA (NF4 base) and distillation from the folder as teacher train too; in every run the
// memory plan's peaks are the measured ones (the estimator is exact for the family).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../../support/TrainerHarness.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/io/HfExport.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/engine/model/Gpt.h"

using namespace ts::engine;
namespace fs = std::filesystem;
using ts::testsupport::scratchDir;

namespace {

class FamilyRun : public ::testing::TestWithParam<const char*> {
 protected:
  std::string folder() const {
    return (fs::path(TRAINSCOPE_TEST_DATA) / "families" / GetParam()).string();
  }
  // A short run on the folder's model (synthetic addition data, 16 positions).
  ts::core::RunConfig run(int steps) const {
    auto c = ts::testsupport::tinyAdditionConfig();
    c.model = openHfModel(folder()).model;
    c.model.seq_len = 16;
    c.finetune.base_checkpoint = folder();
    c.optimizer.lr = 1e-2;
    c.train.steps = steps;
    c.train.eval_every = 0;
    return c;
  }
  // Runs c; its step losses, and the last checkpoint.
  std::pair<std::vector<double>, std::string> train(const ts::core::RunConfig& c,
                                                    const fs::path& dir) const {
    ts::testsupport::Recorded rec;
    auto r = ts::testsupport::runTrainer(c, rec, dir.string());
    EXPECT_EQ(r.status, "completed") << r.reason;
    std::vector<double> losses;
    for (const auto& e : rec.of(ts::core::EventType::Step)) losses.push_back(e["loss"]);
    // The estimator is exact: the plan's peaks are the measured ones, category by category.
    // (memory_plan as the run command computes it.)
    auto backend = ts::kernels::makeCpuBackend();
    backend->setThreads(c.device.threads);
    ts::core::RunConfig planConfig = c;
    planConfig.precision.gemm = useBf16Gemm(c, backend.get()) ? "bf16" : "fp32";
    ts::core::EstimateOptions po;
    po.cpu_kernel_threads = backend->scratchThreads();
    if (!c.distill.teacher_checkpoint.empty())
      po.teacher_model = openHfModel(c.distill.teacher_checkpoint).model;
    const auto plan = ts::core::memoryPlanJson(planConfig, po);
    const auto mems = rec.of(ts::core::EventType::Memory);
    EXPECT_FALSE(mems.empty());
    if (!mems.empty())
      for (const char* cat :
           {"parameters", "gradients", "optimizer_state", "activations", "workspace"})
        EXPECT_EQ(plan["ranks"][0]["tiers"]["device"][cat]["peak"],
                  mems.back()["ranks"][0]["tiers"]["device"][cat]["peak"])
            << cat;
    return {losses, r.lastCheckpoint};
  }
};

std::vector<float> values(Gpt& m, const ParamInfo& p) {
  const auto all = ts::testsupport::hostCopy(m.paramBuffer());
  return std::vector<float>(all.begin() + p.offset, all.begin() + p.offset + p.numel);
}

double meanOf(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / double(to - from);
}

TEST_P(FamilyRun, FullFineTuneLearnsAndExportsItsOwnFolder) {
  const auto c = run(16);
  const fs::path dir = scratchDir(std::string("family_full_") + GetParam());
  const auto [losses, ck] = train(c, dir / "run");
  ASSERT_EQ(losses.size(), 16u);
  EXPECT_LT(meanOf(losses, 12, 16), meanOf(losses, 0, 4)) << "the loss falls";
  const auto r = exportHf(ck, (dir / "hf").string());
  EXPECT_FALSE(r.adapter);
  const auto cfg = nlohmann::json::parse(std::ifstream(dir / "hf" / "config.json"));
  const auto& family = ts::core::modelFamily(GetParam());
  EXPECT_EQ(cfg["architectures"][0], family.hfArchitectures().front());
  EXPECT_EQ(cfg["tie_word_embeddings"], c.model.tie_embeddings);
  const auto back = openHfModel((dir / "hf").string());
  EXPECT_EQ(back.model.arch, GetParam());
  std::vector<std::string> differ;
  family.hfShapeMismatches(back, c.model, differ);
  EXPECT_TRUE(differ.empty()) << differ.front();
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker t;
  auto plain = c;
  plain.finetune = {};
  Gpt ref(gptConfigFrom(plain, c.model.vocab), backend.get(), &t);
  loadCheckpoint(ck, ref.arena(), nullptr);
  Gpt again(gptConfigFrom(plain, c.model.vocab), backend.get(), &t);
  loadHfWeights(back, again.arena());
  for (const auto& p : ref.params()) EXPECT_EQ(values(again, p), values(ref, p)) << p.name;
  fs::remove_all(dir);
}

TEST_P(FamilyRun, LoraOnItsOwnModulesExportsWhatPeftApplies) {
  auto c = run(12);
  c.finetune.lora.r = 4;
  c.finetune.lora.targets = {"q", "v", "fc"};
  const fs::path dir = scratchDir(std::string("family_lora_") + GetParam());
  const auto [losses, ck] = train(c, dir / "run");
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(meanOf(losses, 9, 12), meanOf(losses, 0, 3));
  const auto r = exportHf(ck, (dir / "adapter").string());
  EXPECT_TRUE(r.adapter);
  const auto ac = nlohmann::json::parse(std::ifstream(dir / "adapter" / "adapter_config.json"));
  const auto& family = ts::core::modelFamily(GetParam());
  EXPECT_EQ(ac["target_modules"].size(), family.peftTargets(c).size());
  auto adapters = SafetensorsFile::load((dir / "adapter" / "adapter_model.safetensors").string());
  const auto hf = openHfModel(folder());
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker t;
  Gpt model(gptConfigFrom(c, c.model.vocab), backend.get(), &t);
  loadHfWeights(hf, model.arena());
  loadCheckpoint(ck, model.arena(), nullptr);
  Gpt peft(gptConfigFrom(c, c.model.vocab), backend.get(), &t);
  loadHfWeights(hf, peft.arena());
  auto host = ts::testsupport::hostCopy(peft.paramBuffer());
  int read = 0;
  for (const auto& p : peft.params())
    if (adapters.has(family.peftPrefix() + p.name)) {
      adapters.readF32(family.peftPrefix() + p.name, host.data() + p.offset, p.numel);
      ++read;
    }
  EXPECT_EQ(read, r.tensors);
  peft.paramBuffer().copyFromHost(host.data());
  for (const auto& p : model.params()) EXPECT_EQ(values(peft, p), values(model, p)) << p.name;
  fs::remove_all(dir);
}

TEST_P(FamilyRun, QloraAndDistillationTrain) {
  auto q = run(10);
  q.finetune.lora.r = 4;
  q.finetune.lora.targets = {"q", "k", "v", "o", "fc", "proj"};
  q.finetune.base_quant = "nf4";
  q.precision.policy = "bf16";
  const fs::path dir = scratchDir(std::string("family_qlora_") + GetParam());
  const auto [ql, qck] = train(q, dir / "qlora");
  ASSERT_EQ(ql.size(), 10u);
  EXPECT_LT(meanOf(ql, 7, 10), meanOf(ql, 0, 3));
  auto d = run(6);
  d.finetune.lora.r = 4;
  d.finetune.lora.targets = {"q", "v"};
  d.distill.teacher_checkpoint = folder();
  d.distill.alpha = 0.5;
  const auto [dl, dck] = train(d, dir / "distill");
  EXPECT_EQ(dl.size(), 6u);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyRun,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3",
                                           "phi3", "olmo2"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
