// Qwen2 / Qwen2.5 (transformers' Qwen2ForCausalLM): the llama block with biases on q, k and v
// (o_proj and the MLP have none); 0.5B-3B tie the head. Sliding windows are off in the
// released models (use_sliding_window false), and refused when on.
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

class Qwen2Family final : public LlamaLikeFamily {
 public:
  Qwen2Family() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t;
    t.name = "qwen2";
    t.displayName = "Qwen2 / Qwen2.5";
    t.description = "The llama block with q/k/v biases.";
    t.architectures = {"Qwen2ForCausalLM"};
    t.modelTypes = {"qwen2"};
    t.qkvBias = true;
    return t;
  }
  void readExtra(const HfFields& f, HfModelInfo&) const override {
    if (f.flag("use_sliding_window", false))
      f.refuse("use_sliding_window",
               "is true: Qwen2's windows on the layers above max_window_layers are not supported");
  }
  void writeExtra(const ArchSpec&, nlohmann::json& j) const override {
    j["use_sliding_window"] = false;
    j.erase("attention_bias");
    j.erase("mlp_bias");
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto q = [&](int L, int H, int KV, int C, int F, int V, bool tied) {
      ModelConfig m = shape(L, H, KV, C, F, V, 4096);
      m.rope_theta = 1e6;
      m.norm_eps = 1e-6;
      m.tie_embeddings = tied;
      m.max_positions = 32768;
      return m;
    };
    return {{"qwen2.5-0.5b", q(24, 14, 2, 896, 4864, 151936, true)},
            {"qwen2.5-1.5b", q(28, 12, 2, 1536, 8960, 151936, true)},
            {"qwen2.5-3b", q(36, 16, 2, 2048, 11008, 151936, true)},
            {"qwen2.5-7b", q(28, 28, 4, 3584, 18944, 152064, false)},
            {"qwen2.5-14b", q(48, 40, 8, 5120, 13824, 152064, false)},
            {"qwen2.5-32b", q(64, 40, 8, 5120, 27648, 152064, false)},
            {"qwen2.5-72b", q(80, 64, 8, 8192, 29568, 152064, false)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override { return {}; }
};

}  // namespace

const ModelFamily& qwen2Family() {
  static const Qwen2Family family;
  return family;
}

}  // namespace ts::core
