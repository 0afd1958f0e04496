#pragma once
// Training data sources: built-in synthetic corpora (addition, a tiny grammar), UTF-8 text files
// (the model's own tokenizer, else bytes), pre-tokenized files (uint16 or uint32 ids by the
// vocabulary's size), and instruction data
// (jsonl: prompt/completion, text or a conversation through the tokenizer's chat template per
// line, one padded sample per row).
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"

namespace ts::engine {

class HfTokenizer;

// Bad data input (missing/empty/short file, bad token ids, config that cannot fit the data).
// The message names the file (or config field) and the problem.
class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int vocabSize() const = 0;
  // One line for logs/events, e.g.
  // "synthetic addition (3 digits, reversed answers), 512 val samples".
  virtual std::string describe() const = 0;
  // Next training batch: inputs/targets are B*T row-major; targets -1 = ignored position.
  // Inputs at ignored positions are still valid ids (< vocabSize()).
  virtual void nextTrainBatch(int32_t* inputs, int32_t* targets, int B, int T) = 0;
  // Rows [first, first + count) of the next B-row batch (a data-parallel rank's share): the
  // data position advances by the whole batch, so every rank stays in step, but only these rows
  // are read. inputs/targets hold count*T. By default the whole batch is drawn and cut.
  virtual void nextTrainRows(int32_t* inputs, int32_t* targets, int B, int T, int first, int count);
  // Validation batches are fixed (independent of training progress and difficulty).
  // 0 when there is no validation data (val_fraction 0).
  virtual int64_t valBatchCount(int B, int T) const = 0;
  virtual void valBatch(int64_t index, int32_t* inputs, int32_t* targets, int B, int T) const = 0;
  // Exact-match tasks (addition): prompts to complete greedily and the expected answers
  // (the answer tokens followed by endToken()). Taken from the validation set.
  virtual bool hasExactMatch() const { return false; }
  virtual std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> exactMatchSamples(
      int count) const {
    (void)count;
    return {};
  }
  virtual int32_t endToken() const { return -1; }
  // Curriculum: 0..1 of the hardest (core::curriculumFraction). Which knob it turns follows
  // config.curriculum.type: "difficulty" (addition: digits; grammar: nesting depth) or
  // "length" (shorter sequences, rest of the row ignored). No-op when type is "none".
  virtual void setDifficulty(double fraction) { (void)fraction; }
  virtual std::string decode(const std::vector<int32_t>& tokens) const = 0;  // valid UTF-8
  // The tokenizer files the data was tokenized with (tokenizer.json, tokenizer_config.json):
  // checkpoints carry them so export-hf can pass them on. Empty for bytes and token files.
  virtual std::vector<std::string> tokenizerFiles() const { return {}; }
  virtual nlohmann::json state() const = 0;               // data position + RNG, for checkpoints
  virtual void restore(const nlohmann::json& state) = 0;  // resume reproduces the same batches;
                                                          // throws DatasetError on a bad state
};

// Builds the data source named by config.data (source, task, path, digits, val_fraction),
// seeded by config.train.seed. Throws DatasetError with a message naming the file and the
// problem. model.vocab: 0 = take the data's vocab; for source "tokens" it is required.
std::unique_ptr<Dataset> makeDataset(const core::RunConfig& config);

// The tokenizer.json text and jsonl data go through: data.tokenizer when it names one, else the
// fine-tuning base's own (finetune.base_checkpoint: a Hugging Face folder or a checkpoint that
// carries one); "" = the byte tokenizer. Throws DatasetError when data.tokenizer names a path
// without one.
std::string resolveTokenizerPath(const core::RunConfig& config);

// Pre-tokenized files (data.source tokens, evaluate --tokens) hold little-endian ids, each
// 2 bytes (uint16) when the vocabulary has at most 65,536 ids, else 4 bytes (uint32).
int tokenIdBytes(int64_t vocab);
// The ids of such a file's `bytes`, for a vocabulary of `vocab` ids (`vocabName` says where it
// comes from, "model.vocab"; "" to leave it unnamed). Throws DatasetError naming `path` when the
// size is not a whole number of ids, or naming the id, its index and byte offset when an id is not
// below `vocab`.
std::vector<int32_t> parseTokenIds(const std::string& bytes, int64_t vocab, const std::string& path,
                                   const std::string& vocabName);

namespace detail {

// Small portable RNG with a serializable state (SplitMix64 seeding, xoshiro256**): std::
// distributions differ between standard libraries and resume must reproduce batches exactly.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  uint64_t next();
  uint64_t below(uint64_t n);    // uniform in [0, n) without modulo bias; n > 0
  double uniform();              // [0, 1)
  nlohmann::json state() const;  // four hex strings (JSON numbers lose 64-bit precision)
  void restore(const nlohmann::json& state);  // throws DatasetError

 private:
  uint64_t s_[4];
};

// Text through the run's tokenizer (resolveTokenizerPath): a tokenizer.json, or bytes.
class TextTokenizer {
 public:
  static TextTokenizer forRun(const core::RunConfig& config);  // throws DatasetError
  std::vector<int32_t> encode(std::string_view text, bool addSpecialTokens = false) const;
  std::string decode(const std::vector<int32_t>& tokens) const;  // valid UTF-8
  int vocabSize() const;
  int32_t bosId() const;  // -1: none (bytes)
  int32_t eosId() const;
  std::string describe() const;  // "byte tokenizer, vocab 256" / "tokenizer.json '...' (...)"
  std::vector<std::string> files() const;  // tokenizer.json and its tokenizer_config.json
  bool bytes() const { return !hf_; }

 private:
  std::shared_ptr<const HfTokenizer> hf_;
};

uint64_t mix64(uint64_t x);       // SplitMix64 finalizer: a good 64-bit hash
double unitFromHash(uint64_t h);  // top 53 bits as a double in [0, 1)
// Length curriculum: tokens used per row at `fraction` (at least min(T, 8), at most T).
int curriculumLength(double fraction, int T);

// The concrete sources behind makeDataset (exposed for tests).
std::unique_ptr<Dataset> makeAdditionDataset(const core::RunConfig& config);
std::unique_ptr<Dataset> makeGrammarDataset(const core::RunConfig& config);
std::unique_ptr<Dataset> makeTextDataset(const core::RunConfig& config);
std::unique_ptr<Dataset> makeTokenDataset(const core::RunConfig& config);
std::unique_ptr<Dataset> makeJsonlDataset(const core::RunConfig& config);

}  // namespace detail

}  // namespace ts::engine
