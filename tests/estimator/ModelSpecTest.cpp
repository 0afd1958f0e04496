// The shared model description against independent numbers: the published parameter counts of
// GPT-2 small and LLaMA-7B, and the tensor names and shapes transformers wrote for a tiny
// LlamaForCausalLM (tests/data/llama_tiny, made by tools/make_llama_golden.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/model/ModelSpec.h"

using namespace ts::core;

namespace {

int64_t total(const std::vector<TensorSpec>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

// The header of a safetensors file: name -> shape.
std::map<std::string, std::vector<int64_t>> safetensorsShapes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  std::map<std::string, std::vector<int64_t>> out;
  const auto j = nlohmann::json::parse(header);
  for (const auto& [k, v] : j.items())
    if (k != "__metadata__") out[k] = v.at("shape").get<std::vector<int64_t>>();
  return out;
}

}  // namespace

// GPT-2 small (124M) with the 50257-token vocabulary and 1024 positions: 124,439,808 parameters
// (the count Hugging Face's GPT2LMHeadModel reports, head tied).
TEST(ModelSpec, Gpt2SmallHasThePublishedParameterCount) {
  const auto arch = archSpecOf(*modelPreset("gpt2"), 50257);
  const auto ts = modelTensors(arch);
  EXPECT_EQ(total(ts), 124439808);
  EXPECT_EQ(ts.size(), 2u + 12u * 12u + 2u);
  EXPECT_EQ(ts.front().name, "wte");
  EXPECT_EQ(ts[4].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(ts[4].shape, (std::vector<int64_t>{3 * 768, 768}));
  EXPECT_EQ(ts[4].module, "c_attn");
  EXPECT_TRUE(ts[6].residualProjection);  // attn.c_proj.weight
  std::set<std::string> names;
  for (const auto& t : ts) EXPECT_TRUE(names.insert(t.name).second) << "duplicate " << t.name;
}

// The engine wires every block from the slots alone: each block of either architecture has
// one norm weight per norm slot, at least one weight per projection slot, biases exactly where
// the description has them, and a fused view name wherever one slot has several weights.
TEST(ModelSpec, EveryBlockTensorHasTheSlotTheEngineWiresItBy) {
  for (const char* preset : {"gpt2", "llama-7b"}) {
    auto m = *modelPreset(preset);
    m.layers = 2;
    const auto arch = archSpecOf(m, 1000);
    const auto ts = modelTensors(arch);
    std::map<std::pair<int, BlockSlot>, std::vector<const TensorSpec*>> weights, biases;
    for (const auto& t : ts) {
      if (t.role == TensorRole::TokenEmbedding || t.role == TensorRole::PositionEmbedding ||
          t.role == TensorRole::Head) {
        EXPECT_EQ(t.slot, BlockSlot::None) << t.name;
        continue;
      }
      ASSERT_NE(t.slot, BlockSlot::None) << preset << " " << t.name;
      auto& bucket =
          t.role == TensorRole::NormBias || t.role == TensorRole::LinearBias ? biases : weights;
      bucket[{t.block, t.slot}].push_back(&t);
    }
    auto count = [](auto& bucket, int block, BlockSlot s) { return bucket[{block, s}].size(); };
    for (int l = 0; l < 2; ++l) {
      for (BlockSlot s : {BlockSlot::Norm1, BlockSlot::Norm2})
        EXPECT_EQ(count(weights, l, s), 1u) << preset;
      for (BlockSlot s :
           {BlockSlot::Qkv, BlockSlot::AttnOut, BlockSlot::MlpUp, BlockSlot::MlpDown}) {
        const auto& w = weights[{l, s}];
        ASSERT_FALSE(w.empty()) << preset;
        EXPECT_EQ(count(biases, l, s), arch.bias ? 1u : 0u) << preset;
        int64_t rows = 0;
        for (const auto* t : w) {
          rows += t->shape[0];
          if (w.size() > 1)
            EXPECT_EQ(t->fusedName, w.front()->fusedName) << t->name;
          else
            EXPECT_TRUE(t->fusedName.empty()) << t->name;
        }
        if (s == BlockSlot::Qkv) EXPECT_EQ(rows, arch.qkvDim()) << preset;
        if (s == BlockSlot::MlpUp) EXPECT_EQ(rows, arch.swiglu ? 2 * arch.dFf : arch.dFf);
      }
    }
    EXPECT_EQ(count(weights, -1, BlockSlot::FinalNorm), 1u);
    EXPECT_EQ(count(biases, -1, BlockSlot::FinalNorm), arch.rmsNorm ? 0u : 1u);
  }
}

// LLaMA-7B (32 layers, 4096 wide, 11008 MLP, 32000 vocabulary, untied head): 6,738,415,616.
TEST(ModelSpec, Llama7bHasThePublishedParameterCount) {
  const auto arch = archSpecOf(*modelPreset("llama-7b"), 32000);
  EXPECT_EQ(total(modelTensors(arch)), 6738415616);
  EXPECT_EQ(countParameters(*modelPreset("llama-7b"), 32000, {}).total, 6738415616);
}

// Every tensor of a transformers LlamaForCausalLM (GQA: 4 heads, 2 kv heads), name and shape.
TEST(ModelSpec, LlamaTensorsAreTransformersTensors) {
  const auto expected =
      safetensorsShapes(std::string(TRAINSCOPE_TEST_DATA) + "/llama_tiny/model.safetensors");
  ASSERT_EQ(expected.size(), 21u);
  ModelConfig m;
  m.arch = "llama";
  m.layers = 2;
  m.heads = 4;
  m.kv_heads = 2;
  m.d_model = 64;
  m.d_ff = 88;
  m.seq_len = 64;
  m.mlp = "swiglu";
  m.norm = "rmsnorm";
  const auto ts = modelTensors(archSpecOf(m, 200));
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& t : ts) got[t.name] = t.shape;
  EXPECT_EQ(got, expected);
}

// LoRA: short targets and module names select the same projections; the base is frozen.
TEST(ModelSpec, LoraTargetsByShortOrModuleName) {
  ModelConfig m = *modelPreset("llama-7b");
  m.layers = 2;
  FinetuneConfig shortNames, modules;
  shortNames.lora.r = modules.lora.r = 8;
  shortNames.lora.targets = {"q", "v"};
  modules.lora.targets = {"q_proj", "v_proj"};
  const auto a = modelTensors(archSpecOf(m, 32000), shortNames);
  const auto b = modelTensors(archSpecOf(m, 32000), modules);
  ASSERT_EQ(a.size(), b.size());
  int64_t adapters = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    const bool lora = a[i].role == TensorRole::LoraA || a[i].role == TensorRole::LoraB;
    EXPECT_EQ(a[i].trainable, lora) << a[i].name;
    if (lora) adapters += a[i].numel();
  }
  // q: A 8x4096 + B 4096x8; v: the same (no GQA in LLaMA-7B); two layers.
  EXPECT_EQ(adapters, 2 * 2 * (8 * 4096 + 4096 * 8));
  EXPECT_TRUE(loraTargets({"q"}, archSpecOf(m, 32000), "q_proj"));
  EXPECT_FALSE(loraTargets({"q"}, archSpecOf(m, 32000), "k_proj"));
}

// Checkpointing keeps k block sets (the first without its input: that is the checkpoint) and
// one checkpoint per segment of k blocks.
TEST(ModelSpec, CheckpointingKeepsKSetsAndOneInputPerSegment) {
  ModelConfig m;
  m.layers = 5;
  m.heads = 2;
  m.d_model = 16;
  m.seq_len = 8;
  const auto arch = archSpecOf(m, 14);
  SavedStateOptions o;
  o.batch = 3;
  o.checkpointEvery = 2;
  int inputs = 0, checkpoints = 0;
  std::set<int> sets;
  for (const auto& b : savedState(arch, o)) {
    if (b.set >= 0) sets.insert(b.set);
    if (b.name == "input") {
      ++inputs;
      EXPECT_NE(b.set, 0);
    }
    if (b.name == "checkpoint") ++checkpoints;
  }
  EXPECT_EQ(sets, (std::set<int>{0, 1}));
  EXPECT_EQ(inputs, 1);
  EXPECT_EQ(checkpoints, 3);  // ceil(5 / 2)
  o.checkpointEvery = 0;
  sets.clear();
  for (const auto& b : savedState(arch, o))
    if (b.set >= 0) sets.insert(b.set);
  EXPECT_EQ(sets.size(), 5u);
}
