// LLaMA (transformers' LlamaForCausalLM, and MistralForCausalLM where its config fits):
// RMSNorm, rotary positions, SwiGLU of width d_ff, grouped-query attention, no biases, an
// untied head (tie_word_embeddings reads the embedding as the head). Tensor names are Hugging
// Face's ("model.layers.0.self_attn.q_proj.weight"); q|k|v and gate|up are adjacent so one GEMM
// multiplies each.
#include <algorithm>
#include <cmath>

#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/HfFields.h"
#include "trainscope/core/model/ModelFamily.h"

namespace ts::core {
namespace {

class LlamaFamily final : public ModelFamily {
 public:
  std::string name() const override { return "llama"; }
  std::string displayName() const override { return "LLaMA"; }
  std::string description() const override {
    return "RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases, untied "
           "head.";
  }
  std::vector<std::string> modelKeys() const override {
    return {"kv_heads", "d_ff", "rope_theta", "mlp", "norm"};
  }

  void describe(const ModelConfig&, ArchSpec& a) const override {
    a.bias = false;
    a.learnedPos = false;
    a.tiedHead = false;
    a.fusedQkv = false;
    a.swiglu = true;
    a.rmsNorm = true;
  }

  std::vector<Projection> projections(const ArchSpec& a) const override {
    const int64_t C = a.dModel, F = a.dFf, KV = a.kvDim();
    return {
        {{"q"}, "q_proj", C, C, "self_attn.q_proj"},   {{"k"}, "k_proj", C, KV, "self_attn.k_proj"},
        {{"v"}, "v_proj", C, KV, "self_attn.v_proj"},  {{"o"}, "o_proj", C, C, "self_attn.o_proj"},
        {{"fc"}, "gate_proj", C, F, "mlp.gate_proj"},  {{"fc"}, "up_proj", C, F, "mlp.up_proj"},
        {{"proj"}, "down_proj", F, C, "mlp.down_proj"}};
  }

  void tensors(TensorListBuilder& b) const override {
    using R = TensorRole;
    using S = BlockSlot;
    const ArchSpec& a = b.arch();
    const int64_t C = a.dModel, V = a.vocab;
    const auto proj = projections(a);
    b.add("model.embed_tokens.weight", {V, C}, R::TokenEmbedding, -1);
    for (int l = 0; l < a.layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      // A slot's weights are adjacent (q|k|v and gate|up are multiplied as one GEMM each), its
      // adapters follow them.
      auto slot = [&](std::initializer_list<int> which, S s, bool resid, const char* fused) {
        for (int i : which) {
          const auto& p = proj[size_t(i)];
          TensorSpec* t =
              b.add(h + p.path + ".weight", {p.out, p.in}, R::LinearWeight, l, p.module, s, resid);
          if (t && fused) t->fusedName = h + fused;
        }
        for (int i : which) b.adapters(h, l, proj[size_t(i)]);
      };
      b.add(h + "input_layernorm.weight", {C}, R::NormWeight, l, "input_layernorm", S::Norm1);
      slot({0, 1, 2}, S::Qkv, false, "self_attn.qkv_proj.weight");
      slot({3}, S::AttnOut, true, nullptr);
      b.add(h + "post_attention_layernorm.weight", {C}, R::NormWeight, l,
            "post_attention_layernorm", S::Norm2);
      slot({4, 5}, S::MlpUp, false, "mlp.gate_up_proj.weight");
      slot({6}, S::MlpDown, true, nullptr);
    }
    b.add("model.norm.weight", {C}, R::NormWeight, -1, "norm", S::FinalNorm);
    b.add("lm_head.weight", {V, C}, R::Head, -1);
  }

  void refusals(const RunConfig& c, const IssueSink& add) const override {
    if (c.model.mlp != "gelu" && c.model.mlp != "swiglu")
      add("model.mlp", c.model.mlp, "llama's MLP is SwiGLU");
    if (c.model.norm != "layernorm" && c.model.norm != "rmsnorm")
      add("model.norm", c.model.norm, "llama's norm is RMSNorm");
    if ((c.model.d_model / std::max(1, c.model.heads)) % 2 != 0)
      add("model.d_model", c.model.d_model,
          "rotary embeddings need an even head dimension (d_model / heads)");
    if (c.memory.activation_compression == "sparse")
      add("memory.activation_compression", "sparse",
          "sparse compression needs a ReLU MLP; llama's SwiGLU output is not sparse (use int8)");
  }

  std::vector<std::string> hfArchitectures() const override {
    return {"LlamaForCausalLM", "MistralForCausalLM"};
  }
  std::vector<std::string> hfModelTypes() const override { return {"llama", "mistral"}; }
  std::string hfNearMiss(std::string_view architecture) const override {
    // Qwen2 is llama-shaped but its q/k/v projections always have biases.
    if (architecture == "Qwen2ForCausalLM")
      return " (its q/k/v projections have biases, which the llama description does not have)";
    return "";
  }

  void readHfConfig(const HfFields& f, HfModelInfo& hf) const override {
    const nlohmann::json& j = f.j;
    ModelConfig& m = hf.model;
    m.arch = "llama";
    m.layers = f.integer("num_hidden_layers");
    m.heads = f.integer("num_attention_heads");
    m.kv_heads = f.integerOr("num_key_value_heads", m.heads);
    m.d_model = f.integer("hidden_size");
    m.d_ff = f.integer("intermediate_size");
    m.vocab = f.integer("vocab_size");
    m.seq_len = f.integerOr("max_position_embeddings", 2048);
    m.mlp = "swiglu";
    m.norm = "rmsnorm";
    if (m.heads < 1 || m.d_model % m.heads != 0)
      f.refuse("num_attention_heads", "must divide hidden_size");
    if (f.integerOr("head_dim", m.d_model / m.heads) != m.d_model / m.heads)
      f.refuse("head_dim", "must be hidden_size / num_attention_heads in the llama description");
    // rope_theta (transformers < 5) or rope_parameters.rope_theta; only the default rope type.
    m.rope_theta = f.number("rope_theta", 10000.0);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
      const HfFields rp{j["rope_parameters"], f.file + " (rope_parameters)"};
      m.rope_theta = rp.number("rope_theta", m.rope_theta);
      const std::string type = rp.string("rope_type", "default");
      if (type != "default")
        rp.refuse("rope_type", "'" + type + "': only the default rotary embedding is supported");
    }
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
      f.refuse("rope_scaling",
               "is set: scaled rotary embeddings (LLaMA 3.1 and later) are not supported yet");
    if (f.string("hidden_act", "silu") != "silu") f.refuse("hidden_act", "must be silu (SwiGLU)");
    if (f.flag("attention_bias", false) || f.flag("mlp_bias", false))
      f.refuse("attention_bias / mlp_bias", "must be false: the llama description has no biases");
    if (std::abs(f.number("rms_norm_eps", kEngineNormEps) - kEngineNormEps) > 1e-12)
      f.refuse("rms_norm_eps", "must be 1e-5 (the engine's RMSNorm epsilon)");
    hf.tiedHead = f.flag("tie_word_embeddings", false);
  }

  nlohmann::json writeHfConfig(const ArchSpec& a, double dropout) const override {
    return {{"architectures", {"LlamaForCausalLM"}},
            {"model_type", "llama"},
            {"hidden_size", a.dModel},
            {"intermediate_size", a.dFf},
            {"num_hidden_layers", a.layers},
            {"num_attention_heads", a.heads},
            {"num_key_value_heads", a.kvHeads},
            {"head_dim", a.headDim()},
            {"vocab_size", a.vocab},
            {"max_position_embeddings", a.seqLen},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", a.ropeTheta},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"attention_dropout", dropout},
            {"tie_word_embeddings", false}};
  }

  std::vector<std::string> hfNames(const TensorSpec& t, bool tiedHead) const override {
    if (t.role == TensorRole::Head && tiedHead) return {t.name, "model.embed_tokens.weight"};
    return {t.name};
  }
  bool hfTransposed(const TensorSpec&) const override { return false; }

  void hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                         std::vector<std::string>& out) const override {
    const auto& m = hf.model;
    auto cmp = [&](const char* key, int64_t r, int64_t h) {
      if (r != h)
        out.push_back(std::string(key) + ": the run has " + std::to_string(r) + ", " +
                      hf.configPath + " has " + std::to_string(h));
    };
    cmp("model.kv_heads", run.kv_heads == 0 ? run.heads : run.kv_heads, m.kv_heads);
    cmp("model.d_ff", run.d_ff, m.d_ff);
    if (std::abs(run.rope_theta - m.rope_theta) > 1e-9 * m.rope_theta)
      out.push_back("model.rope_theta: the run has " + std::to_string(run.rope_theta) +
                    ", the model " + std::to_string(m.rope_theta));
    const auto sw = hf.config.find("sliding_window");
    if (sw != hf.config.end() && sw->is_number_integer() && sw->get<int>() < run.seq_len)
      out.push_back("model.seq_len: " + std::to_string(run.seq_len) +
                    " is longer than the model's sliding_window " + std::to_string(sw->get<int>()) +
                    " (sliding-window attention is not in the llama description)");
  }

  std::string peftPrefix() const override { return "base_model.model."; }
  bool peftFanInFanOut() const override { return false; }
  std::vector<std::string> peftTargets(const RunConfig& c) const override {
    std::vector<std::string> out;
    auto add = [&](const std::string& s) { addUnique(out, s); };
    for (const auto& t : c.finetune.lora.targets) {
      if (t == "q")
        add("q_proj");
      else if (t == "k")
        add("k_proj");
      else if (t == "v")
        add("v_proj");
      else if (t == "o")
        add("o_proj");
      else if (t == "fc") {
        if (c.model.mlp == "swiglu") add("gate_proj");
        add("up_proj");
      } else if (t == "proj")
        add("down_proj");
    }
    return out;
  }

  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto shape = [](int L, int H, int KV, int C, int F, int T) {
      ModelConfig m;
      m.arch = "llama";
      m.layers = L;
      m.heads = H;
      m.kv_heads = KV;
      m.d_model = C;
      m.d_ff = F;
      m.seq_len = T;
      m.vocab = 32000;
      m.mlp = "swiglu";
      m.norm = "rmsnorm";
      m.activation = "gelu";
      return m;
    };
    return {{"llama-7b", shape(32, 32, 0, 4096, 11008, 2048)},
            {"llama-13b", shape(40, 40, 0, 5120, 13824, 2048)},
            {"llama-70b", shape(80, 64, 8, 8192, 28672, 4096)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override {
    return {{"llama2-7b", "llama-7b"},  {"llama2-13b", "llama-13b"},  {"llama2-70b", "llama-70b"},
            {"llama-2-7b", "llama-7b"}, {"llama-2-13b", "llama-13b"}, {"llama-2-70b", "llama-70b"}};
  }
};

}  // namespace

const ModelFamily& llamaFamily() {
  static const LlamaFamily family;
  return family;
}

}  // namespace ts::core
