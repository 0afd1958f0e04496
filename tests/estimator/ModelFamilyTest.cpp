// The model-family registry and every registered family against itself: config.json written by
// a family reads back as the same shape, a model_type or architecture finds its family, each
// tensor has a distinct Hugging Face name, and the families' real folders (tests/data,
// written by transformers) read as the family transformers says they are.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"

namespace ts::core {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A small shape of the family: its own planner shape, scaled down.
ModelConfig smallShape(const ModelFamily& f) {
  ModelConfig m = f.presets().front().second;
  m.layers = 2;
  m.heads = 4;
  if (m.kv_heads > 0) m.kv_heads = 2;
  m.d_model = 64;
  if (m.d_ff > 0) m.d_ff = 96;
  m.seq_len = 32;
  m.vocab = 100;
  return m;
}

TEST(ModelFamily, RegistryFindsEveryFamilyByNameAndHuggingFaceName) {
  ASSERT_GE(modelFamilies().size(), 2u);
  std::set<std::string> names;
  for (const ModelFamily* f : modelFamilies()) {
    EXPECT_TRUE(names.insert(f->name()).second) << f->name() << " registered twice";
    EXPECT_EQ(findModelFamily(f->name()), f);
    EXPECT_EQ(&modelFamily(f->name()), f);
    for (const auto& a : f->hfArchitectures()) EXPECT_EQ(familyForHf(a), f) << a;
    for (const auto& t : f->hfModelTypes()) EXPECT_EQ(familyForHf(t), f) << t;
    EXPECT_FALSE(f->displayName().empty());
    EXPECT_FALSE(f->presets().empty()) << f->name() << " offers the planner no shape";
  }
  EXPECT_EQ(modelFamilyNames().size(), modelFamilies().size());
  EXPECT_EQ(findModelFamily("bert"), nullptr);
  EXPECT_EQ(familyForHf("BertModel"), nullptr);
  try {
    modelFamily("bert");
    FAIL() << "an unknown family was accepted";
  } catch (const std::invalid_argument& e) {
    for (const auto& n : modelFamilyNames()) EXPECT_THAT(e.what(), HasSubstr(n));
  }
}

TEST(ModelFamily, EveryPresetAliasNamesAPresetOfItsFamily) {
  for (const ModelFamily* f : modelFamilies()) {
    std::set<std::string> presets;
    for (const auto& [name, m] : f->presets()) {
      presets.insert(name);
      EXPECT_EQ(m.arch, f->name()) << name;
    }
    for (const auto& [alias, name] : f->presetAliases())
      EXPECT_TRUE(presets.count(name)) << alias << " -> " << name;
  }
}

TEST(ModelFamily, WrittenConfigJsonReadsBackAsTheSameShape) {
  for (const ModelFamily* f : modelFamilies()) {
    SCOPED_TRACE(f->name());
    const ModelConfig m = smallShape(*f);
    const ArchSpec a = archSpecOf(m, m.vocab);
    const fs::path dir = fs::temp_directory_path() / ("ts_family_" + f->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << f->writeHfConfig(a, 0.0).dump(1);
    const HfModelInfo hf = readHfConfig(dir.string());
    EXPECT_EQ(hf.architecture, f->hfArchitectures().front());
    EXPECT_EQ(familyForHf(hf.architecture), f);
    const ArchSpec back = archSpecOf(hf.model, hf.model.vocab);
    EXPECT_EQ(back.arch, a.arch);
    EXPECT_EQ(back.layers, a.layers);
    EXPECT_EQ(back.heads, a.heads);
    EXPECT_EQ(back.kvHeads, a.kvHeads);
    EXPECT_EQ(back.dModel, a.dModel);
    EXPECT_EQ(back.dFf, a.dFf);
    EXPECT_EQ(back.vocab, a.vocab);
    // (config.json has the model's positions: max_position_embeddings.)
    EXPECT_EQ(back.seqLen, a.maxPositions > 0 ? a.maxPositions : a.seqLen);
    EXPECT_EQ(back.ropeTheta, a.ropeTheta);
    EXPECT_EQ(back.headDim(), a.headDim());
    EXPECT_EQ(back.tiedHead, a.tiedHead);
    EXPECT_EQ(back.rope, a.rope);
    EXPECT_EQ(back.normEps, a.normEps);
    EXPECT_EQ(back.slidingWindow, a.slidingWindow);
    for (int64_t l = 0; l < a.layers; ++l) EXPECT_EQ(back.slidingLayer(l), a.slidingLayer(l)) << l;
    EXPECT_EQ(back.partialRotary, a.partialRotary);
    // The same tensors, under the same names, in the same order.
    const auto want = modelTensors(a), got = modelTensors(back);
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(want[i].name, got[i].name);
      EXPECT_EQ(want[i].shape, got[i].shape);
    }
    fs::remove_all(dir);
  }
}

TEST(ModelFamily, EveryTensorHasItsOwnHuggingFaceNameAndSlot) {
  for (const ModelFamily* f : modelFamilies()) {
    SCOPED_TRACE(f->name());
    const ModelConfig m = smallShape(*f);
    std::set<std::string> engineNames, hfNames;
    for (const auto& t : modelTensors(archSpecOf(m, m.vocab))) {
      EXPECT_TRUE(engineNames.insert(t.name).second) << t.name;
      const auto names = f->hfNames(t, false);
      ASSERT_FALSE(names.empty()) << t.name;
      EXPECT_TRUE(hfNames.insert(names.front()).second) << names.front();
      // The layers are wired from the slots: every block tensor sits in one.
      if (t.block >= 0) EXPECT_NE(t.slot, BlockSlot::None) << t.name;
    }
  }
}

TEST(ModelFamily, LoraTargetsSelectTheFamilysOwnModules) {
  for (const ModelFamily* f : modelFamilies()) {
    SCOPED_TRACE(f->name());
    ModelConfig m = smallShape(*f);
    const ArchSpec a = archSpecOf(m, m.vocab);
    FinetuneConfig ft;
    ft.lora.r = 4;
    ft.lora.targets = loraModules(a);  // every module by its own name
    int adapters = 0;
    for (const auto& t : modelTensors(a, ft)) {
      if (t.role == TensorRole::LoraA || t.role == TensorRole::LoraB) {
        ++adapters;
        EXPECT_TRUE(t.trainable) << t.name;
      } else {
        EXPECT_FALSE(t.trainable) << t.name << ": LoRA freezes the base";
      }
    }
    EXPECT_EQ(adapters, 2 * int(loraModules(a).size()) * m.layers);
    for (const auto& module : loraModules(a)) {
      const auto all = allLoraModules();
      EXPECT_NE(std::find(all.begin(), all.end(), module), all.end()) << module;
    }
  }
}

}  // namespace
}  // namespace ts::core

namespace ts::core {
namespace {

int64_t parameterCount(const std::string& preset) {
  for (const auto* f : modelFamilies())
    for (const auto& [name, m] : f->presets())
      if (name == preset) {
        int64_t n = 0;
        for (const auto& t : modelTensors(archSpecOf(m, m.vocab))) n += t.numel();
        return n;
      }
  ADD_FAILURE() << "no preset " << preset;
  return 0;
}

// The published sizes (model cards; each also checked by hand from the released config.json:
// embeddings + layers x (q, k, v, o, MLP, norms) + final norm + an untied head, a tied head
// counted once).
TEST(ModelFamily, PresetsHaveThePublishedParameterCounts) {
  EXPECT_EQ(parameterCount("llama-3.1-8b"), 8030261248);
  EXPECT_EQ(parameterCount("llama-3.2-1b"), 1235814400);
  EXPECT_EQ(parameterCount("qwen2.5-0.5b"), 494032768);
  EXPECT_EQ(parameterCount("qwen3-0.6b"), 596049920);
  EXPECT_EQ(parameterCount("gemma-3-1b"), 999885952);
  EXPECT_EQ(parameterCount("phi-3-mini"), 3821079552);
}

// The golden folders transformers wrote (tests/data/families) read as their family, with the
// keys each family adds.
TEST(ModelFamily, TransformersFoldersOfEveryFamilyRead) {
  const fs::path root = fs::path(TRAINSCOPE_TEST_DATA) / "families";
  for (const char* fam :
       {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "olmo2"}) {
    SCOPED_TRACE(fam);
    const HfModelInfo hf = readHfConfig((root / fam).string());
    EXPECT_EQ(hf.model.arch, fam);
    EXPECT_NEAR(hf.model.norm_eps, 1e-6, 1e-15);
  }
  EXPECT_EQ(readHfConfig((root / "llama").string()).model.rope_scaling.type, "llama3");
  EXPECT_TRUE(readHfConfig((root / "llama").string()).model.tie_embeddings);
  EXPECT_EQ(readHfConfig((root / "mistral").string()).model.sliding_window, 5);
  EXPECT_EQ(readHfConfig((root / "qwen3").string()).model.head_dim, 24);
  const auto g3 = readHfConfig((root / "gemma3").string()).model;
  EXPECT_EQ(g3.sliding_window_pattern, 2);
  EXPECT_EQ(g3.rope_local_theta, 10000.0);
  EXPECT_EQ(g3.rope_theta, 1000000.0);
  EXPECT_EQ(g3.rope_scaling.type, "linear");
  const auto phi = readHfConfig((root / "phi3").string()).model;
  EXPECT_EQ(phi.rope_scaling.type, "longrope");
  EXPECT_EQ(phi.partial_rotary_factor, 0.5);
  EXPECT_EQ(phi.rope_scaling.long_factor.size(), 4u);
  EXPECT_EQ(readHfConfig((root / "gemma2").string()).model.final_softcap, 2.0);
}

}  // namespace
}  // namespace ts::core

namespace ts::core {
namespace {

// A run fine-tuning a folder must describe it: the family's own keys are compared too.
TEST(ModelFamily, ShapeMismatchesNameTheFamilysOwnKeys) {
  const auto hf = readHfConfig((fs::path(TRAINSCOPE_TEST_DATA) / "families" / "gemma3").string());
  ModelConfig run = hf.model;
  EXPECT_TRUE(hfShapeMismatches(hf, run, run.vocab).empty());
  run.sliding_window = 9;
  run.query_pre_attn_scalar = 64;
  run.head_dim = 16;
  const auto m = hfShapeMismatches(hf, run, run.vocab);
  std::string all;
  for (const auto& s : m) all += s + "\n";
  EXPECT_THAT(all, HasSubstr("model.head_dim: the run has 16"));
  EXPECT_THAT(all, HasSubstr("model.sliding_window: the run has 9"));
  EXPECT_THAT(all, HasSubstr("model.query_pre_attn_scalar: the run has 64.0"));
  EXPECT_EQ(m.size(), 3u) << all;
}

}  // namespace
}  // namespace ts::core
