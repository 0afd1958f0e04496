// GPT-2 (transformers' GPT2LMHeadModel): LayerNorm, learned positions, biases, a tied head and
// one fused c_attn; the engine's tensor names are the GPT-2 checkpoints' ("h.0.attn.c_attn").
// mlp/norm may be what-if shapes of the estimator (swiglu, rmsnorm); the engine refuses them.
#include <algorithm>
#include <cmath>

#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/HfFields.h"
#include "trainscope/core/model/ModelFamily.h"

namespace ts::core {
namespace {

class Gpt2Family final : public ModelFamily {
 public:
  std::string name() const override { return "gpt2"; }
  std::string displayName() const override { return "GPT-2"; }
  std::string description() const override {
    return "LayerNorm, learned positions, biases, GELU/ReLU MLP, tied head.";
  }
  std::vector<std::string> modelKeys() const override { return {"activation"}; }

  void describe(const ModelConfig& m, ArchSpec& a) const override {
    a.bias = true;
    a.learnedPos = true;
    a.tiedHead = true;
    a.fusedQkv = true;
    a.swiglu = lowerAscii(m.mlp) == "swiglu";
    a.rmsNorm = lowerAscii(m.norm) == "rmsnorm";
  }

  // GPT-2 keeps q, k and v in one c_attn module: an adapter on any of them is one adapter on
  // c_attn (as PEFT targets GPT-2), r x C and 3C x r.
  std::vector<Projection> projections(const ArchSpec& a) const override {
    const int64_t C = a.dModel, F = a.dFf;
    return {{{"q", "k", "v"}, "c_attn", C, a.qkvDim(), "attn.c_attn"},
            {{"o"}, "attn.c_proj", C, C, "attn.c_proj"},
            {{"fc"}, "c_fc", C, a.swiglu ? 2 * F : F, "mlp.c_fc"},
            {{"proj"}, "mlp.c_proj", F, C, "mlp.c_proj"}};
  }

  void tensors(TensorListBuilder& b) const override {
    using R = TensorRole;
    using S = BlockSlot;
    const ArchSpec& a = b.arch();
    const int64_t C = a.dModel, V = a.vocab, T = a.seqLen;
    const auto proj = projections(a);
    b.add("wte", {V, C}, R::TokenEmbedding, -1);
    if (a.learnedPos) b.add("wpe", {T, C}, R::PositionEmbedding, -1);
    auto norm = [&](const std::string& prefix, const std::string& n, int block, S slot) {
      b.add(prefix + n + ".weight", {C}, R::NormWeight, block, n, slot);
      if (!a.rmsNorm) b.add(prefix + n + ".bias", {C}, R::NormBias, block, n, slot);
    };
    for (int l = 0; l < a.layers; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      // The module names are PEFT's target names: c_attn, attn.c_proj, c_fc, mlp.c_proj.
      auto linear = [&](const Projection& p, S slot, bool resid) {
        b.add(h + p.path + ".weight", {p.out, p.in}, R::LinearWeight, l, p.module, slot, resid);
        if (a.bias) b.add(h + p.path + ".bias", {p.out}, R::LinearBias, l, p.module, slot);
        b.adapters(h, l, p);
      };
      norm(h, "ln_1", l, S::Norm1);
      linear(proj[0], S::Qkv, false);
      linear(proj[1], S::AttnOut, true);
      norm(h, "ln_2", l, S::Norm2);
      linear(proj[2], S::MlpUp, false);
      linear(proj[3], S::MlpDown, true);
    }
    norm("", "ln_f", -1, S::FinalNorm);
    if (!a.tiedHead) b.add("lm_head.weight", {V, C}, R::Head, -1);
  }

  void refusals(const RunConfig& c, const IssueSink& add) const override {
    if (c.model.mlp != "gelu")
      add("model.mlp", c.model.mlp, "the gpt2 description has a GELU/ReLU MLP (use llama)");
    if (c.model.norm != "layernorm")
      add("model.norm", c.model.norm, "the gpt2 description has LayerNorm (use llama)");
    if (c.model.kv_heads != 0 && c.model.kv_heads != c.model.heads)
      add("model.kv_heads", c.model.kv_heads,
          "grouped-query attention is part of the llama description (model.arch llama)");
    if (c.model.d_ff != 0 && c.model.d_ff != 4 * c.model.d_model)
      add("model.d_ff", c.model.d_ff, "the GPT-2 MLP is 4*d_model wide (use llama for d_ff)");
  }

  std::vector<std::string> hfArchitectures() const override { return {"GPT2LMHeadModel"}; }
  std::vector<std::string> hfModelTypes() const override { return {"gpt2"}; }

  void readHfConfig(const HfFields& f, HfModelInfo& hf) const override {
    ModelConfig& m = hf.model;
    m.arch = "gpt2";
    m.layers = f.integer("n_layer");
    m.heads = f.integer("n_head");
    m.d_model = f.integer("n_embd");
    m.seq_len = f.integerOr("n_positions", f.integerOr("n_ctx", 1024));
    m.vocab = f.integer("vocab_size");
    const int64_t inner = f.integerOr("n_inner", -1) < 0 ? 4 * int64_t(m.d_model)  // null: 4C
                                                         : f.integer("n_inner");
    if (inner != 4 * int64_t(m.d_model))
      f.refuse("n_inner", std::to_string(inner) + ": the gpt2 description's MLP is 4 * n_embd");
    const std::string act = f.string("activation_function", "gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh")
      m.activation = "gelu";
    else if (act == "relu")
      m.activation = "relu";
    else
      f.refuse("activation_function",
               "'" + act + "': the engine has GELU (tanh approximation: gelu_new) and relu");
    if (std::abs(f.number("layer_norm_epsilon", kEngineNormEps) - kEngineNormEps) > 1e-12)
      f.refuse("layer_norm_epsilon", "must be 1e-5 (the engine's LayerNorm epsilon)");
    if (f.flag("scale_attn_by_inverse_layer_idx", false) ||
        f.flag("reorder_and_upcast_attn", false))
      f.refuse("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn",
               "are not part of the gpt2 description");
  }

  nlohmann::json writeHfConfig(const ArchSpec& a, double dropout) const override {
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_layer", a.layers},
            {"n_head", a.heads},
            {"n_embd", a.dModel},
            {"n_positions", a.seqLen},
            {"n_ctx", a.seqLen},
            {"n_inner", nullptr},
            {"vocab_size", a.vocab},
            {"activation_function", a.relu ? "relu" : "gelu_new"},
            {"layer_norm_epsilon", 1e-5},
            {"resid_pdrop", dropout},
            {"embd_pdrop", dropout},
            {"attn_pdrop", 0.0},
            {"tie_word_embeddings", true}};
  }

  // transformers' GPT2LMHeadModel ("transformer.h.0.attn.c_attn.weight") or the bare GPT2Model
  // names some checkpoints carry ("h.0.attn.c_attn.weight"); wte/wpe with ".weight".
  std::vector<std::string> hfNames(const TensorSpec& t, bool) const override {
    const std::string base = t.name == "wte" || t.name == "wpe" ? t.name + ".weight" : t.name;
    return {"transformer." + base, base};
  }
  bool hfTransposed(const TensorSpec& t) const override {
    return t.role == TensorRole::LinearWeight;  // Conv1D: (in, out)
  }

  void hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                         std::vector<std::string>& out) const override {
    const auto& m = hf.model;
    if (run.seq_len > m.seq_len)
      out.push_back("model.seq_len: the run has " + std::to_string(run.seq_len) +
                    ", the model has " + std::to_string(m.seq_len) + " positions (n_positions)");
    if (run.activation != m.activation)
      out.push_back("model.activation: the run has " + run.activation + ", the model " +
                    m.activation);
  }

  std::string peftPrefix() const override { return "base_model.model.transformer."; }
  bool peftFanInFanOut() const override { return true; }
  // GPT-2 keeps q, k, v fused in attn.c_attn; "c_proj" names both projections.
  std::vector<std::string> peftTargets(const RunConfig& c) const override {
    std::vector<std::string> out;
    auto add = [&](const std::string& s) { addUnique(out, s); };
    for (const auto& t : c.finetune.lora.targets) {
      if (t == "q" || t == "k" || t == "v")
        add("c_attn");
      else if (t == "o" || t == "proj")
        add("c_proj");
      else if (t == "fc")
        add("c_fc");
    }
    return out;
  }

  std::vector<std::pair<std::string, ModelConfig>> presets() const override {
    auto shape = [](int L, int H, int C) {
      ModelConfig m;
      m.arch = "gpt2";
      m.layers = L;
      m.heads = H;
      m.d_model = C;
      m.seq_len = 1024;
      m.vocab = 50257;
      m.activation = "gelu";
      return m;
    };
    return {{"gpt2", shape(12, 12, 768)},
            {"gpt2-medium", shape(24, 16, 1024)},
            {"gpt2-large", shape(36, 20, 1280)},
            {"gpt2-xl", shape(48, 25, 1600)}};
  }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override {
    return {{"gpt2-124m", "gpt2"},       {"gpt2-small", "gpt2"},   {"gpt2-355m", "gpt2-medium"},
            {"gpt2-774m", "gpt2-large"}, {"gpt2-1.5b", "gpt2-xl"}, {"gpt2-1558m", "gpt2-xl"}};
  }
};

}  // namespace

const ModelFamily& gpt2Family() {
  static const Gpt2Family family;
  return family;
}

}  // namespace ts::core
