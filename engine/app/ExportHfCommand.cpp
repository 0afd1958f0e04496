// `trainscope-engine export-hf CHECKPOINT --out DIR [--merge] [--shard-size BYTES] [--dtype D]`: a
// checkpoint as a Hugging Face folder (HfExport.h); a LoRA run's as PEFT adapter files, or merged.
#include <cstdio>
#include <memory>
#include <string>

#include "Commands.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/io/HfExport.h"

namespace ts::app {

void addExportHfCommand(CLI::App& app, int& exitCode) {
  struct Options {
    std::string checkpoint, out;
    bool merge = false;
    int64_t shardBytes = int64_t(5) << 30;
    std::string dtype = "fp32";
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "export-hf", "Write a checkpoint as a Hugging Face folder (LoRA runs: PEFT adapter files)");
  cmd->add_option("CHECKPOINT", opts->checkpoint, "Checkpoint directory (or its state.json)")
      ->required();
  cmd->add_option("--out", opts->out,
                  "Folder to write: new, empty, or a previous export-hf folder (replaced "
                  "atomically); any other folder is refused")
      ->required();
  cmd->add_flag("--merge", opts->merge,
                "LoRA: write the merged model (W + scaling B A) instead of the adapters");
  cmd->add_option("--shard-size", opts->shardBytes,
                  "Largest model.safetensors shard in bytes (default 5 GiB; above it: shards "
                  "and model.safetensors.index.json)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dtype", opts->dtype,
                  "Tensor storage: fp32 (default), bf16 or fp16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->callback([opts, &exitCode] {
    try {
      engine::HfExportOptions o;
      o.merge = opts->merge;
      o.shardBytes = opts->shardBytes;
      o.dtype = opts->dtype;
      const auto r = engine::exportHf(opts->checkpoint, opts->out, o);
      std::printf("exported %lld tensors (%s) to %s:", static_cast<long long>(r.tensors),
                  r.adapter ? "PEFT LoRA adapter" : "model", opts->out.c_str());
      for (const auto& f : r.files) std::printf(" %s", f.c_str());
      std::printf("\n");
      exitCode = kExitOk;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainscope-engine export-hf: %s\n", e.what());
      exitCode = kExitBadInput;
    }
  });
}

}  // namespace ts::app
