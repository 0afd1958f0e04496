#pragma once
// evaluate: the mean cross-entropy of a model over consecutive windows of a token stream. Window
// i holds tokens [i·N, i·N + N] (N + 1 tokens): the model reads the first N and is scored on
// predicting each next one, so every window scores N tokens and a trailing partial window is
// left out. perplexity = exp(loss).
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/kernels/Backend.h"

namespace ts::engine {

struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;  // scored tokens
  double perplexity = 0;
  int64_t windows = 0;
};

// `model`: a checkpoint directory or a Hugging Face folder (ModelSource.h). Throws
// std::invalid_argument when the stream is shorter than one window or holds a token id outside
// the model's vocabulary (naming the position), and what loading throws.
EvalResult evaluateModel(const std::string& model, const std::vector<int32_t>& tokens, int seq,
                         kernels::Backend* backend, int batch = 8);

// evaluateModel over a token file (evaluate --tokens) read at the model's width: uint16 ids for
// a vocabulary of up to 65,536, uint32 above (data/Dataset.h's tokenIdBytes).
EvalResult evaluateTokenFile(const std::string& model, const std::string& tokenFile, int seq,
                             kernels::Backend* backend, int batch = 8);

// Token ids of a file: UTF-8 text through `tokenizer` (a tokenizer.json, without special
// tokens; "" = the byte tokenizer; ModelSource.h's modelTokenizer finds a model's), or
// little-endian ids (the format of data.source tokens) for a vocabulary of `vocab` ids: uint16
// up to 65,536, uint32 above, every id checked against `vocab`; vocab 0 = uint16, unchecked.
// Throws std::invalid_argument naming the file.
std::vector<int32_t> readTextTokens(const std::string& path, const std::string& tokenizer = "");
std::vector<int32_t> readTokenFile(const std::string& path, int64_t vocab = 0);

}  // namespace ts::engine
