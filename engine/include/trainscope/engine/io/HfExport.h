#pragma once
// export-hf: a trainscope checkpoint as a Hugging Face folder that transformers (and PEFT)
// load. A full checkpoint becomes config.json + model.safetensors (GPT2LMHeadModel with Conv1D
// weights transposed back to (in, out), or LlamaForCausalLM), sharded with
// model.safetensors.index.json above `shardBytes`. A LoRA run's checkpoint becomes PEFT's
// adapter_model.safetensors (keys base_model.model.<module path>.lora_A.weight / .lora_B.weight)
// and adapter_config.json; with `merge` the merged model instead (W + scaling B A), its base
// read from where the run's checkpoint says it came from. The tokenizer files the run had
// (kept with its checkpoint, or its base's) are copied alongside.
//
// `out` is written only when it is missing, an empty folder, or a folder a previous export-hf
// wrote (it holds `.trainscope-export`, which every export leaves): that one is exchanged
// atomically for the new export. Anything else is refused before the model loads, and nothing
// the export did not write is ever removed.
#include <cstdint>
#include <string>
#include <vector>

namespace ts::engine {

struct HfExportOptions {
  bool merge = false;
  int64_t shardBytes = int64_t(5) << 30;  // transformers' default max_shard_size is 5 GB
  std::string dtype = "fp32";             // fp32 | bf16 | fp16: the tensors' storage (RNE)
};

struct HfExportResult {
  std::vector<std::string> files;  // written, relative to the output folder
  bool adapter = false;            // PEFT adapter files (a LoRA checkpoint without merge)
  int64_t tensors = 0;
};

// Throws CheckpointError (unreadable or damaged checkpoint, a LoRA checkpoint whose base is
// gone, I/O) or std::invalid_argument (nothing to export; `out` holds something else).
HfExportResult exportHf(const std::string& checkpoint, const std::string& out,
                        const HfExportOptions& options = {});

}  // namespace ts::engine
