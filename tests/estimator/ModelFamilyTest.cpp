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
    EXPECT_EQ(back.seqLen, a.seqLen);
    EXPECT_EQ(back.ropeTheta, a.ropeTheta);
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
