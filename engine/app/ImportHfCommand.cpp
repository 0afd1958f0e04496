// `trainscope-engine import-hf DIR --out CHECKPOINT`: a Hugging Face model folder as a trainscope
// checkpoint (HfModel.h): the base a fine-tuning run names in finetune.base_checkpoint.
#include <cstdio>
#include <memory>
#include <string>

#include "Commands.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/io/HfModel.h"

namespace ts::app {

void addImportHfCommand(CLI::App& app, int& exitCode) {
  struct Options {
    std::string dir, out;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "import-hf", "Convert a Hugging Face model folder (GPT-2, LLaMA, Mistral) to a checkpoint");
  cmd->add_option("DIR", opts->dir, "Folder with config.json and model.safetensors (or shards)")
      ->required();
  cmd->add_option("--out", opts->out, "Checkpoint directory to write")->required();
  cmd->callback([opts, &exitCode] {
    try {
      const size_t n = engine::importHfModel(opts->dir, opts->out);
      std::printf("imported %zu tensors from %s into %s\n", n, opts->dir.c_str(),
                  opts->out.c_str());
      exitCode = kExitOk;
    } catch (const engine::CheckpointError& e) {
      std::fprintf(stderr, "trainscope-engine import-hf: %s\n", e.what());
      exitCode = kExitRunFailed;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainscope-engine import-hf: %s\n", e.what());
      exitCode = kExitBadInput;
    }
  });
}

}  // namespace ts::app
