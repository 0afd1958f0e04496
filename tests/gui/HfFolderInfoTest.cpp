// A Hugging Face folder as the wizard and the planner see it: the summary line, the keys that
// make a run fine-tune it (nothing else in the document touched), and the cache that re-reads a
// folder only when its files change.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <QTemporaryDir>

#include "trainscope/gui/HfFolderInfo.h"

using namespace ts::gui;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kTiny = fs::path(TRAINSCOPE_TEST_DATA) / "hf_tiny";

json readJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

}  // namespace

TEST(HfFolderInfo, SummarySaysArchitectureShapeCountAndDtype) {
  const auto hf = inspectHfFolder((kTiny / "llama").string());
  ASSERT_TRUE(hf.ok()) << hf.error.toStdString();
  const json c = readJson(kTiny / "llama" / "config.json");
  const QString s = hf.summary();
  EXPECT_TRUE(s.startsWith("LLaMA (LlamaForCausalLM): ")) << s.toStdString();
  EXPECT_TRUE(s.contains(QStringLiteral("%1 layers").arg(c["num_hidden_layers"].get<int>())));
  EXPECT_TRUE(s.contains(QStringLiteral("d_model %1").arg(c["hidden_size"].get<int>())));
  EXPECT_TRUE(s.contains(QStringLiteral("(%1 KV)").arg(c["num_key_value_heads"].get<int>())));
  EXPECT_TRUE(s.contains(QStringLiteral("vocab %1").arg(c["vocab_size"].get<int>())));
  EXPECT_TRUE(s.contains("stored F32 (config.json: float32)")) << s.toStdString();
  EXPECT_TRUE(s.contains("in 1 file")) << s.toStdString();
  // What the engine does with it: the family's description.
  EXPECT_TRUE(s.contains("grouped-query attention")) << s.toStdString();
}

TEST(HfFolderInfo, ApplySetsTheModelAndTheBaseOnly) {
  const auto gpt2 = inspectHfFolder((kTiny / "gpt2").string());
  const auto llama = inspectHfFolder((kTiny / "llama").string());
  ASSERT_TRUE(gpt2.ok() && llama.ok());
  json doc = {
      {"name", "mine"},
      {"model", {{"arch", "gpt2"}, {"layers", 6}, {"dropout", 0.1}, {"activation", "relu"}}},
      {"train", {{"steps", 77}}},
      {"finetune", {{"lora", {{"r", 8}}}}}};
  const json l = applyHfFolder(doc, llama);
  EXPECT_EQ(l["name"], "mine");
  EXPECT_EQ(l["train"]["steps"], 77);
  EXPECT_EQ(l["finetune"]["lora"]["r"], 8);
  EXPECT_EQ(l["finetune"]["base_checkpoint"], (kTiny / "llama").string());
  EXPECT_EQ(l["model"]["dropout"], 0.1);
  EXPECT_EQ(l["model"]["arch"], "llama");
  EXPECT_EQ(l["model"]["mlp"], "swiglu");
  EXPECT_EQ(l["model"]["norm"], "rmsnorm");
  EXPECT_FALSE(l["model"].contains("activation"));
  const json c = readJson(kTiny / "llama" / "config.json");
  EXPECT_EQ(l["model"]["d_ff"], c["intermediate_size"]);
  EXPECT_EQ(l["model"]["kv_heads"], c["num_key_value_heads"]);
  EXPECT_EQ(l["model"]["seq_len"], c["max_position_embeddings"]);  // 64 <= the 1024 cap
  // Back to GPT-2: the llama-only keys go, the activation is the folder's.
  const json g = applyHfFolder(l, gpt2);
  EXPECT_EQ(g["model"]["arch"], "gpt2");
  EXPECT_EQ(g["model"]["activation"], "gelu");
  for (const char* k : {"kv_heads", "d_ff", "rope_theta", "mlp", "norm"})
    EXPECT_FALSE(g["model"].contains(k)) << k;
  // A folder that cannot be used changes nothing.
  const auto bad = inspectHfFolder("/nonexistent/folder");
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(bad.error.contains("/nonexistent/folder/config.json: cannot open"))
      << bad.error.toStdString();
  EXPECT_EQ(applyHfFolder(doc, bad), doc);
}

TEST(HfFolderInfo, CacheRereadsWhenTheFolderChanges) {
  QTemporaryDir tmp;
  const fs::path d = tmp.filePath("m").toStdString();
  fs::create_directories(d);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(kTiny / "gpt2" / f, d / f);
  HfFolderCache cache;
  EXPECT_EQ(cache.get(d.string()).info.model.layers, 2);
  json c = readJson(d / "config.json");
  c["n_layer"] = 3;
  c["extra_padding_so_the_size_changes"] = true;
  std::ofstream(d / "config.json") << c.dump(2);
  EXPECT_EQ(cache.get(d.string()).info.model.layers, 3);
  fs::remove(d / "model.safetensors");
  EXPECT_FALSE(cache.get(d.string()).ok());
  EXPECT_TRUE(cache.get(d.string()).error.contains("model.safetensors: missing"));
}

// A newly chosen base: the preset's identity goes (name "default", its notes about a tiny GPT
// learning addition, tags "builtin, cpu, tiny"); the run is named and described as a
// fine-tune of the folder.
TEST(HfFolderInfo, ABaseRenamesAndDescribesTheRun) {
  const auto llama = inspectHfFolder((kTiny / "llama").string());
  ASSERT_TRUE(llama.ok());
  std::ifstream in(std::string(TRAINSCOPE_PRESET_DIR) + "/default.json");
  const json preset = json::parse(in);
  const json d = applyHfBase(preset, llama);
  EXPECT_EQ(d["name"], "llama-finetune");
  EXPECT_EQ(d["tags"], json({"finetune", "hf", "llama"}));
  const std::string notes = d["notes"];
  EXPECT_EQ(notes.find("Built-in default"), std::string::npos) << notes;
  EXPECT_NE(notes.find("Fine-tunes llama (LLaMA"), std::string::npos) << notes;
  EXPECT_NE(notes.find((kTiny / "llama").string()), std::string::npos) << notes;
  EXPECT_NE(notes.find("synthetic"), std::string::npos) << "the data is still generated";
  // The shape is applyHfFolder's (activation dropped: LLaMA's MLP is SwiGLU).
  EXPECT_EQ(d["model"], applyHfFolder(preset, llama)["model"]);
  EXPECT_FALSE(d["model"].contains("activation"));
}
