#include "trainscope/engine/io/HfExport.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"
#include "trainscope/kernels/Numeric.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace fs = std::filesystem;

namespace {

void writeFile(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) throw CheckpointError("cannot write " + p.string());
}

// config.json; `torchDtype` names the tensors' storage (transformers 4.x reads torch_dtype,
// 5.x dtype).
nlohmann::json hfConfig(const GptConfig& g, const core::RunConfig& c,
                        const std::string& torchDtype) {
  nlohmann::json j = core::modelFamily(g.architecture).writeHfConfig(g.arch(), c.model.dropout);
  j["torch_dtype"] = torchDtype;
  j["dtype"] = torchDtype;
  return j;
}

// Tensor bytes in the export's dtype and its safetensors name.
std::pair<std::string, std::string> encodeTensor(const std::vector<float>& v,
                                                 const std::string& dtype) {
  if (dtype == "fp32")
    return {"F32", std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size())};
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    h[i] = dtype == "bf16" ? kernels::floatToBf16(v[i]) : kernels::floatToFp16(v[i]);
  return {dtype == "bf16" ? "BF16" : "F16",
          std::string(reinterpret_cast<const char*>(h.data()), 2 * h.size())};
}

int dtypeBytes(const std::string& dtype) {
  return dtype == "fp32" ? 4 : 2;
}

// The file that marks a folder as one of our exports. Only such a folder, or an empty one, is
// replaced: anything else at --out is the user's, and the export never removes what it did not
// write.
constexpr const char* kExportMarker = ".trainscope-export";

// What the marker of a previous export says it wrote; empty when there is no readable marker.
std::set<std::string> exportedFiles(const fs::path& dir) {
  std::ifstream in(dir / kExportMarker);
  if (!in) return {};
  const auto j = core::parseBoundedJsonOrDiscarded(in);
  std::set<std::string> files;
  if (j.is_object() && j.contains("files") && j["files"].is_array())
    for (const auto& f : j["files"])
      if (f.is_string()) files.insert(f.get<std::string>());
  return files;
}

void checkExportTarget(const fs::path& target) {
  std::error_code ec;
  const auto st = fs::symlink_status(target, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st))
    throw std::invalid_argument("--out " + target.string() +
                                " exists and is not a folder: refusing to replace it (choose a "
                                "new or empty folder)");
  if (fs::is_empty(target, ec) && !ec) return;
  const std::set<std::string> ours = exportedFiles(target);
  if (ours.empty())
    throw std::invalid_argument(
        "--out " + target.string() + " is not empty and is not a folder export-hf wrote (it has " +
        "no readable " + kExportMarker + "): refusing to replace what it holds; choose a new or " +
        "empty folder, or a previous export");
  // A previous export, but something was added to it since: that is the user's.
  for (const auto& e : fs::directory_iterator(target, ec)) {
    const std::string name = e.path().filename().string();
    if (name != kExportMarker && !ours.count(name))
      throw std::invalid_argument("--out " + target.string() +
                                  " is a previous export-hf folder, but " + name +
                                  " was not written by it: refusing to replace the folder (move " +
                                  name + " out, or choose another folder)");
  }
}

// The finished folder into place: renamed onto a missing or empty target, or exchanged
// atomically with a previous export, which is then removed. A reader sees the old export or the
// new one, never a mix or none.
void moveIntoPlace(const fs::path& tmp, const fs::path& target) {
  checkExportTarget(target);  // again: the folder may have changed while the model loaded
  std::error_code ec;
  const bool previous = fs::exists(target / kExportMarker, ec);
  if (!previous) {
    fs::rename(tmp, target, ec);
    if (ec) throw CheckpointError("cannot rename into " + target.string() + ": " + ec.message());
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
    throw CheckpointError("cannot replace the previous export " + target.string() + ": " +
                          std::strerror(errno));
  fs::remove_all(tmp, ec);  // now the previous export
}

// What a model export reads: the model and its run, every value on the host, the family.
struct ExportSource {
  Gpt& model;
  const core::RunConfig& rc;
  const core::ModelFamily& family;
  const std::vector<float>& host;
};

// PEFT adapter files: adapter_model.safetensors (the family's prefix on every name) and
// adapter_config.json.
void writeAdapter(const ExportSource& src, const std::string& base, const fs::path& tmp,
                  HfExportResult& result) {
  result.adapter = true;
  SafetensorsWriter w;
  w.setMetadata("format", "pt");
  std::set<std::string> modules;
  for (const auto& p : src.model.params()) {
    if (p.spec.role != core::TensorRole::LoraA && p.spec.role != core::TensorRole::LoraB) continue;
    modules.insert(p.spec.module);
    w.add(src.family.peftPrefix() + p.name, "F32", p.shape, src.host.data() + p.offset,
          sizeof(float) * size_t(p.numel));
    ++result.tensors;
  }
  writeFile(tmp / "adapter_model.safetensors", w.serialize());
  const auto& lora = src.rc.finetune.lora;
  const nlohmann::json ac = {{"peft_type", "LORA"},
                             {"task_type", "CAUSAL_LM"},
                             {"r", lora.r},
                             {"lora_alpha", lora.alpha},
                             {"lora_dropout", lora.dropout},
                             {"use_rslora", lora.use_rslora},
                             {"target_modules", modules},
                             {"fan_in_fan_out", src.family.peftFanInFanOut()},
                             {"bias", "none"},
                             {"inference_mode", true},
                             {"base_model_name_or_path", base}};
  writeFile(tmp / "adapter_config.json", ac.dump(2));
  result.files = {"adapter_config.json", "adapter_model.safetensors"};
}

struct ExportTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// The full model's tensors (merged when it has adapters) under Hugging Face names and layout.
std::vector<ExportTensor> modelTensorsForExport(const ExportSource& src) {
  const auto merged = src.model.mergedWeights();
  std::vector<ExportTensor> items;
  for (const auto& p : src.model.params()) {
    if (p.spec.role == core::TensorRole::LoraA || p.spec.role == core::TensorRole::LoraB) continue;
    ExportTensor it{src.family.hfNames(p.spec, false).front(), p.shape, {}};
    auto m = merged.find(p.name);
    if (m != merged.end())
      it.data = m->second;
    else if (p.quantized())  // an NF4 base: its dequantized values, as PEFT merges them
      it.data = src.model.arena().dequantizedToHost(p);
    else
      it.data.assign(src.host.data() + p.offset, src.host.data() + p.offset + p.numel);
    if (src.family.hfTransposed(p.spec)) {  // (out, in) -> Conv1D (in, out)
      const int64_t o = p.shape[0], i = p.shape[1];
      std::vector<float> t(it.data.size());
      for (int64_t a = 0; a < o; ++a)
        for (int64_t b = 0; b < i; ++b) t[size_t(b * o + a)] = it.data[size_t(a * i + b)];
      it.data = std::move(t);
      it.shape = {i, o};
    }
    items.push_back(std::move(it));
  }
  return items;
}

// Shards of at most shardBytes (a tensor larger than that is a shard of its own), with
// model.safetensors.index.json when there are several.
void writeShards(const std::vector<ExportTensor>& items, const HfExportOptions& options,
                 const fs::path& tmp, HfExportResult& result) {
  int64_t total = 0;
  for (const auto& it : items) total += dtypeBytes(options.dtype) * int64_t(it.data.size());
  std::vector<std::vector<const ExportTensor*>> shards(1);
  int64_t inShard = 0;
  for (const auto& it : items) {
    const int64_t b = dtypeBytes(options.dtype) * int64_t(it.data.size());
    if (inShard > 0 && inShard + b > options.shardBytes) {
      shards.emplace_back();
      inShard = 0;
    }
    shards.back().push_back(&it);
    inShard += b;
  }
  nlohmann::json weightMap = nlohmann::json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char fn[64];
    if (shards.size() == 1)
      std::snprintf(fn, sizeof fn, "model.safetensors");
    else
      std::snprintf(fn, sizeof fn, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    SafetensorsWriter w;
    w.setMetadata("format", "pt");
    for (const ExportTensor* it : shards[s]) {
      const auto [dt, bytes] = encodeTensor(it->data, options.dtype);
      w.add(it->name, dt, it->shape, bytes.data(), bytes.size());
      weightMap[it->name] = fn;
    }
    writeFile(tmp / fn, w.serialize());
    result.files.push_back(fn);
  }
  if (shards.size() > 1) {
    writeFile(
        tmp / "model.safetensors.index.json",
        nlohmann::json({{"metadata", {{"total_size", total}}}, {"weight_map", weightMap}}).dump(2));
    result.files.push_back("model.safetensors.index.json");
  }
}

// config.json, with the special-token ids of the run's tokenizer (GPT2Config's default, 50256,
// would point outside a smaller vocabulary).
void writeModelConfig(const ExportSource& src, const std::string& tokenizerFile,
                      const std::string& dtype, const fs::path& tmp, HfExportResult& result) {
  const char* torchDtype = dtype == "bf16" ? "bfloat16" : dtype == "fp16" ? "float16" : "float32";
  nlohmann::json cfg = hfConfig(src.model.config(), src.rc, torchDtype);
  std::optional<HfTokenizer> tok;
  if (!tokenizerFile.empty()) tok = HfTokenizer::load(tokenizerFile);
  auto idOrNull = [](int32_t id) { return id >= 0 ? nlohmann::json(id) : nlohmann::json(); };
  cfg["bos_token_id"] = tok ? idOrNull(tok->bosId()) : nlohmann::json();
  cfg["eos_token_id"] = tok ? idOrNull(tok->eosId()) : nlohmann::json();
  writeFile(tmp / "config.json", cfg.dump(2));
  result.files.push_back("config.json");
}

// The run's tokenizer, so the folder is complete for transformers' AutoTokenizer.
void copyTokenizer(const std::string& tokenizerFile, const fs::path& tmp, HfExportResult& result) {
  std::error_code ec;
  for (const std::string& f : HfTokenizer::filesOf(tokenizerFile)) {
    const fs::path name = fs::path(f).filename();
    fs::copy_file(f, tmp / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw CheckpointError("cannot copy " + f + ": " + ec.message());
    result.files.push_back(name.string());
  }
}

}  // namespace

HfExportResult exportHf(const std::string& checkpoint, const std::string& out,
                        const HfExportOptions& options) {
  profiler::ScopedRange range("export_hf", profiler::SpanCategory::IO);
  std::error_code ec;
  auto backend = kernels::makeCpuBackend();
  if (options.dtype != "fp32" && options.dtype != "bf16" && options.dtype != "fp16")
    throw std::invalid_argument("--dtype '" + options.dtype +
                                "' is unknown: allowed fp32 | bf16 | fp16");
  checkExportTarget(fs::path(out));  // before the model loads: a refusal costs nothing
  LoadedModel lm = loadModelFrom(checkpoint, backend.get(), nullptr);
  checkpointAttachments(checkpoint);  // a damaged tokenizer file stops the export here
  const std::string tokenizerFile = modelTokenizer(checkpoint);
  if (lm.hfFolder) throw std::invalid_argument(checkpoint + " is already a Hugging Face folder");
  Gpt& model = *lm.model;
  const core::RunConfig& rc = lm.config;
  const std::string& base = lm.base;
  const GptConfig& g = model.config();
  const bool lora = rc.finetune.lora.r > 0;

  const fs::path target(out);
  const fs::path tmp = target.string() + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw CheckpointError("cannot create " + tmp.string() + ": " + ec.message());
  HfExportResult result;
  try {
    std::vector<float> host(static_cast<size_t>(model.arena().size()));
    model.arena().valuesToHost(host.data());
    const ExportSource src{model, rc, core::modelFamily(g.architecture), host};
    if (lora && !options.merge) {
      writeAdapter(src, base, tmp, result);
    } else {
      const auto items = modelTensorsForExport(src);
      result.tensors += static_cast<int64_t>(items.size());
      writeShards(items, options, tmp, result);
      writeModelConfig(src, tokenizerFile, options.dtype, tmp, result);
    }
    copyTokenizer(tokenizerFile, tmp, result);
    writeFile(tmp / kExportMarker, nlohmann::json({{"written_by", "trainscope-engine export-hf"},
                                                   {"source", checkpoint},
                                                   {"files", result.files}})
                                       .dump(2));
    moveIntoPlace(tmp, target);
  } catch (...) {
    std::error_code ec2;
    fs::remove_all(tmp, ec2);
    throw;
  }
  return result;
}

}  // namespace ts::engine
