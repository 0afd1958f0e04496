#include "trainscope/engine/io/HfModel.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace fs = std::filesystem;

HfModel openHfModel(const std::string& dir) {
  profiler::ScopedRange range("hf_open", profiler::SpanCategory::IO);
  HfModel hf;
  const fs::path d(dir);
  try {
    static_cast<core::HfModelInfo&>(hf) = core::readHfConfig(dir);
  } catch (const core::HfConfigError& e) {
    throw FormatError(e.what());
  }
  const core::ModelConfig& m = hf.model;
  // The weights: one file, or the shards an index names.
  std::map<std::string, size_t> where;  // name in the files -> file index
  const fs::path index = d / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    nlohmann::json ij;
    try {
      std::ifstream in(index);
      ij = core::parseBoundedJson(in);
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
      if (fn.find('/') != std::string::npos || fn == ".." || fn == "." || fn.empty())
        throw FormatError(
            index.string() + ": weight_map['" + name + "'] names shard '" + fn +
            "', which is outside the folder or is the folder itself (a shard is a file name)");
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
  const core::ArchSpec arch = core::archSpecOf(m, m.vocab);
  const core::ModelFamily& family = core::modelFamily(arch.arch);
  const auto spec = core::modelTensors(arch);
  for (const auto& t : spec) {
    HfModel::Source src;
    std::vector<std::string> candidates;
    candidates = family.hfNames(t, hf.tiedHead);
    src.transpose = family.hfTransposed(t);
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
  core::RunConfig rc = core::hfRunConfig(dir, hf.model);
  rc.finetune.base_checkpoint.clear();  // the checkpoint holds the weights itself
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
  arena.valuesToHost(host.data());
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
  arena.setValuesFromHost(host.data());
  return loaded;
}

}  // namespace ts::engine
