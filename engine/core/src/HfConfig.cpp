#include "trainscope/core/HfConfig.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

namespace ts::core {

namespace fs = std::filesystem;

namespace {

// config.json fields, each read with a message naming the file and field.
struct Fields {
  const nlohmann::json& j;
  std::string file;
  // Every integer field is a size (layers, heads, widths, positions, vocabulary): positive and
  // within int, never truncated.
  int integer(const char* key) const {
    if (!j.contains(key) || !j[key].is_number_integer())
      throw HfConfigError(file + ": field '" + key + "' is missing or not an integer");
    const auto& v = j[key];
    // (0 and up parse as unsigned.)
    if (v.is_number_unsigned() ? v.get<uint64_t>() < 1 || v.get<uint64_t>() > uint64_t(INT_MAX)
                               : v.get<int64_t>() < 1 || v.get<int64_t>() > INT_MAX)
      throw HfConfigError(file + ": field '" + key + "' is " + v.dump() +
                          ": must be a positive integer (at most " + std::to_string(INT_MAX) + ")");
    return v.get<int>();
  }
  int integerOr(const char* key, int fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    return integer(key);
  }
  double number(const char* key, double fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_number()) throw HfConfigError(file + ": field '" + key + "' is not a number");
    return j[key].get<double>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_string()) throw HfConfigError(file + ": field '" + key + "' is not a string");
    return j[key].get<std::string>();
  }
  bool flag(const char* key, bool fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) throw HfConfigError(file + ": field '" + key + "' is not a boolean");
    return j[key].get<bool>();
  }
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw HfConfigError(file + ": " + key + " " + why);
  }
};

constexpr double kNormEps = 1e-5;  // the engine's LayerNorm / RMSNorm epsilon

void readGpt2(const Fields& f, ModelConfig& m) {
  m.arch = "gpt2";
  m.layers = f.integer("n_layer");
  m.heads = f.integer("n_head");
  m.d_model = f.integer("n_embd");
  m.seq_len = f.integerOr("n_positions", f.integerOr("n_ctx", 1024));
  m.vocab = f.integer("vocab_size");
  const int64_t inner = f.integerOr("n_inner", -1) < 0 ? 4 * int64_t(m.d_model)  // null: 4 * n_embd
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
  if (std::abs(f.number("layer_norm_epsilon", kNormEps) - kNormEps) > 1e-12)
    f.refuse("layer_norm_epsilon", "must be 1e-5 (the engine's LayerNorm epsilon)");
  if (f.flag("scale_attn_by_inverse_layer_idx", false) || f.flag("reorder_and_upcast_attn", false))
    f.refuse("scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn",
             "are not part of the gpt2 description");
}

void readLlama(const Fields& f, const std::string& cfgPath, ModelConfig& m, bool& tied) {
  const nlohmann::json& j = f.j;
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
    const Fields rp{j["rope_parameters"], cfgPath + " (rope_parameters)"};
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
  if (std::abs(f.number("rms_norm_eps", kNormEps) - kNormEps) > 1e-12)
    f.refuse("rms_norm_eps", "must be 1e-5 (the engine's RMSNorm epsilon)");
  tied = f.flag("tie_word_embeddings", false);
}

nlohmann::json readJsonFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw HfConfigError(path + ": cannot open" + what);
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw HfConfigError(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace

bool isHfModelFolder(const std::string& path) {
  std::error_code ec;
  const fs::path d(path);
  return fs::is_directory(d, ec) && fs::exists(d / "config.json", ec) &&
         !fs::exists(d / "state.json", ec);
}

HfModelInfo readHfConfig(const std::string& path) {
  HfModelInfo hf;
  std::error_code ec;
  const fs::path p(path);
  // A folder, or a config file itself (the planner opens one that may have been renamed).
  const bool file = fs::is_regular_file(p, ec);
  hf.dir = file ? p.parent_path().string() : p.string();
  hf.configPath = file ? p.string() : (p / "config.json").string();
  hf.config = readJsonFile(hf.configPath, " (not a Hugging Face model folder?)");
  if (!hf.config.is_object()) throw HfConfigError(hf.configPath + ": not a JSON object");
  const Fields f{hf.config, hf.configPath};
  const auto& arch = hf.config.find("architectures");
  if (arch != hf.config.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string())
    hf.architecture = (*arch)[0].get<std::string>();
  else
    hf.architecture = f.string("model_type", "");
  if (hf.architecture == "GPT2LMHeadModel" || hf.architecture == "gpt2") {
    hf.architecture = "GPT2LMHeadModel";
    readGpt2(f, hf.model);
  } else if (hf.architecture == "LlamaForCausalLM" || hf.architecture == "MistralForCausalLM" ||
             hf.architecture == "llama" || hf.architecture == "mistral") {
    if (hf.architecture == "llama") hf.architecture = "LlamaForCausalLM";
    if (hf.architecture == "mistral") hf.architecture = "MistralForCausalLM";
    readLlama(f, hf.configPath, hf.model, hf.tiedHead);
  } else {
    // Qwen2 is llama-shaped but its q/k/v projections always have biases.
    const std::string why = hf.architecture == "Qwen2ForCausalLM"
                                ? " (its q/k/v projections have biases, which the llama "
                                  "description does not have)"
                                : "";
    throw HfConfigError(hf.configPath + ": architecture '" + hf.architecture +
                        "' is not supported" + why +
                        ": allowed GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM");
  }
  // transformers >= 4.56 writes "dtype", older versions "torch_dtype".
  hf.configDtype = f.string("dtype", f.string("torch_dtype", ""));
  return hf;
}

HfStoredWeights readHfStoredWeights(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  std::vector<fs::path> files;
  const fs::path index = d / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    const auto ij = readJsonFile(index.string(), "");
    if (!ij.contains("weight_map") || !ij["weight_map"].is_object())
      throw HfConfigError(index.string() + ": has no weight_map object");
    std::set<std::string> names;
    for (const auto& [name, file] : ij["weight_map"].items()) {
      if (!file.is_string())
        throw HfConfigError(index.string() + ": weight_map['" + name + "'] is not a file name");
      names.insert(file.get<std::string>());
    }
    if (names.empty())
      throw HfConfigError(index.string() + ": weight_map is empty (it names no shard)");
    for (const auto& n : names) {
      if (n.find('/') != std::string::npos || n == ".." || n == "." || n.empty())
        throw HfConfigError(
            index.string() + ": shard '" + n +
            "' is outside the folder or is the folder itself (a shard is a file name)");
      files.push_back(d / n);
    }
  } else {
    files.push_back(d / "model.safetensors");
  }
  HfStoredWeights out;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw HfConfigError(file.string() + ": missing (the folder's weights: model.safetensors" +
                          " or the shards model.safetensors.index.json names)");
    unsigned char len[8] = {};
    in.read(reinterpret_cast<char*>(len), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    const auto size = static_cast<int64_t>(fs::file_size(file, ec));
    if (!in || n == 0 || n > uint64_t(100) << 20 || int64_t(n) + 8 > size)
      throw HfConfigError(file.string() + ": not a safetensors file (bad header length)");
    std::string header(n, '\0');
    in.read(header.data(), static_cast<std::streamsize>(n));
    nlohmann::json h;
    try {
      h = nlohmann::json::parse(header);
    } catch (const std::exception& e) {
      throw HfConfigError(file.string() + ": safetensors header is not valid JSON: " + e.what());
    }
    if (!h.is_object())
      throw HfConfigError(file.string() + ": safetensors header is not an object");
    for (const auto& [name, t] : h.items()) {
      if (name == "__metadata__") continue;
      if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() ||
          !t.contains("shape") || !t["shape"].is_array())
        throw HfConfigError(file.string() + ": tensor '" + name + "' has no dtype and shape");
      int64_t elems = 1;
      bool tooBig = false;
      for (const auto& s : t["shape"]) {
        if (!s.is_number_integer() || (!s.is_number_unsigned() && s.get<int64_t>() < 0))
          throw HfConfigError(file.string() + ": tensor '" + name + "' has a bad shape");
        const uint64_t d = s.get<uint64_t>();
        if (d == 0) {
          elems = 0;
          tooBig = false;
          break;
        }
        tooBig =
            tooBig || d > uint64_t(INT64_MAX) || __builtin_mul_overflow(elems, int64_t(d), &elems);
      }
      int64_t& total = out.elementsByDtype[t["dtype"].get<std::string>()];
      if (tooBig || __builtin_add_overflow(total, elems, &total))
        throw HfConfigError(file.string() + ": tensor '" + name +
                            "' has a shape larger than any file (element count overflows)");
    }
    out.fileBytes += size;
    ++out.files;
  }
  return out;
}

std::string HfStoredWeights::summary() const {
  std::vector<std::pair<int64_t, std::string>> v;
  for (const auto& [dtype, n] : elementsByDtype) v.emplace_back(n, dtype);
  std::sort(v.rbegin(), v.rend());
  std::string s;
  for (const auto& [n, dtype] : v) s += (s.empty() ? "" : " + ") + dtype;
  return s;
}

std::vector<std::string> hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                                           int64_t vocab) {
  std::vector<std::string> out;
  const auto& m = hf.model;
  auto cmp = [&](const char* key, int64_t r, int64_t h) {
    if (r != h)
      out.push_back(std::string(key) + ": the run has " + std::to_string(r) + ", " + hf.configPath +
                    " has " + std::to_string(h));
  };
  if (run.arch != m.arch)
    out.push_back("model.arch: the run has " + run.arch + ", the folder holds " + hf.architecture +
                  " (" + m.arch + ")");
  cmp("model.layers", run.layers, m.layers);
  cmp("model.heads", run.heads, m.heads);
  cmp("model.d_model", run.d_model, m.d_model);
  if (vocab != m.vocab)
    out.push_back("model.vocab: the run has " + std::to_string(vocab) +
                  (run.vocab == 0 ? " (from the data; set model.vocab)" : "") + ", " +
                  hf.configPath + " has " + std::to_string(m.vocab));
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

RunConfig hfRunConfig(const std::string& dir, const ModelConfig& model, int maxSeq) {
  RunConfig rc;
  fs::path p(dir);
  if (p.filename().empty()) p = p.parent_path();  // "folder/"
  rc.name = p.filename().string();
  rc.model = model;
  rc.model.seq_len = std::min(model.seq_len, maxSeq);
  rc.finetune.base_checkpoint = dir;
  return rc;
}

}  // namespace ts::core
