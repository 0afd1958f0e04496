// A Hugging Face folder read without the engine (what the wizard and the planner use): the
// tiny folders transformers' save_pretrained wrote (tools/make_hf_tiny.py), their shapes in
// model.* terms, the stored dtypes from the safetensors headers, the estimator's parameter
// count against the element count transformers stored, and every refusal naming file and field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/plan/Estimator.h"

namespace ts::core {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

const fs::path kTiny = fs::path(TRAINSCOPE_TEST_DATA) / "hf_tiny";

fs::path scratch(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("ts_hfconfig_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

json readJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void writeJson(const fs::path& p, const json& j) {
  std::ofstream(p) << j.dump(1);
}

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const HfConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// A safetensors file with just a header (the reader never looks past it).
void writeHeaderOnly(const fs::path& p, const json& header) {
  const std::string h = header.dump();
  std::ofstream out(p, std::ios::binary);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << h;
  out << std::string(64, '\0');
}

TEST(HfConfig, Gpt2FolderInRunTerms) {
  const auto info = readHfConfig((kTiny / "gpt2").string());
  EXPECT_EQ(info.architecture, "GPT2LMHeadModel");
  // The values transformers wrote into config.json (n_layer 2, n_head 4, n_embd 32, ...).
  EXPECT_EQ(info.model.arch, "gpt2");
  EXPECT_EQ(info.model.layers, 2);
  EXPECT_EQ(info.model.heads, 4);
  EXPECT_EQ(info.model.d_model, 32);
  EXPECT_EQ(info.model.seq_len, 64);
  EXPECT_EQ(info.model.vocab, 384);
  EXPECT_EQ(info.model.activation, "gelu");
  EXPECT_EQ(info.configDtype, "float32");
  // The config file itself works as well as its folder.
  EXPECT_EQ(readHfConfig((kTiny / "gpt2" / "config.json").string()).model.d_model, 32);
}

TEST(HfConfig, LlamaFolderInRunTerms) {
  const auto info = readHfConfig((kTiny / "llama").string());
  const json c = readJson(kTiny / "llama" / "config.json");
  EXPECT_EQ(info.architecture, "LlamaForCausalLM");
  EXPECT_EQ(info.model.arch, "llama");
  EXPECT_EQ(info.model.layers, c["num_hidden_layers"].get<int>());
  EXPECT_EQ(info.model.heads, c["num_attention_heads"].get<int>());
  EXPECT_EQ(info.model.kv_heads, c["num_key_value_heads"].get<int>());
  EXPECT_EQ(info.model.d_model, c["hidden_size"].get<int>());
  EXPECT_EQ(info.model.d_ff, c["intermediate_size"].get<int>());
  EXPECT_EQ(info.model.vocab, c["vocab_size"].get<int>());
  EXPECT_EQ(info.model.seq_len, 64);
  EXPECT_DOUBLE_EQ(info.model.rope_theta, 10000.0);
  EXPECT_EQ(info.model.mlp, "swiglu");
  EXPECT_EQ(info.model.norm, "rmsnorm");
  EXPECT_FALSE(info.tiedHead);
  EXPECT_LT(info.model.kv_heads, info.model.heads);  // the tiny model is grouped-query
}

// The estimator counts, from model.*, exactly the elements transformers stored.
TEST(HfConfig, EstimatorCountsTheStoredParameters) {
  for (const char* name : {"gpt2", "llama"}) {
    SCOPED_TRACE(name);
    const auto dir = (kTiny / name).string();
    const auto info = readHfConfig(dir);
    const auto stored = readHfStoredWeights(dir);
    EXPECT_EQ(stored.files, 1);
    EXPECT_EQ(stored.fileBytes,
              static_cast<int64_t>(fs::file_size(kTiny / name / "model.safetensors")));
    EXPECT_EQ(stored.summary(), "F32");
    int64_t elements = 0;
    for (const auto& [dtype, n] : stored.elementsByDtype) elements += n;
    const RunConfig rc = hfRunConfig(dir, info.model);
    EXPECT_EQ(rc.finetune.base_checkpoint, dir);
    EXPECT_EQ(rc.name, name);
    EXPECT_EQ(estimateMemory(rc).params.total, elements);
  }
}

TEST(HfConfig, RunConfigCapsTheSequence) {
  ModelConfig m;
  m.seq_len = 4096;
  EXPECT_EQ(hfRunConfig("/x/llama-7b/", m).model.seq_len, 1024);
  EXPECT_EQ(hfRunConfig("/x/llama-7b/", m).name, "llama-7b");
  EXPECT_EQ(hfRunConfig("/x/llama-7b", m, 8192).model.seq_len, 4096);
}

TEST(HfConfig, ShardsAndMixedDtypesFromHeaders) {
  const auto d = scratch("shards");
  writeJson(d / "model.safetensors.index.json",
            {{"weight_map",
              {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}, {"c", "s2.safetensors"}}}});
  writeHeaderOnly(d / "s1.safetensors",
                  {{"__metadata__", {{"format", "pt"}}},
                   {"a", {{"dtype", "F32"}, {"shape", {4, 8}}, {"data_offsets", {0, 128}}}}});
  writeHeaderOnly(d / "s2.safetensors",
                  {{"b", {{"dtype", "BF16"}, {"shape", {16, 8}}, {"data_offsets", {0, 256}}}},
                   {"c", {{"dtype", "BF16"}, {"shape", {8}}, {"data_offsets", {256, 272}}}}});
  const auto s = readHfStoredWeights(d.string());
  EXPECT_EQ(s.files, 2);
  EXPECT_EQ(s.elementsByDtype.at("F32"), 32);
  EXPECT_EQ(s.elementsByDtype.at("BF16"), 136);
  EXPECT_EQ(s.summary(), "BF16 + F32");  // most elements first
  // A shard the index names that is not there.
  writeJson(d / "model.safetensors.index.json", {{"weight_map", {{"a", "s3.safetensors"}}}});
  EXPECT_THAT(errorOf([&] { readHfStoredWeights(d.string()); }),
              HasSubstr((d / "s3.safetensors").string() + ": missing"));
  writeJson(d / "model.safetensors.index.json", {{"weight_map", {{"a", "../x.safetensors"}}}});
  EXPECT_THAT(errorOf([&] { readHfStoredWeights(d.string()); }), HasSubstr("outside the folder"));
  // A header that is not JSON, and a tensor without dtype and shape.
  fs::remove(d / "model.safetensors.index.json");
  {
    std::ofstream out(d / "model.safetensors", std::ios::binary);
    out << std::string("\x04\x00\x00\x00\x00\x00\x00\x00", 8) << "{no}" << std::string(8, '\0');
  }
  EXPECT_THAT(errorOf([&] { readHfStoredWeights(d.string()); }),
              HasSubstr("model.safetensors: safetensors header is not valid JSON"));
  writeHeaderOnly(d / "model.safetensors", {{"w", {{"shape", {2}}}}});
  EXPECT_THAT(errorOf([&] { readHfStoredWeights(d.string()); }),
              HasSubstr("model.safetensors: tensor 'w' has no dtype and shape"));
  // A header length past the end of the file.
  std::ofstream(d / "model.safetensors", std::ios::binary)
      << std::string("\xff\xff\x00\x00\x00\x00\x00\x00", 8);
  EXPECT_THAT(errorOf([&] { readHfStoredWeights(d.string()); }),
              HasSubstr("model.safetensors: not a safetensors file"));
}

TEST(HfConfig, RefusalsNameFileAndField) {
  const auto d = scratch("refusals");
  const json gpt2 = readJson(kTiny / "gpt2" / "config.json");
  const json llama = readJson(kTiny / "llama" / "config.json");
  const std::string cfg = (d / "config.json").string();
  auto with = [&](json base, const std::function<void(json&)>& edit) {
    edit(base);
    writeJson(d / "config.json", base);
    return errorOf([&] { readHfConfig(d.string()); });
  };
  EXPECT_THAT(with(llama, [](json& j) { j["architectures"] = {"MixtralForCausalLM"}; }),
              HasSubstr(cfg + ": architecture 'MixtralForCausalLM' is not supported"));
  EXPECT_THAT(with(llama, [](json& j) { j["architectures"] = {"BertModel"}; }),
              HasSubstr("allowed GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, "
                        "Qwen2ForCausalLM, Qwen3ForCausalLM"));
  EXPECT_THAT(with(llama,
                   [](json& j) {
                     j["rope_scaling"] = {{"rope_type", "mrope"}};
                   }),
              HasSubstr(cfg + " (rope_scaling): rope_type 'mrope' is not supported"));
  EXPECT_THAT(with(llama,
                   [](json& j) {
                     j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 1.0}};
                   }),
              HasSubstr("mscale is set: yarn with mscale"));
  EXPECT_THAT(with(llama, [](json& j) { j["attention_bias"] = true; }),
              HasSubstr("attention_bias must be false"));
  EXPECT_THAT(with(llama,
                   [](json& j) {
                     j["architectures"] = {"Phi3ForCausalLM"};
                     j["rope_scaling"] = {{"rope_type", "longrope"},
                                          {"short_factor", {1.0, 2.0}},
                                          {"long_factor", {1.0, 2.0}}};
                   }),
              HasSubstr("longrope's short_factor and long_factor need rotary_dim / 2"));
  EXPECT_THAT(with(llama, [](json& j) { j.erase("hidden_size"); }),
              HasSubstr(cfg + ": field 'hidden_size' is missing or not an integer"));
  EXPECT_THAT(with(gpt2, [](json& j) { j["n_inner"] = 100; }),
              HasSubstr(cfg + ": n_inner 100: the gpt2 description's MLP is 4 * n_embd"));
  EXPECT_THAT(with(gpt2, [](json& j) { j["activation_function"] = "swish"; }),
              HasSubstr("activation_function 'swish'"));
  EXPECT_THAT(with(gpt2, [](json& j) { j["layer_norm_epsilon"] = 1e-6; }),
              HasSubstr("layer_norm_epsilon must be 1e-5"));
  std::ofstream(d / "config.json") << "{\"n_layer\": ";
  EXPECT_THAT(errorOf([&] { readHfConfig(d.string()); }), HasSubstr(cfg + ": not valid JSON"));
  fs::remove(d / "config.json");
  EXPECT_THAT(errorOf([&] { readHfConfig(d.string()); }),
              HasSubstr(cfg + ": cannot open (not a Hugging Face model folder?)"));
  EXPECT_FALSE(isHfModelFolder(d.string()));
  EXPECT_TRUE(isHfModelFolder((kTiny / "gpt2").string()));
}

}  // namespace
}  // namespace ts::core
