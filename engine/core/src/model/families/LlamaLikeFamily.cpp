#include "families/LlamaLikeFamily.h"

#include <algorithm>
#include <cmath>

namespace ts::core {

std::vector<std::string> LlamaLikeFamily::modelKeys() const {
  std::vector<std::string> keys = {"kv_heads",     "d_ff",         "rope_theta", "mlp",
                                   "norm",         "head_dim",     "norm_eps",   "tie_embeddings",
                                   "rope_scaling", "max_positions"};
  for (const auto& k : t_.extraKeys) addUnique(keys, k);
  return keys;
}

void LlamaLikeFamily::describe(const ModelConfig& m, ArchSpec& a) const {
  a.bias = false;
  a.learnedPos = false;
  a.tiedHead = m.tie_embeddings;
  a.fusedQkv = t_.fusedProjections;
  a.swiglu = true;
  a.geglu = t_.geglu;
  a.rmsNorm = true;
  a.qkvBias = t_.qkvBias;
  a.qkNorm = t_.qkNorm;
  a.preNorm = t_.preNorm;
  a.postNorm = t_.postNorm;
  a.normOffset = t_.normOffset;
  a.embedScale = t_.embedScale;
}

std::vector<Projection> LlamaLikeFamily::projections(const ArchSpec& a) const {
  const int64_t C = a.dModel, F = a.dFf, Q = a.qDim(), KV = a.kvDim();
  if (t_.fusedProjections)
    return {{{"q", "k", "v"}, "qkv_proj", C, a.qkvDim(), "self_attn.qkv_proj"},
            {{"o"}, "o_proj", Q, C, "self_attn.o_proj"},
            {{"fc"}, "gate_up_proj", C, 2 * F, "mlp.gate_up_proj"},
            {{"proj"}, "down_proj", F, C, "mlp.down_proj"}};
  return {
      {{"q"}, "q_proj", C, Q, "self_attn.q_proj"},   {{"k"}, "k_proj", C, KV, "self_attn.k_proj"},
      {{"v"}, "v_proj", C, KV, "self_attn.v_proj"},  {{"o"}, "o_proj", Q, C, "self_attn.o_proj"},
      {{"fc"}, "gate_proj", C, F, "mlp.gate_proj"},  {{"fc"}, "up_proj", C, F, "mlp.up_proj"},
      {{"proj"}, "down_proj", F, C, "mlp.down_proj"}};
}

void LlamaLikeFamily::tensors(TensorListBuilder& b) const {
  using R = TensorRole;
  using S = BlockSlot;
  const ArchSpec& a = b.arch();
  const int64_t C = a.dModel, V = a.vocab, hd = a.headDim();
  const auto proj = projections(a);
  b.add("model.embed_tokens.weight", {V, C}, R::TokenEmbedding, -1);
  for (int l = 0; l < a.layers; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    // A slot's weights are adjacent (q|k|v and gate|up are multiplied as one GEMM each), its
    // adapters follow them, then its biases (adjacent too: one bias of the fused output).
    auto slot = [&](std::vector<int> which, S s, bool resid, const char* fused, bool bias) {
      for (int i : which) {
        const auto& p = proj[size_t(i)];
        TensorSpec* t =
            b.add(h + p.path + ".weight", {p.out, p.in}, R::LinearWeight, l, p.module, s, resid);
        if (t && fused && which.size() > 1) t->fusedName = h + fused;
      }
      for (int i : which) b.adapters(h, l, proj[size_t(i)]);
      if (bias)
        for (int i : which) {
          const auto& p = proj[size_t(i)];
          b.add(h + p.path + ".bias", {p.out}, R::LinearBias, l, p.module, s);
        }
    };
    auto norm = [&](const std::string& n, S s, int64_t dim) {
      if (!n.empty()) b.add(h + n + ".weight", {dim}, R::NormWeight, l, n, s);
    };
    const bool fused = t_.fusedProjections;
    if (t_.preNorm) norm(t_.norm1, S::Norm1, C);
    slot(fused ? std::vector<int>{0} : std::vector<int>{0, 1, 2}, S::Qkv, false,
         "self_attn.qkv_proj.weight", a.qkvBias);
    if (a.qkNorm != ArchSpec::QkNorm::None) {
      const bool whole = a.qkNorm == ArchSpec::QkNorm::Whole;
      norm("self_attn.q_norm", S::QNorm, whole ? a.qDim() : hd);
      norm("self_attn.k_norm", S::KNorm, whole ? a.kvDim() : hd);
    }
    slot({fused ? 1 : 3}, S::AttnOut, true, nullptr, false);
    if (t_.postNorm) norm(t_.postAttnNorm, S::PostAttnNorm, C);
    if (t_.preNorm) norm(t_.norm2, S::Norm2, C);
    slot(fused ? std::vector<int>{2} : std::vector<int>{4, 5}, S::MlpUp, false,
         "mlp.gate_up_proj.weight", false);
    slot({fused ? 3 : 6}, S::MlpDown, true, nullptr, false);
    if (t_.postNorm) norm(t_.postMlpNorm, S::PostMlpNorm, C);
  }
  b.add("model.norm.weight", {C}, R::NormWeight, -1, "norm", S::FinalNorm);
  if (!a.tiedHead) b.add("lm_head.weight", {V, C}, R::Head, -1);
}

void LlamaLikeFamily::refusals(const RunConfig& c, const IssueSink& add) const {
  const ModelConfig& m = c.model;
  if (m.mlp != "gelu" && m.mlp != "swiglu")
    add("model.mlp", m.mlp, t_.name + "'s MLP is gated (" + t_.hiddenAct + ")");
  if (m.norm != "layernorm" && m.norm != "rmsnorm")
    add("model.norm", m.norm, t_.name + "'s norm is RMSNorm");
  const ArchSpec a = archSpecOf(m, 2);
  if (a.rotaryDim() < 2 && a.headDim() % 2 == 0)
    add("model.partial_rotary_factor", m.partial_rotary_factor,
        "rotates fewer than 2 dims of a head of " + std::to_string(a.headDim()));
  if (m.head_dim == 0 && m.d_model % std::max(1, m.heads) != 0)
    add("model.heads", m.heads, "must divide d_model when model.head_dim is 0");
  if (a.headDim() % 2 != 0) {
    if (m.head_dim > 0)
      add("model.head_dim", m.head_dim, "rotary embeddings need an even head dimension");
    else
      add("model.d_model", m.d_model,
          "rotary embeddings need an even head dimension (d_model / heads)");
  }
  if (c.memory.activation_compression == "sparse")
    add("memory.activation_compression", "sparse",
        "sparse compression needs a ReLU MLP; a gated MLP's output is not sparse (use int8)");
  const auto& r = m.rope_scaling;
  if (r.type == "longrope") {
    const size_t half = size_t(a.rotaryDim() / 2);
    for (const auto* list : {&r.short_factor, &r.long_factor})
      if (list->size() != half)
        add(list == &r.short_factor ? "model.rope_scaling.short_factor"
                                    : "model.rope_scaling.long_factor",
            *list, "longrope needs rotary_dim / 2 = " + std::to_string(half) + " values");
  }
}

namespace {

// config.json's rope type and its parameters.
void readRopeObject(const HfFields& r, ModelConfig& m) {
  auto& s = m.rope_scaling;
  s.type = r.string("rope_type", r.string("type", "default"));
  if (s.type == "su") s.type = "longrope";  // transformers' old name
  static const std::vector<std::string> known = {"default", "linear", "dynamic",
                                                 "llama3",  "yarn",   "longrope"};
  if (std::find(known.begin(), known.end(), s.type) == known.end())
    r.refuse(
        "rope_type",
        "'" + s.type + "' is not supported (default, linear, dynamic, llama3, yarn, longrope)");
  m.rope_theta = r.number("rope_theta", m.rope_theta);
  s.factor = r.number("factor", 1.0);
  s.low_freq_factor = r.number("low_freq_factor", 1.0);
  s.high_freq_factor = r.number("high_freq_factor", 4.0);
  s.original_max_position_embeddings =
      r.integerOr("original_max_position_embeddings", s.original_max_position_embeddings);
  s.attention_factor = r.number("attention_factor", 0.0);
  s.beta_fast = r.number("beta_fast", 32.0);
  s.beta_slow = r.number("beta_slow", 1.0);
  if (r.j.contains("mscale") || r.j.contains("mscale_all_dim"))
    r.refuse("mscale", "is set: yarn with mscale (DeepSeek's attention scaling) is not supported");
  if (!r.flag("truncate", true)) r.refuse("truncate", "false is not supported (yarn truncates)");
  for (auto [key, list] :
       {std::pair{"short_factor", &s.short_factor}, std::pair{"long_factor", &s.long_factor}})
    if (r.j.contains(key) && r.j[key].is_array()) {
      list->clear();
      for (const auto& v : r.j[key]) {
        if (!v.is_number()) r.refuse(key, "must be a list of numbers");
        list->push_back(v.get<double>());
      }
    }
  m.partial_rotary_factor = r.number("partial_rotary_factor", m.partial_rotary_factor);
}

}  // namespace

void readRope(const HfFields& f, const nlohmann::json& params, ModelConfig& m) {
  m.rope_theta = f.number("rope_theta", 10000.0);
  m.partial_rotary_factor = f.number("partial_rotary_factor", 1.0);
  m.rope_scaling = {};
  m.rope_scaling.original_max_position_embeddings =
      f.integerOr("original_max_position_embeddings", 0);
  if (params.is_object()) readRopeObject(HfFields{params, f.file + " (rope_parameters)"}, m);
  const auto& j = f.j;
  if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) {
    const double theta = m.rope_theta;
    readRopeObject(HfFields{j["rope_scaling"], f.file + " (rope_scaling)"}, m);
    m.rope_theta = theta;  // rope_scaling carries no base
  } else if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    f.refuse("rope_scaling", "must be an object or null");
  }
}

void readSlidingWindow(const HfFields& f, ModelConfig& m, const char* patternKey) {
  m.sliding_window = 0;
  m.sliding_window_pattern = 0;
  const int window = f.integerOr("sliding_window", 0);
  if (window <= 0) return;
  const auto& j = f.j;
  std::vector<bool> sliding;
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    for (const auto& t : j["layer_types"]) sliding.push_back(t == "sliding_attention");
  } else if (patternKey) {
    const int k = f.integerOr(patternKey, 0);
    for (int l = 0; l < m.layers; ++l) sliding.push_back(k <= 0 || (l + 1) % k != 0);
  } else {
    sliding.assign(size_t(m.layers), true);
  }
  if (std::none_of(sliding.begin(), sliding.end(), [](bool s) { return s; })) return;
  m.sliding_window = window;
  // The pattern that reproduces the list: all sliding (0), or every k-th layer global.
  auto matches = [&](int k) {
    for (size_t l = 0; l < sliding.size(); ++l)
      if (sliding[l] != (k <= 0 || (l + 1) % size_t(k) != 0)) return false;
    return true;
  };
  for (int k = 0; k <= int(sliding.size()) + 1; ++k)
    if (k != 1 && matches(k)) {
      m.sliding_window_pattern = k;
      return;
    }
  f.refuse("layer_types",
           "mixes sliding and full attention layers in an order the engine does not "
           "describe (every layer sliding, or every k-th layer full)");
}

nlohmann::json ropeScalingJson(const ModelConfig::RopeScaling& r) {
  if (r.type == "default") return nullptr;
  nlohmann::json j = {{"rope_type", r.type}, {"factor", r.factor}};
  if (r.type == "llama3") {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
  }
  if (r.original_max_position_embeddings > 0)
    j["original_max_position_embeddings"] = r.original_max_position_embeddings;
  if (r.attention_factor > 0) j["attention_factor"] = r.attention_factor;
  if (r.type == "yarn") {
    j["beta_fast"] = r.beta_fast;
    j["beta_slow"] = r.beta_slow;
  }
  if (r.type == "longrope") {
    j["short_factor"] = r.short_factor;
    j["long_factor"] = r.long_factor;
  }
  return j;
}

}  // namespace ts::core
