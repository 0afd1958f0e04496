#pragma once
// Internal to HfTokenizer*.cpp: the tokenizer's state (HfTokenizer::Impl) and the helpers its
// components share (UTF-8, GPT-2's byte map, ICU regular expressions, tokenizer.json fields).
// The helpers used per character are inline here so that splitting the files costs no calls.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/engine/tokenizer/HfTokenizer.h"

struct URegularExpression;  // ICU (unicode/uregex.h)

namespace ts::engine::hf {

using json = nlohmann::json;

// ---- UTF-8 helpers ---------------------------------------------------------------------------

inline size_t utf8Len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;
}

inline std::vector<std::string_view> utf8Chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8Len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

inline void appendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void replaceAllLiteral(std::string& s, std::string_view from, std::string_view to);

inline bool isAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// GPT-2's reversible byte -> printable character map (bytes_to_unicode): printable Latin-1
// bytes stand for themselves, the rest are shifted to U+0100 and up.
struct ByteMap {
  std::array<std::string, 256> toChar;
  std::unordered_map<std::string, unsigned char> toByte;
  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      appendUtf8(toChar[b], printable ? static_cast<uint32_t>(b) : next++);
      toByte[toChar[b]] = static_cast<unsigned char>(b);
    }
  }
};
inline const ByteMap& byteMap() {
  static const ByteMap m;
  return m;
}

// ---- Regular expressions (ICU over UTF-8, byte offsets; HfPattern.cpp) ----------------

class Regex {
 public:
  // `fail` is called with the reason when the pattern does not compile.
  Regex(const std::string& pattern, const std::function<void(const std::string&)>& fail);
  // Non-empty matches, left to right, as UTF-8 byte ranges.
  std::vector<std::pair<size_t, size_t>> findAll(std::string_view s) const;

 private:
  std::shared_ptr<URegularExpression> re_;
};

// A Split/Replace pattern: {"String": literal} or {"Regex": pattern}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;

  std::vector<std::pair<size_t, size_t>> findAll(std::string_view s) const;
  std::string replaceAll(std::string_view s, std::string_view with) const;
};

// ---- Pre-tokenized pieces --------------------------------------------------------------------

struct Piece {
  std::string text;
  bool atStart = false;  // begins at offset 0 of the input (Metaspace's prepend_scheme first)
};

// ---- tokenizer.json fields -------------------------------------------------------------------

inline std::string typeOf(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : "";
}

template <class T>
T getOr(const json& j, const char* key, T fallback) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<T>();
}

// A Sequence's children (j[key]), each with its field path for messages.
void eachChild(const json& j, const char* key, const std::string& field,
               const std::function<void(const json&, const std::string&)>& parse);

// Metaspace's prepend_scheme (always | first | never), or the older add_prefix_space flag.
std::string metaspaceScheme(const json& j);

}  // namespace ts::engine::hf

namespace ts::engine {

// ---- The tokenizer ---------------------------------------------------------------------------

struct HfTokenizer::Impl {
  using json = hf::json;
  using Tokens = std::vector<std::string>;

  std::string file;

  struct AddedToken {
    int32_t id;
    std::string content;
    bool special, lstrip, rstrip, singleWord;
  };
  std::vector<AddedToken> added;
  std::unordered_map<int32_t, size_t> addedById;
  std::array<std::vector<size_t>, 256> addedByFirstByte;  // LLaMA-3 has 256 added tokens

  // Normalizer, pre-tokenizer and decoder steps: closures built from the JSON once.
  std::vector<std::function<void(std::string&)>> normalizer;
  std::vector<std::function<std::vector<hf::Piece>(const hf::Piece&)>> preTokenizer;
  std::vector<std::function<Tokens(Tokens)>> decoder;
  bool hasDecoder = false;
  bool byteLevel = false;

  // BPE.
  std::unordered_map<std::string, int32_t> vocab;
  std::unordered_map<int32_t, std::string> idToToken;
  struct Merge {
    int32_t rank, id;
  };
  std::unordered_map<uint64_t, Merge> merges;
  int32_t unk = -1;
  bool byteFallback = false, fuseUnk = false, ignoreMerges = false;
  std::string prefix, suffix;  // continuing_subword_prefix, end_of_word_suffix
  std::array<int32_t, 256> byteIds{};

  // Post-processor (TemplateProcessing "single"): ids before and after the sequence.
  std::vector<int32_t> templateBefore, templateAfter;

  int32_t vocabSize = 0;
  int32_t bos = -1, eos = -1;

  int32_t tokenId(std::string_view token) const {
    for (const AddedToken& a : added)
      if (a.content == token) return a.id;
    const auto it = vocab.find(std::string(token));
    return it == vocab.end() ? -1 : it->second;
  }

  [[noreturn]] void fail(const std::string& msg) const {
    throw TokenizerError("tokenizer '" + file + "': " + msg);
  }

  // Reading tokenizer.json (HfTokenizer.cpp, and one file per component).
  void parse(const json& j);
  void parseAddedTokens(const json& list);
  void parseNormalizer(const json& n, const std::string& field);
  void parsePreTokenizer(const json& p, const std::string& field);
  void parseDecoder(const json& d, const std::string& field);
  void parsePostProcessor(const json& p, const std::string& field);
  void parseModel(const json& m);
  void parseMerges(const json& list);
  hf::Pattern pattern(const json& p, const std::string& field) const;
  // bos/eos from tokenizer_config.json next to the file, else the usual names.
  void findSpecialTokens();

  // Encoding (HfTokenizerEncode.cpp, BpeModel.cpp).
  void encodeWord(std::string_view word, std::vector<int32_t>& out) const;
  void encodeSegment(std::string_view text, bool atStart, std::vector<int32_t>& out,
                     std::unordered_map<std::string, std::vector<int32_t>>& cache) const;
};

}  // namespace ts::engine
