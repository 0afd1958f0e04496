// A sharded Hugging Face folder's model.safetensors.index.json (weight_map: tensor -> shard
// file), read by the engine's loader (engine::openHfModel, then loadHfWeights) and the
// planner's header reader (core::readHfStoredWeights). The folder is built once per process:
// the config.json of a tiny llama and its tensors split over two shards
// (model-00001-of-00002.safetensors, model-00002-of-00002.safetensors); the input is the index.
// Documented errors: FormatError (engine), HfConfigError (core).
#include <cstdint>
#include <string>
#include <vector>

#include "FuzzSupport.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;

namespace {

constexpr const char* kConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
  "num_key_value_heads": 1, "vocab_size": 12, "max_position_embeddings": 16,
  "rms_norm_eps": 1e-05, "tie_word_embeddings": false, "torch_dtype": "float32"
})";

const std::string& folder() {
  static const std::string dir = [] {
    const auto& d = ts::fuzz::scratchDir("hf_index");
    ts::fuzz::writeFile(d / "config.json", kConfig);
    const ts::core::HfModelInfo info = ts::core::readHfConfig(d.string());
    const auto tensors = ts::core::modelTensors(ts::core::archSpecOf(info.model, info.model.vocab));
    SafetensorsWriter shards[2];
    size_t i = 0;
    for (const auto& t : tensors) {
      int64_t n = 1;
      for (auto s : t.shape) n *= s;
      const std::vector<float> zeros(static_cast<size_t>(n), 0.01f * float(i));
      // Shard 2 holds bf16 tensors: both conversions run.
      if (i % 2 == 0) {
        shards[0].add(t.name, "F32", t.shape, zeros.data(), zeros.size() * 4);
      } else {
        const std::vector<uint16_t> half(static_cast<size_t>(n), 0x3c00);
        shards[1].add(t.name, "BF16", t.shape, half.data(), half.size() * 2);
      }
      ++i;
    }
    ts::fuzz::writeFile(d / "model-00001-of-00002.safetensors", shards[0].serialize());
    ts::fuzz::writeFile(d / "model-00002-of-00002.safetensors", shards[1].serialize());
    return d.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const std::string& dir = folder();
  ts::fuzz::writeFile(std::filesystem::path(dir) / "model.safetensors.index.json",
                      std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const auto w = ts::core::readHfStoredWeights(dir);
    TS_FUZZ_CHECK(w.files >= 1 && w.fileBytes > 0, "a folder that reads has weight files");
    (void)w.summary();
  } catch (const ts::core::HfConfigError&) {
  }
  try {
    const HfModel hf = openHfModel(dir);
    TS_FUZZ_CHECK(!hf.tensors.empty(), "an opened model maps its tensors");
    auto backend = ts::kernels::makeCpuBackend();
    ParamArena arena(ts::core::modelTensors(ts::core::archSpecOf(hf.model, hf.model.vocab)),
                     backend.get(), nullptr, ArenaOptions{});
    const auto loaded = loadHfWeights(hf, arena);
    TS_FUZZ_CHECK(!loaded.empty(), "a model that opens loads");
    (void)hfFingerprint(hf);
  } catch (const FormatError&) {
  }
  return 0;
}
