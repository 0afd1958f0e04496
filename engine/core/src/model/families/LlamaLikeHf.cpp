// The llama-like families' Hugging Face side: config.json in and out, tensor names, PEFT names.
#include <cmath>

#include "families/LlamaLikeFamily.h"

namespace ts::core {

void LlamaLikeFamily::readHfConfig(const HfFields& f, HfModelInfo& hf) const {
  const nlohmann::json& j = f.j;
  ModelConfig& m = hf.model;
  m.arch = t_.name;
  m.layers = f.integer("num_hidden_layers");
  m.heads = f.integer("num_attention_heads");
  m.kv_heads = f.integerOr("num_key_value_heads", m.heads);
  m.d_model = f.integer("hidden_size");
  m.d_ff = f.integer("intermediate_size");
  m.vocab = f.integer("vocab_size");
  m.seq_len = f.integerOr("max_position_embeddings", 2048);
  m.max_positions = m.seq_len;
  m.mlp = "swiglu";
  m.norm = "rmsnorm";
  if (m.heads < 1 || m.kv_heads < 1 || m.heads % m.kv_heads != 0)
    f.refuse("num_key_value_heads", "must divide num_attention_heads");
  const int hd = j.contains("head_dim") && !j["head_dim"].is_null()
                     ? f.integer("head_dim")
                     : (m.d_model % m.heads == 0 ? m.d_model / m.heads : 0);
  if (hd == 0) f.refuse("num_attention_heads", "must divide hidden_size (or set head_dim)");
  m.head_dim = m.d_model % m.heads == 0 && hd == m.d_model / m.heads ? 0 : hd;
  m.norm_eps = f.number("rms_norm_eps", f.number("layer_norm_epsilon", 1e-6));
  if (!(m.norm_eps > 0)) f.refuse("rms_norm_eps", "must be positive");
  m.tie_embeddings = f.flag("tie_word_embeddings", t_.tiedByDefault);
  const nlohmann::json params = j.contains("rope_parameters") ? j["rope_parameters"] : nullptr;
  if (!params.is_object() || !params.contains("full_attention")) readRope(f, params, m);
  const std::string act = f.string("hidden_act", f.string("hidden_activation", t_.hiddenAct));
  if (act != t_.hiddenAct && !(t_.hiddenAct == "gelu_pytorch_tanh" && act == "gelu_tanh"))
    f.refuse("hidden_act", "'" + act + "': " + t_.name + "'s MLP uses " + t_.hiddenAct);
  if (f.flag("mlp_bias", false)) f.refuse("mlp_bias", "must be false: the MLP has no biases");
  if (f.flag("attention_bias", t_.qkvBias) != t_.qkvBias)
    f.refuse("attention_bias", t_.qkvBias ? "must be true: the q/k/v projections have biases"
                                          : "must be false: the projections have no biases");
  readExtra(f, hf);
  hf.tiedHead = m.tie_embeddings;
  if (m.rope_scaling.type == "longrope") {
    const size_t half = size_t(int64_t(double(hd) * m.partial_rotary_factor) / 2);
    if (m.rope_scaling.short_factor.size() != half || m.rope_scaling.long_factor.size() != half)
      f.refuse("rope_scaling", "longrope's short_factor and long_factor need rotary_dim / 2 = " +
                                   std::to_string(half) + " values each");
  }
}

nlohmann::json LlamaLikeFamily::writeHfConfig(const ArchSpec& a, double dropout) const {
  nlohmann::json rope = {{"rope_type", "default"}, {"rope_theta", a.ropeTheta}};
  nlohmann::json j = {{"architectures", {t_.architectures.front()}},
                      {"model_type", t_.modelTypes.front()},
                      {"hidden_size", a.dModel},
                      {"intermediate_size", a.dFf},
                      {"num_hidden_layers", a.layers},
                      {"num_attention_heads", a.heads},
                      {"num_key_value_heads", a.kvHeads},
                      {"head_dim", a.headDim()},
                      {"vocab_size", a.vocab},
                      {"max_position_embeddings", a.maxPositions > 0 ? a.maxPositions : a.seqLen},
                      {"rms_norm_eps", a.normEps},
                      {"rope_theta", a.ropeTheta},
                      {"rope_scaling", ropeScalingJson(a.rope)},
                      {"hidden_act", t_.hiddenAct},
                      {"attention_dropout", dropout},
                      {"tie_word_embeddings", a.tiedHead}};
  if (a.partialRotary != 1.0) j["partial_rotary_factor"] = a.partialRotary;
  j["attention_bias"] = t_.qkvBias;
  j["mlp_bias"] = false;
  writeExtra(a, j);
  return j;
}

std::vector<std::string> LlamaLikeFamily::hfNames(const TensorSpec& t, bool tiedHead) const {
  std::vector<std::string> out = {t.name};
  if (t.role == TensorRole::Head && tiedHead) out.push_back("model.embed_tokens.weight");
  // A multimodal folder's language model: the same names under its prefix.
  const size_t plain = out.size();
  for (const auto& p : t_.nestedPrefixes)
    for (size_t i = 0; i < plain; ++i) {
      const std::string& n = out[i];
      out.push_back(n.rfind("model.", 0) == 0 ? p + n.substr(6) : p + n);
    }
  return out;
}

void LlamaLikeFamily::hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                                        std::vector<std::string>& out) const {
  const auto& m = hf.model;
  auto cmp = [&](const char* key, auto r, auto h) {
    if (r != h)
      out.push_back(std::string(key) + ": the run has " + nlohmann::json(r).dump() + ", " +
                    hf.configPath + " has " + nlohmann::json(h).dump());
  };
  cmp("model.kv_heads", run.kv_heads == 0 ? run.heads : run.kv_heads, m.kv_heads);
  cmp("model.d_ff", run.d_ff, m.d_ff);
  const ArchSpec ra = archSpecOf(run, 2), ha = archSpecOf(m, 2);
  cmp("model.head_dim", ra.headDim(), ha.headDim());
  cmp("model.tie_embeddings", run.tie_embeddings, m.tie_embeddings);
  if (std::abs(run.rope_theta - m.rope_theta) > 1e-9 * m.rope_theta)
    cmp("model.rope_theta", run.rope_theta, m.rope_theta);
  if (std::abs(run.norm_eps - m.norm_eps) > 1e-9 * m.norm_eps)
    cmp("model.norm_eps", run.norm_eps, m.norm_eps);
  if (!(run.rope_scaling == m.rope_scaling))
    cmp("model.rope_scaling.type", run.rope_scaling.type, m.rope_scaling.type);
  cmp("model.partial_rotary_factor", run.partial_rotary_factor, m.partial_rotary_factor);
  // The family's own keys, compared as the run config writes them.
  RunConfig rj, hj;
  rj.model = run;
  hj.model = m;
  const auto rm = toJson(rj)["model"], hm = toJson(hj)["model"];
  for (const char* k : {"sliding_window", "sliding_window_pattern", "rope_local_theta",
                        "query_pre_attn_scalar", "attn_softcap", "final_softcap"})
    if (readsModelKey(k)) cmp((std::string("model.") + k).c_str(), rm[k], hm[k]);
}

std::vector<std::string> LlamaLikeFamily::peftTargets(const RunConfig& c) const {
  std::vector<std::string> out;
  const ArchSpec a = archSpecOf(c.model, 2);
  for (const auto& t : c.finetune.lora.targets)
    for (const auto& p : projections(a))
      if (t == p.module || std::find(p.targets.begin(), p.targets.end(), t) != p.targets.end())
        addUnique(out, p.module);
  return out;
}

ModelConfig LlamaLikeFamily::shape(int layers, int heads, int kvHeads, int dModel, int dFf,
                                   int vocab, int seqLen) const {
  ModelConfig m;
  m.arch = t_.name;
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = kvHeads;
  m.d_model = dModel;
  m.d_ff = dFf;
  m.seq_len = seqLen;
  m.vocab = vocab;
  m.mlp = "swiglu";
  m.norm = "rmsnorm";
  m.activation = "gelu";
  return m;
}

}  // namespace ts::core
