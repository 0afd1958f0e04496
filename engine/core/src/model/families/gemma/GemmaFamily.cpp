// Gemma 2 and Gemma 3 (transformers' Gemma2ForCausalLM, Gemma3ForCausalLM and the language model
// of Gemma3ForConditionalGeneration): embeddings times sqrt(hidden), RMSNorm as x (1 + w),
// four norms per block (before and after attention and MLP), GeGLU (gelu tanh), scores scaled
// by query_pre_attn_scalar^-0.5, sliding-window layers between global ones; Gemma 2 soft-caps
// scores and logits, Gemma 3 norms q and k per head and gives its sliding layers their own
// rotary base. Tied head.
#include "families/LlamaLikeFamily.h"

namespace ts::core {
namespace {

LlamaLikeTraits gemmaTraits() {
  LlamaLikeTraits t;
  t.geglu = true;
  t.embedScale = true;
  t.normOffset = 1.f;
  t.postNorm = true;
  t.norm1 = "input_layernorm";
  t.postAttnNorm = "post_attention_layernorm";
  t.norm2 = "pre_feedforward_layernorm";
  t.postMlpNorm = "post_feedforward_layernorm";
  t.hiddenAct = "gelu_pytorch_tanh";
  t.tiedByDefault = true;
  t.extraKeys = {"sliding_window", "sliding_window_pattern", "query_pre_attn_scalar"};
  return t;
}

// The keys both Gemmas read and write the same way: the score scale, the soft-caps, the window
// and the layers' kinds.
void readGemmaScalars(const HfFields& f, ModelConfig& m) {
  m.query_pre_attn_scalar = f.number("query_pre_attn_scalar", 256);
  m.attn_softcap = f.number("attn_logit_softcapping", 0.0);
  m.final_softcap = f.number("final_logit_softcapping", 0.0);
}

void writeGemmaKeys(const ArchSpec& a, nlohmann::json& j) {
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["query_pre_attn_scalar"] = a.queryPreAttnScalar > 0 ? a.queryPreAttnScalar : a.headDim();
  j["attn_logit_softcapping"] = a.attnSoftcap > 0 ? nlohmann::json(a.attnSoftcap) : nullptr;
  j["final_logit_softcapping"] = a.finalSoftcap > 0 ? nlohmann::json(a.finalSoftcap) : nullptr;
  j["sliding_window"] = a.slidingWindow > 0 ? a.slidingWindow : a.seqLen;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < a.layers; ++l)
    types.push_back(a.slidingLayer(l) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
}

class Gemma2Family final : public LlamaLikeFamily {
 public:
  Gemma2Family() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t = gemmaTraits();
    t.name = "gemma2";
    t.displayName = "Gemma 2";
    t.description =
        "x(1+w) RMSNorm before and after each branch, GeGLU, scaled embeddings, soft-capped "
        "scores and logits, sliding window on every other layer.";
    t.architectures = {"Gemma2ForCausalLM"};
    t.modelTypes = {"gemma2"};
    t.extraKeys.push_back("attn_softcap");
    t.extraKeys.push_back("final_softcap");
    return t;
  }
  void readExtra(const HfFields& f, HfModelInfo& hf) const override {
    ModelConfig& m = hf.model;
    readGemmaScalars(f, m);
    if (!f.j.contains("layer_types")) {
      // transformers 4: every other layer slides, the first one included.
      m.sliding_window = f.integerOr("sliding_window", 4096);
      m.sliding_window_pattern = 2;
    } else {
      readSlidingWindow(f, m, nullptr);
    }
  }
  void writeExtra(const ArchSpec& a, nlohmann::json& j) const override { writeGemmaKeys(a, j); }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto g = [&](int L, int H, int KV, int C, int F, int hd, double qpas) {
      ModelConfig m = shape(L, H, KV, C, F, 256000, 8192);
      m.head_dim = hd;
      m.norm_eps = 1e-6;
      m.tie_embeddings = true;
      m.query_pre_attn_scalar = qpas;
      m.attn_softcap = 50.0;
      m.final_softcap = 30.0;
      m.sliding_window = 4096;
      m.sliding_window_pattern = 2;
      m.max_positions = 8192;
      return m;
    };
    return {{"gemma-2-2b", g(26, 8, 4, 2304, 9216, 256, 256)},
            {"gemma-2-9b", g(42, 16, 8, 3584, 14336, 256, 256)},
            {"gemma-2-27b", g(46, 32, 16, 4608, 36864, 128, 144)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override { return {}; }
};

class Gemma3Family final : public LlamaLikeFamily {
 public:
  Gemma3Family() : LlamaLikeFamily(traits()) {}

 private:
  static LlamaLikeTraits traits() {
    LlamaLikeTraits t = gemmaTraits();
    t.name = "gemma3";
    t.displayName = "Gemma 3";
    t.description =
        "Gemma 2's block with per-head q/k norms, 5 sliding layers per global one with their own "
        "rotary base, no soft-capping.";
    t.architectures = {"Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"};
    t.modelTypes = {"gemma3_text", "gemma3"};
    t.qkNorm = ArchSpec::QkNorm::PerHead;
    t.extraKeys.push_back("rope_local_theta");
    t.extraKeys.push_back("attn_softcap");
    t.extraKeys.push_back("final_softcap");
    t.nestedPrefixes = {"model.language_model.", "language_model.model."};
    return t;
  }
  void readExtra(const HfFields& f, HfModelInfo& hf) const override {
    ModelConfig& m = hf.model;
    readGemmaScalars(f, m);
    readSlidingWindow(f, m, "sliding_window_pattern");
    if (!f.j.contains("layer_types") && !f.j.contains("sliding_window_pattern"))
      readSlidingWindow(f, m, "_sliding_window_pattern");
    m.rope_local_theta = f.number("rope_local_base_freq", 10000.0);
    // transformers 5: one rope_parameters per layer type.
    const auto& j = f.j;
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
        j["rope_parameters"].contains("full_attention")) {
      readRope(f, j["rope_parameters"]["full_attention"], m);
      const auto& local = j["rope_parameters"]["sliding_attention"];
      const HfFields lf{local, f.file + " (rope_parameters.sliding_attention)"};
      m.rope_local_theta = lf.number("rope_theta", m.rope_local_theta);
      if (lf.string("rope_type", "default") != "default")
        lf.refuse("rope_type", "must be default on the sliding layers");
    }
  }
  void writeExtra(const ArchSpec& a, nlohmann::json& j) const override {
    writeGemmaKeys(a, j);
    j["rope_local_base_freq"] = a.ropeLocalTheta > 0 ? a.ropeLocalTheta : a.ropeTheta;
  }
  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto g = [&](int L, int H, int KV, int C, int F, int hd, int V, int window, double qpas,
                 double linear) {
      ModelConfig m = shape(L, H, KV, C, F, V, 8192);
      m.head_dim = hd;
      m.norm_eps = 1e-6;
      m.tie_embeddings = true;
      m.query_pre_attn_scalar = qpas;
      m.sliding_window = window;
      m.sliding_window_pattern = 6;
      m.rope_theta = 1e6;
      m.rope_local_theta = 1e4;
      m.max_positions = 131072;
      if (linear > 1) {
        m.rope_scaling.type = "linear";
        m.rope_scaling.factor = linear;
      }
      return m;
    };
    return {{"gemma-3-1b", g(26, 4, 1, 1152, 6912, 256, 262144, 512, 256, 1)},
            {"gemma-3-4b", g(34, 8, 4, 2560, 10240, 256, 262208, 1024, 256, 8)},
            {"gemma-3-12b", g(48, 16, 8, 3840, 15360, 256, 262208, 1024, 256, 8)},
            {"gemma-3-27b", g(62, 32, 16, 5376, 21504, 128, 262208, 1024, 168, 8)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override { return {}; }
};

}  // namespace

const ModelFamily& gemma2Family() {
  static const Gemma2Family family;
  return family;
}
const ModelFamily& gemma3Family() {
  static const Gemma3Family family;
  return family;
}

}  // namespace ts::core
