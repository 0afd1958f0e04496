// Phi-3 / 3.5 / 4 (transformers' Phi3ForCausalLM): the llama block with q|k|v and gate|up each
// stored as one tensor (qkv_proj, gate_up_proj: the engine multiplies them as one GEMM anyway,
// and PEFT adapts them as one module), partial rotary embeddings (partial_rotary_factor) and
// longrope scaling with short and long factors.
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

class Phi3Family final : public LlamaLikeFamily {
 public:
  Phi3Family() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t;
    t.name = "phi3";
    t.displayName = "Phi-3 / Phi-4";
    t.description =
        "The llama block with fused qkv_proj and gate_up_proj, partial rotary, longrope, "
        "sliding window.";
    t.architectures = {"Phi3ForCausalLM"};
    t.modelTypes = {"phi3"};
    t.fusedProjections = true;
    t.extraKeys = {"partial_rotary_factor", "sliding_window"};
    return t;
  }
  void readExtra(const HfFields& f, HfModelInfo& hf) const override {
    readSlidingWindow(f, hf.model, nullptr);
    if (f.number("resid_pdrop", 0.0) > 0 || f.number("embd_pdrop", 0.0) > 0)
      hf.model.dropout = std::max(f.number("resid_pdrop", 0.0), f.number("embd_pdrop", 0.0));
  }
  void writeExtra(const ArchSpec& a, nlohmann::json& j) const override {
    j["sliding_window"] = a.slidingWindow > 0 ? nlohmann::json(a.slidingWindow) : nullptr;
    if (a.rope.original_max_position_embeddings > 0)
      j["original_max_position_embeddings"] = a.rope.original_max_position_embeddings;
    j.erase("attention_bias");
    j.erase("mlp_bias");
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    ModelConfig mini = shape(32, 32, 32, 3072, 8192, 32064, 4096);
    mini.sliding_window = 2047;
    mini.max_positions = 4096;
    ModelConfig medium = shape(40, 40, 10, 5120, 17920, 32064, 4096);
    ModelConfig phi4mini = shape(32, 24, 8, 3072, 8192, 200064, 4096);
    phi4mini.tie_embeddings = true;
    phi4mini.partial_rotary_factor = 0.75;
    phi4mini.max_positions = 131072;
    return {{"phi-3-mini", mini}, {"phi-3-medium", medium}, {"phi-4-mini", phi4mini}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override {
    return {{"phi-3.5-mini", "phi-3-mini"}};
  }
};

}  // namespace

const ModelFamily& phi3Family() {
  static const Phi3Family family;
  return family;
}

}  // namespace ts::core
