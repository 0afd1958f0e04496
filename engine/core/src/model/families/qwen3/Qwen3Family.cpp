// Qwen3 (transformers' Qwen3ForCausalLM): the llama block with an RMSNorm over each head of q
// and k before the rotation (q_norm, k_norm) and head_dim independent of hidden_size; 0.6B-4B
// tie the head.
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

class Qwen3Family final : public LlamaLikeFamily {
 public:
  Qwen3Family() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t;
    t.name = "qwen3";
    t.displayName = "Qwen3";
    t.description = "The llama block with per-head q/k RMSNorm and an explicit head_dim.";
    t.architectures = {"Qwen3ForCausalLM"};
    t.modelTypes = {"qwen3"};
    t.qkNorm = ArchSpec::QkNorm::PerHead;
    return t;
  }
  void readExtra(const HfFields& f, HfModelInfo&) const override {
    if (f.flag("use_sliding_window", false))
      f.refuse("use_sliding_window", "is true: Qwen3's sliding layers are not supported");
  }
  void writeExtra(const ArchSpec&, nlohmann::json& j) const override {
    j["use_sliding_window"] = false;
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto q = [&](int L, int H, int C, int F, bool tied) {
      ModelConfig m = shape(L, H, 8, C, F, 151936, 4096);
      m.head_dim = 128;
      m.rope_theta = 1e6;
      m.norm_eps = 1e-6;
      m.tie_embeddings = tied;
      m.max_positions = 40960;
      return m;
    };
    return {
        {"qwen3-0.6b", q(28, 16, 1024, 3072, true)},  {"qwen3-1.7b", q(28, 16, 2048, 6144, true)},
        {"qwen3-4b", q(36, 32, 2560, 9728, true)},    {"qwen3-8b", q(36, 32, 4096, 12288, false)},
        {"qwen3-14b", q(40, 40, 5120, 17408, false)}, {"qwen3-32b", q(64, 64, 5120, 25600, false)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override { return {}; }
};

}  // namespace

const ModelFamily& qwen3Family() {
  static const Qwen3Family family;
  return family;
}

}  // namespace ts::core
