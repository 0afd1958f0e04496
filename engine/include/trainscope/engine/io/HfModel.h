#pragma once
// Hugging Face model folders: config.json plus model.safetensors, or shards listed in
// model.safetensors.index.json. Supported: GPT2LMHeadModel and LlamaForCausalLM, and
// MistralForCausalLM where its config fits the llama description (no sliding window shorter
// than the run's sequence). The shards are memory-mapped; tensors are converted from
// F32/BF16/F16 to the engine's fp32 while loading, GPT-2's Conv1D weights (stored (in, out))
// transposed to the engine's (out, in). Every error names the file and the field or tensor.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/engine/params/ParamArena.h"

namespace ts::engine {

// dir, architecture, model (the shape in the run config's terms), tiedHead and config come from
// core::readHfConfig; the weight files and the name map are the engine's.
struct HfModel : core::HfModelInfo {
  std::vector<SafetensorsFile> files;
  // The engine's tensor name -> (file index, name in that file); from config.json's
  // architecture and the index.
  struct Source {
    size_t file = 0;
    std::string name;
    bool transpose = false;  // GPT-2 Conv1D
  };
  std::map<std::string, Source> tensors;
};

using core::isHfModelFolder;
// Reads config.json (core::readHfConfig) and maps (or opens the shards of) the weights. Throws
// FormatError naming the file and field: unsupported architecture, unsupported option
// (rope_scaling, biases the description does not have, a norm epsilon the engine does not use),
// missing shard, a tensor missing from the index's file.
HfModel openHfModel(const std::string& dir);
// Every tensor of `arena` from the model (converted to fp32; LoRA adapters, which a base does
// not have, are skipped): shapes checked first, so the arena is untouched on any error. A GPT-2
// position table longer than the run's model.seq_len gives its first seq_len rows (an export
// of such a run has n_positions = seq_len). Returns the names loaded.
std::vector<std::string> loadHfWeights(const HfModel& hf, ParamArena& arena);

using core::hfShapeMismatches;
// import-hf: the folder's weights as a trainscope checkpoint directory `out` (model.safetensors
// in the engine's names and layout, fp32; no optimizer state; state.json with the run config a
// fine-tuning run of it starts from: model.* from config.json). Written atomically like every
// checkpoint (CheckpointError on I/O problems). Returns the number of tensors.
size_t importHfModel(const std::string& dir, const std::string& out);

// A fingerprint of the folder (config.json and each weight file's size and header), what an
// adapter checkpoint records as its base.
std::string hfFingerprint(const HfModel& hf);

}  // namespace ts::engine
