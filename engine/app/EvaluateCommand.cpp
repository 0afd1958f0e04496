// `trainscope-engine evaluate MODEL (--text FILE | --tokens FILE) [--seq N] [--json]`: mean
// cross-entropy, scored tokens and perplexity over consecutive windows (Evaluate.h).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "Commands.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/train/Evaluate.h"

namespace ts::app {

void addEvaluateCommand(CLI::App& app, int& exitCode) {
  struct Options {
    std::string model, text, tokens, tokenizer;
    int seq = 128;
    bool json = false;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "evaluate", "Mean cross-entropy and perplexity of a checkpoint or Hugging Face folder");
  cmd->add_option("MODEL", opts->model, "Checkpoint directory or Hugging Face model folder")
      ->required();
  auto* text = cmd->add_option(
      "--text", opts->text, "UTF-8 text, through the model's tokenizer (bytes when it has none)");
  cmd->add_option("--tokenizer", opts->tokenizer,
                  "For --text: a tokenizer.json (or a folder with one), or 'bytes'");
  auto* tok = cmd->add_option("--tokens", opts->tokens,
                              "Little-endian token ids: uint16, uint32 for a vocabulary > 65536");
  text->excludes(tok);
  cmd->add_option("--seq", opts->seq, "Window length in tokens (default 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", opts->json, "One line: {\"loss\", \"tokens\", \"perplexity\"}");
  cmd->callback([opts, &exitCode] {
    if (opts->text.empty() == opts->tokens.empty()) {
      std::fprintf(stderr, "trainscope-engine evaluate: give exactly one of --text, --tokens\n");
      exitCode = kExitBadInput;
      return;
    }
    try {
      const std::string tokenizer = opts->tokenizer == "bytes" ? ""
                                    : opts->tokenizer.empty()  ? engine::modelTokenizer(opts->model)
                                                               : opts->tokenizer;
      auto backend = kernels::makeCpuBackend();
      const auto r =
          opts->text.empty()
              ? engine::evaluateTokenFile(opts->model, opts->tokens, opts->seq, backend.get())
              : engine::evaluateModel(opts->model, engine::readTextTokens(opts->text, tokenizer),
                                      opts->seq, backend.get());
      if (opts->json)
        std::printf(
            "%s\n",
            nlohmann::json({{"loss", r.loss}, {"tokens", r.tokens}, {"perplexity", r.perplexity}})
                .dump()
                .c_str());
      else
        std::printf("loss %.6f  tokens %lld  perplexity %.4f  (%lld windows of %d)\n", r.loss,
                    static_cast<long long>(r.tokens), r.perplexity,
                    static_cast<long long>(r.windows), opts->seq);
      exitCode = kExitOk;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainscope-engine evaluate: %s\n", e.what());
      exitCode = kExitBadInput;
    }
  });
}

}  // namespace ts::app
