#include "trainscope/engine/HfModel.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>

#include "trainscope/core/ModelSpec.h"
#include "trainscope/engine/Checkpoint.h"
#include "trainscope/engine/HfTokenizer.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace fs = std::filesystem;

namespace {

// config.json fields, each read with a message naming the file and field.
struct Fields {
  const nlohmann::json& j;
  std::string file;
  int integer(const char* key) const {
    if (!j.contains(key) || !j[key].is_number_integer())
      throw FormatError(file + ": field '" + key + "' is missing or not an integer");
    return j[key].get<int>();
  }
  int integerOr(const char* key, int fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    return integer(key);
  }
  double number(const char* key, double fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) throw FormatError(file + ": field '" + key + "' is not a number");
    return j[key].get<double>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_string()) throw FormatError(file + ": field '" + key + "' is not a string");
    return j[key].get<std::string>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) throw FormatError(file + ": field '" + key + "' is not a boolean");
    return j[key].get<bool>();
  }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw FormatError(file + ": " + key + " " + why);
  }
};

constexpr double kNormEps = 1e-5;  // the engine's LayerNorm / RMSNorm epsilon

}  // namespace

bool isHfModelFolder(const std::string& path) {
  std::error_code ec;
  const fs::path d(path);
  return fs::is_directory(d, ec) && fs::exists(d / "config.json", ec) &&
         !fs::exists(d / "state.json", ec);
}

HfModel openHfModel(const std::string& dir) {
  profiler::ScopedRange range("hf_open", profiler::SpanCategory::IO);
  HfModel hf;
  hf.dir = dir;
  const fs::path d(dir);
  const std::string cfgPath = (d / "config.json").string();
  {
    std::ifstream in(cfgPath);
    if (!in) throw FormatError(cfgPath + ": cannot open (not a Hugging Face model folder?)");
    try {
      hf.config = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw FormatError(cfgPath + ": not valid JSON: " + e.what());
    }
  }
  if (!hf.config.is_object()) throw FormatError(cfgPath + ": not a JSON object");
  const Fields f{hf.config, cfgPath};
  if (hf.config.contains("architectures") && hf.config["architectures"].is_array() &&
      !hf.config["architectures"].empty() && hf.config["architectures"][0].is_string())
    hf.architecture = hf.config["architectures"][0].get<std::string>();
  else
    hf.architecture = f.string("model_type", "");
  core::ModelConfig& m = hf.model;
  if (hf.architecture == "GPT2LMHeadModel" || hf.architecture == "gpt2") {
    hf.architecture = "GPT2LMHeadModel";
    m.arch = "gpt2";
    m.layers = f.integer("n_layer");
    m.heads = f.integer("n_head");
    m.d_model = f.integer("n_embd");
    m.seq_len = f.integerOr("n_positions", f.integerOr("n_ctx", 1024));
    m.vocab = f.integer("vocab_size");
    const int inner = f.integerOr("n_inner", 4 * m.d_model);
    if (inner != 4 * m.d_model)
      f.refuse("n_inner", std::to_string(inner) + ": the gpt2 description's MLP is 4 * n_embd");
    const std::string act = f.string("activation_function", "gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh")
      m.activation = "gelu";
    else if (act == "relu")
      m.activation = "relu";
    else
      f.refuse("activation_function", "'" + act +
                                          "': the engine has GELU (tanh approximation: "
                                          "gelu_new) and relu");
    if (std::abs(f.number("layer_norm_epsilon", kNormEps) - kNormEps) > 1e-12)
      f.refuse("layer_norm_epsilon", "must be 1e-5 (the engine's LayerNorm epsilon)");
    if (f.flag("scale_attn_by_inverse_layer_idx", false) ||
        f.flag("reorder_and_upcast_attn", false))
      f.refuse("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn",
               "are not part of the gpt2 description");
  } else if (hf.architecture == "LlamaForCausalLM" || hf.architecture == "MistralForCausalLM" ||
             hf.architecture == "llama" || hf.architecture == "mistral") {
    if (hf.architecture == "llama") hf.architecture = "LlamaForCausalLM";
    if (hf.architecture == "mistral") hf.architecture = "MistralForCausalLM";
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
    if (hf.config.contains("rope_parameters") && hf.config["rope_parameters"].is_object()) {
      const Fields rp{hf.config["rope_parameters"], cfgPath + " (rope_parameters)"};
      m.rope_theta = rp.number("rope_theta", m.rope_theta);
      const std::string type = rp.string("rope_type", "default");
      if (type != "default")
        rp.refuse("rope_type", "'" + type + "': only the default rotary embedding is supported");
    }
    if (hf.config.contains("rope_scaling") && !hf.config["rope_scaling"].is_null())
      f.refuse("rope_scaling",
               "is set: scaled rotary embeddings (LLaMA 3.1 and later) are not supported yet");
    if (f.string("hidden_act", "silu") != "silu") f.refuse("hidden_act", "must be silu (SwiGLU)");
    if (f.flag("attention_bias", false) || f.flag("mlp_bias", false))
      f.refuse("attention_bias / mlp_bias", "must be false: the llama description has no biases");
    if (std::abs(f.number("rms_norm_eps", kNormEps) - kNormEps) > 1e-12)
      f.refuse("rms_norm_eps", "must be 1e-5 (the engine's RMSNorm epsilon)");
    hf.tiedHead = f.flag("tie_word_embeddings", false);
  } else {
    // Qwen2 is llama-shaped but its q/k/v projections always have biases.
    const std::string why = hf.architecture == "Qwen2ForCausalLM"
                                ? " (its q/k/v projections have biases, which the llama "
                                  "description does not have)"
                                : "";
    throw FormatError(cfgPath + ": architecture '" + hf.architecture + "' is not supported" + why +
                      ": allowed GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM");
  }
  // The weights: one file, or the shards an index names.
  std::map<std::string, size_t> where;  // name in the files -> file index
  const fs::path index = d / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    nlohmann::json ij;
    try {
      std::ifstream in(index);
      ij = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw FormatError(index.string() + ": not valid JSON: " + e.what());
    }
    if (!ij.contains("weight_map") || !ij["weight_map"].is_object())
      throw FormatError(index.string() + ": has no weight_map object");
    std::map<std::string, size_t> fileIndex;
    for (const auto& [name, file] : ij["weight_map"].items()) {
      if (!file.is_string())
        throw FormatError(index.string() + ": weight_map['" + name + "'] is not a file name");
      const std::string fn = file.get<std::string>();
      if (fn.find('/') != std::string::npos || fn == "..")
        throw FormatError(index.string() + ": shard '" + fn + "' is outside the folder");
      auto it = fileIndex.find(fn);
      if (it == fileIndex.end()) {
        const fs::path shard = d / fn;
        if (!fs::exists(shard, ec))
          throw FormatError(index.string() + ": shard " + shard.string() + " is missing");
        hf.files.push_back(SafetensorsFile::load(shard.string()));
        it = fileIndex.emplace(fn, hf.files.size() - 1).first;
      }
      if (!hf.files[it->second].has(name))
        throw FormatError(index.string() + ": tensor '" + name + "' is not in its shard " + fn);
      where[name] = it->second;
    }
  } else {
    const fs::path single = d / "model.safetensors";
    if (!fs::exists(single, ec))
      throw FormatError(dir + ": has neither model.safetensors nor model.safetensors.index.json");
    hf.files.push_back(SafetensorsFile::load(single.string()));
    for (const auto& [name, e] : hf.files[0].entries()) where[name] = 0;
  }
  // The engine's names onto the files'.
  const auto spec = core::modelTensors(core::archSpecOf(m, m.vocab));
  for (const auto& t : spec) {
    HfModel::Source src;
    std::vector<std::string> candidates;
    if (m.arch == "gpt2") {
      // transformers' GPT2LMHeadModel ("transformer.h.0.attn.c_attn.weight") or the bare
      // GPT2Model names some checkpoints carry ("h.0.attn.c_attn.weight"); wte/wpe with
      // ".weight".
      const std::string base = t.name == "wte" || t.name == "wpe" ? t.name + ".weight" : t.name;
      candidates = {"transformer." + base, base};
      src.transpose = t.role == core::TensorRole::LinearWeight;  // Conv1D: (in, out)
    } else {
      candidates = {t.name};
      if (t.role == core::TensorRole::Head && hf.tiedHead)
        candidates.push_back("model.embed_tokens.weight");
    }
    bool found = false;
    for (const auto& c : candidates)
      if (auto it = where.find(c); it != where.end()) {
        src.file = it->second;
        src.name = c;
        found = true;
        break;
      }
    if (!found)
      throw FormatError(dir + ": tensor '" + candidates.front() + "' (" + hf.architecture +
                        ") is in none of the model files");
    hf.tensors[t.name] = src;
  }
  return hf;
}

size_t importHfModel(const std::string& dir, const std::string& out) {
  const HfModel hf = openHfModel(dir);
  auto backend = kernels::makeCpuBackend();
  ParamArena arena(core::modelTensors(core::archSpecOf(hf.model, hf.model.vocab)), backend.get(),
                   nullptr, ArenaOptions{});
  const size_t n = loadHfWeights(hf, arena).size();
  core::RunConfig rc;
  rc.name = fs::path(dir).filename().string();
  rc.model = hf.model;
  rc.model.seq_len = std::min(hf.model.seq_len, 1024);
  const nlohmann::json extra = {
      {"imported_from",
       {{"path", dir}, {"architecture", hf.architecture}, {"fingerprint", hfFingerprint(hf)}}}};
  saveWeightsCheckpoint(out, arena, core::toJson(rc), extra,
                        HfTokenizer::filesOf(HfTokenizer::findIn(dir)));
  return n;
}

std::string hfFingerprint(const HfModel& hf) {
  uint64_t h = fnv1a64(hf.config.dump());
  for (const auto& f : hf.files)
    for (const auto& [name, e] : f.entries())
      h = fnv1a64(name + e.dtype + std::to_string(e.begin) + ":" + std::to_string(e.end), h);
  return hex64(h);
}

std::vector<std::string> hfShapeMismatches(const HfModel& hf, const core::ModelConfig& run,
                                           int64_t vocab) {
  std::vector<std::string> out;
  const auto& m = hf.model;
  auto cmp = [&](const char* key, int64_t r, int64_t h) {
    if (r != h)
      out.push_back(std::string(key) + ": the run has " + std::to_string(r) + ", " + hf.dir +
                    "/config.json has " + std::to_string(h));
  };
  if (run.arch != m.arch)
    out.push_back("model.arch: the run has " + run.arch + ", the folder holds " + hf.architecture +
                  " (" + m.arch + ")");
  cmp("model.layers", run.layers, m.layers);
  cmp("model.heads", run.heads, m.heads);
  cmp("model.d_model", run.d_model, m.d_model);
  if (vocab != m.vocab)
    out.push_back("model.vocab: the run has " + std::to_string(vocab) +
                  (run.vocab == 0 ? " (from the data; set model.vocab)" : "") + ", " + hf.dir +
                  "/config.json has " + std::to_string(m.vocab));
  if (m.arch == "gpt2") {
    if (run.seq_len > m.seq_len)
      out.push_back("model.seq_len: the run has " + std::to_string(run.seq_len) +
                    ", the model has " + std::to_string(m.seq_len) + " positions (n_positions)");
    if (run.activation != m.activation)
      out.push_back("model.activation: the run has " + run.activation + ", the model " +
                    m.activation);
  } else {
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
  return out;
}

std::vector<std::string> loadHfWeights(const HfModel& hf, ParamArena& arena) {
  profiler::ScopedRange range("hf_load", profiler::SpanCategory::IO);
  using R = core::TensorRole;
  // Check every tensor first: the arena stays untouched on any error.
  for (const auto& p : arena.params()) {
    if (p.spec.role == R::LoraA || p.spec.role == R::LoraB) continue;
    auto it = hf.tensors.find(p.name);
    if (it == hf.tensors.end())
      throw FormatError(hf.dir + ": the model has no tensor for '" + p.name + "'");
    const auto& src = it->second;
    const auto& file = hf.files[src.file];
    const auto& e = file.entry(src.name);
    std::vector<int64_t> want = p.shape;
    if (src.transpose && want.size() == 2) std::swap(want[0], want[1]);
    // GPT-2 trained or evaluated on windows shorter than n_positions: the first seq_len rows
    // of the position table are the positions used.
    const bool positionPrefix = p.name == "wpe" && e.shape.size() == 2 && want.size() == 2 &&
                                e.shape[1] == want[1] && e.shape[0] > want[0];
    if (e.shape != want && !positionPrefix)
      throw FormatError(file.origin() + ": tensor '" + src.name + "' has shape " +
                        nlohmann::json(e.shape).dump() + ", the run's model needs " +
                        nlohmann::json(want).dump());
    if (e.dtype != "F32" && e.dtype != "BF16" && e.dtype != "F16")
      throw FormatError(file.origin() + ": tensor '" + src.name + "' has dtype " + e.dtype +
                        " (F32, BF16 or F16 supported)");
  }
  std::vector<float> host(static_cast<size_t>(arena.size()));
  arena.values().copyToHost(host.data());
  std::vector<std::string> loaded;
  std::vector<float> tmp, tmp2;
  for (const auto& p : arena.params()) {
    if (p.spec.role == R::LoraA || p.spec.role == R::LoraB) continue;
    const auto& src = hf.tensors.at(p.name);
    if (p.quantized()) tmp2.resize(size_t(p.numel));
    float* dst = p.quantized() ? tmp2.data() : host.data() + p.offset;
    const auto& e = hf.files[src.file].entry(src.name);
    const int64_t stored =
        std::accumulate(e.shape.begin(), e.shape.end(), int64_t(1), std::multiplies<>());
    if (stored > p.numel) {  // the position table's first rows (checked above)
      tmp.resize(static_cast<size_t>(stored));
      hf.files[src.file].readAsF32(src.name, tmp.data(), stored);
      std::copy(tmp.begin(), tmp.begin() + p.numel, dst);
    } else if (!src.transpose) {
      hf.files[src.file].readAsF32(src.name, dst, p.numel);
    } else {
      tmp.resize(static_cast<size_t>(p.numel));
      hf.files[src.file].readAsF32(src.name, tmp.data(), p.numel);
      const int64_t out = p.shape[0], in = p.shape[1];  // stored (in, out)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) dst[o * in + i] = tmp[size_t(i * out + o)];
    }
    if (p.quantized()) arena.setQuantized(p, dst);  // QLoRA: quantized as it loads
    loaded.push_back(p.name);
  }
  arena.values().copyFromHost(host.data());
  return loaded;
}

}  // namespace ts::engine
