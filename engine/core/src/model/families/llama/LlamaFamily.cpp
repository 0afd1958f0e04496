// LLaMA (transformers' LlamaForCausalLM): RMSNorm, rotary positions (Llama 3.1+: rope_scaling
// of type llama3), SwiGLU of width d_ff, grouped-query attention, no biases; Llama 3.2 1B/3B
// tie the head to the embedding. Tensor names are Hugging Face's
// ("model.layers.0.self_attn.q_proj.weight"); q|k|v and gate|up are adjacent so one GEMM
// multiplies each.
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

class LlamaFamily final : public LlamaLikeFamily {
 public:
  LlamaFamily() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t;
    t.name = "llama";
    t.displayName = "LLaMA";
    t.description =
        "Llama 2 / 3.x: RMSNorm, rotary positions (llama3 scaling), SwiGLU MLP, grouped-query "
        "attention, no biases.";
    t.architectures = {"LlamaForCausalLM"};
    t.modelTypes = {"llama"};
    return t;
  }
  std::string hfNearMiss(std::string_view architecture) const override {
    if (architecture == "LlamaForSequenceClassification")
      return " (a classifier: the engine trains causal language models)";
    return "";
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto llama3 = [&](int L, int H, int C, int F, bool tied, double factor) {
      ModelConfig m = shape(L, H, 8, C, F, 128256, 8192);
      m.rope_theta = 500000.0;
      m.tie_embeddings = tied;
      m.max_positions = 131072;
      m.rope_scaling.type = "llama3";
      m.rope_scaling.factor = factor;
      m.rope_scaling.low_freq_factor = 1.0;
      m.rope_scaling.high_freq_factor = 4.0;
      m.rope_scaling.original_max_position_embeddings = 8192;
      return m;
    };
    return {{"llama-7b", shape(32, 32, 0, 4096, 11008, 32000, 2048)},
            {"llama-13b", shape(40, 40, 0, 5120, 13824, 32000, 2048)},
            {"llama-70b", shape(80, 64, 8, 8192, 28672, 32000, 4096)},
            {"llama-3.2-1b", llama3(16, 32, 2048, 8192, true, 32.0)},
            {"llama-3.2-3b", llama3(28, 24, 3072, 8192, true, 32.0)},
            {"llama-3.1-8b", llama3(32, 32, 4096, 14336, false, 8.0)},
            {"llama-3.1-70b", llama3(80, 64, 8192, 28672, false, 8.0)},
            {"llama-3.1-405b", llama3(126, 128, 16384, 53248, false, 8.0)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override {
    return {{"llama2-7b", "llama-7b"},          {"llama2-13b", "llama-13b"},
            {"llama2-70b", "llama-70b"},        {"llama-2-7b", "llama-7b"},
            {"llama-2-13b", "llama-13b"},       {"llama-2-70b", "llama-70b"},
            {"llama-3.3-70b", "llama-3.1-70b"}, {"llama3-8b", "llama-3.1-8b"}};
  }
};

}  // namespace

const ModelFamily& llamaFamily() {
  static const LlamaFamily family;
  return family;
}

}  // namespace ts::core
