#pragma once
// A Hugging Face model folder's config.json in the run config's terms (model.*), plus what its
// safetensors headers say about the stored weights. Qt-free and compute-free so the engine's
// loader, the wizard and the planner read a folder the same way (the GUI does not link the
// engine). Supported: the architectures of every model family (ModelFamily.h, docs/models.md).
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"

namespace ts::core {

// Every message names the file and the field.
class HfConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HfModelInfo {
  std::string dir;
  std::string configPath;
  std::string architecture;  // config.json's "architectures"[0] ("Qwen3ForCausalLM", ...)
  ModelConfig model;         // model.seq_len = the model's positions (n_positions, ...)
  bool tiedHead = false;     // tie_word_embeddings (llama-like families)
  std::string configDtype;   // config.json's torch_dtype / dtype ("bfloat16", ...), or ""
  nlohmann::json config;     // config.json as read
};

// Whether `path` is a Hugging Face model folder (has config.json and no trainscope state.json).
bool isHfModelFolder(const std::string& path);
// `path`: the folder or its config.json. Throws HfConfigError naming the file and field:
// unreadable or not JSON, unsupported architecture, an option the family does not have (a rope
// type, biases, an MLP width, ...).
HfModelInfo readHfConfig(const std::string& path);

// The model.* keys of the folder's shape differing from `run` (a run fine-tuning the folder
// must describe its model): "model.layers: the run has 2, <dir>/config.json has 12", ...
// `vocab` is the run's resolved vocabulary.
std::vector<std::string> hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                                           int64_t vocab);

// What the folder's weight files store, from their safetensors headers only (no tensor data
// read): element count per dtype ("BF16" -> n), and the files' total size. Throws
// HfConfigError for a missing file or shard, or a header that is not safetensors.
struct HfStoredWeights {
  std::map<std::string, int64_t> elementsByDtype;
  int64_t fileBytes = 0;
  int files = 0;
  // "BF16", or "F32 + BF16" when mixed (the dtypes holding most elements first).
  std::string summary() const;
};
HfStoredWeights readHfStoredWeights(const std::string& dir);

// The run config's starting point for the folder: model.* from config.json, with seq_len the
// model's positions capped at `maxSeq` (what import-hf writes), and the folder as
// finetune.base_checkpoint.
RunConfig hfRunConfig(const std::string& dir, const ModelConfig& model, int maxSeq = 1024);

}  // namespace ts::core
