// OLMo 2 (transformers' Olmo2ForCausalLM): no norms before the branches; RMSNorm on each
// branch's output before the residual add (post_attention_layernorm, post_feedforward_layernorm)
// and on the whole q and k projections (q_norm over heads x head_dim, not per head).
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

class Olmo2Family final : public LlamaLikeFamily {
 public:
  Olmo2Family() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t;
    t.name = "olmo2";
    t.displayName = "OLMo 2";
    t.description = "The llama block with norms after the branches and whole-projection q/k norms.";
    t.architectures = {"Olmo2ForCausalLM"};
    t.modelTypes = {"olmo2"};
    t.qkNorm = ArchSpec::QkNorm::Whole;
    t.preNorm = false;
    t.postNorm = true;
    t.postAttnNorm = "post_attention_layernorm";
    t.postMlpNorm = "post_feedforward_layernorm";
    return t;
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto o = [&](int L, int H, int KV, int C, int F) {
      ModelConfig m = shape(L, H, KV, C, F, 100352, 4096);
      m.rope_theta = 500000.0;
      m.norm_eps = 1e-6;
      m.max_positions = 4096;
      return m;
    };
    return {{"olmo-2-1b", o(16, 16, 16, 2048, 8192)},
            {"olmo-2-7b", o(32, 32, 32, 4096, 11008)},
            {"olmo-2-13b", o(40, 40, 40, 5120, 13824)},
            {"olmo-2-32b", o(64, 40, 8, 5120, 27648)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override { return {}; }
};

}  // namespace

const ModelFamily& olmo2Family() {
  static const Olmo2Family family;
  return family;
}

}  // namespace ts::core
