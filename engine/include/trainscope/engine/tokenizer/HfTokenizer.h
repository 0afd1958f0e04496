#pragma once
// A Hugging Face `tokenizer.json` (the `tokenizers` library's format), encoded and decoded the
// way that library does: added tokens split out first, then the normalizer, the pre-tokenizer
// and the BPE model, then the post-processor. Supported (everything GPT-2, LLaMA-2/3, Mistral
// and Qwen2 folders use):
//   model           BPE (merges as "a b" strings or [a, b] pairs; byte_fallback, fuse_unk,
//                   ignore_merges, continuing_subword_prefix, end_of_word_suffix)
//   normalizer      Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip
//   pre_tokenizer   Sequence, ByteLevel, Split, Metaspace, Digits
//   decoder         Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace
//   post_processor  Sequence, ByteLevel, TemplateProcessing
// Anything else is refused when the file is read, naming the field and what is allowed.
// Regular expressions (Split, Replace) run on ICU; `\s` is read as Unicode White_Space, as
// Oniguruma (the `tokenizers` library's engine) reads it.
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ts::engine {

// An unreadable or unsupported tokenizer file; the message names the file and the field.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class HfTokenizer {
 public:
  // `path`: a tokenizer.json file, or a folder holding one. Special tokens (bos, eos) come
  // from tokenizer_config.json next to it when there is one.
  static HfTokenizer load(const std::string& path);
  // The folder's (or checkpoint's) tokenizer.json, or "" when it has none.
  static std::string findIn(const std::string& folder);
  // A tokenizer.json and the files of the same tokenizer next to it (tokenizer_config.json,
  // special_tokens_map.json, chat_template.jinja): what a checkpoint and an exported folder
  // carry.
  static std::vector<std::string> filesOf(const std::string& tokenizerJson);

  // `addSpecialTokens`: apply the post-processor (LLaMA's leading <s>), as the library's
  // encode(text, add_special_tokens=True). Invalid UTF-8 is read as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool addSpecialTokens = false) const;
  // Ids outside the vocabulary are skipped; the result is valid UTF-8.
  std::string decode(const std::vector<int32_t>& ids, bool skipSpecialTokens = false) const;

  int32_t vocabSize() const;                      // highest id + 1, added tokens included
  int32_t tokenId(std::string_view token) const;  // -1 when absent
  int32_t bosId() const;                          // -1 when the tokenizer has none
  int32_t eosId() const;
  const std::string& path() const;  // the tokenizer.json read
  // "byte-level BPE, 384 tokens" / "BPE with byte fallback, 512 tokens".
  std::string describe() const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace ts::engine
