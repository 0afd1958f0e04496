#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include "trainscope/core/model/HfFields.h"
#include "trainscope/core/model/ModelFamily.h"

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

nlohmann::json readJsonFile(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw HfConfigError(path + ": cannot open" + what);
  try {
    return parseBoundedJson(in);
  } catch (const std::exception& e) {
    throw HfConfigError(path + ": not valid JSON: " + e.what());
  }
}

}  // namespace

int HfFields::integer(const char* key) const {
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

int HfFields::integerOr(const char* key, int fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return integer(key);
}

double HfFields::number(const char* key, double fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number()) throw HfConfigError(file + ": field '" + key + "' is not a number");
  return j[key].get<double>();
}

std::string HfFields::string(const char* key, const std::string& fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) throw HfConfigError(file + ": field '" + key + "' is not a string");
  return j[key].get<std::string>();
}

bool HfFields::flag(const char* key, bool fallback) const {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw HfConfigError(file + ": field '" + key + "' is not a boolean");
  return j[key].get<bool>();
}

void HfFields::refuse(const std::string& key, const std::string& why) const {
  throw HfConfigError(file + ": " + key + " " + why);
}

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
  const HfFields f{hf.config, hf.configPath};
  const auto& arch = hf.config.find("architectures");
  if (arch != hf.config.end() && arch->is_array() && !arch->empty() && (*arch)[0].is_string())
    hf.architecture = (*arch)[0].get<std::string>();
  else
    hf.architecture = f.string("model_type", "");
  const ModelFamily* family = familyForHf(hf.architecture);
  if (!family) {
    std::string why;
    for (const auto* fam : modelFamilies()) why += fam->hfNearMiss(hf.architecture);
    std::string allowed;
    for (const auto* fam : modelFamilies())
      for (const auto& a : fam->hfArchitectures()) allowed += (allowed.empty() ? "" : ", ") + a;
    throw HfConfigError(hf.configPath + ": architecture '" + hf.architecture +
                        "' is not supported" + why + ": allowed " + allowed);
  }
  // A model_type stands for its architecture (the same place in the family's two lists).
  const auto types = family->hfModelTypes();
  const auto archs = family->hfArchitectures();
  for (size_t i = 0; i < types.size() && i < archs.size(); ++i)
    if (hf.architecture == types[i]) hf.architecture = archs[i];
  // A multimodal folder (Gemma 3 4B+) keeps the language model's config under text_config.
  const auto text = hf.config.find("text_config");
  if (text != hf.config.end() && text->is_object())
    family->readHfConfig(HfFields{*text, hf.configPath + " (text_config)"}, hf);
  else
    family->readHfConfig(f, hf);
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
      h = parseBoundedJson(header);
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
  if (const ModelFamily* family = findModelFamily(m.arch)) family->hfShapeMismatches(hf, run, out);
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
