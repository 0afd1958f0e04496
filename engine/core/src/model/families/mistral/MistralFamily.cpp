// Mistral (transformers' MistralForCausalLM): the llama block with a sliding attention window
// on every layer (sliding_window; null in v0.2 and later).
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

class MistralFamily final : public LlamaLikeFamily {
 public:
  MistralFamily() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t;
    t.name = "mistral";
    t.displayName = "Mistral";
    t.description =
        "The llama block with sliding-window attention on every layer (banded, naive and flash).";
    t.architectures = {"MistralForCausalLM"};
    t.modelTypes = {"mistral"};
    t.extraKeys = {"sliding_window"};
    return t;
  }
  void readExtra(const HfFields& f, HfModelInfo& hf) const override {
    readSlidingWindow(f, hf.model, nullptr);
  }
  void writeExtra(const ArchSpec& a, nlohmann::json& j) const override {
    j["sliding_window"] = a.slidingWindow > 0 ? nlohmann::json(a.slidingWindow) : nullptr;
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    ModelConfig v01 = shape(32, 32, 8, 4096, 14336, 32000, 8192);
    v01.sliding_window = 4096;
    ModelConfig v03 = shape(32, 32, 8, 4096, 14336, 32768, 8192);
    v03.rope_theta = 1e6;
    return {{"mistral-7b-v0.1", v01}, {"mistral-7b-v0.3", v03}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override {
    return {{"mistral-7b", "mistral-7b-v0.3"}};
  }
};

}  // namespace

const ModelFamily& mistralFamily() {
  static const MistralFamily family;
  return family;
}

}  // namespace ts::core
