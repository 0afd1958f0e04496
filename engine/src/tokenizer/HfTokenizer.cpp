#include "trainscope/engine/tokenizer/HfTokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#include <unicode/uregex.h>
#include <unicode/ustring.h>
#include <unicode/utext.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "trainscope/engine/tokenizer/ByteTokenizer.h"

namespace ts::engine {

using json = nlohmann::json;

namespace {

// ---- UTF-8 helpers ---------------------------------------------------------------------------

size_t utf8Len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 0x6) return 2;
  if ((b >> 4) == 0xE) return 3;
  if ((b >> 3) == 0x1E) return 4;
  return 1;
}

std::vector<std::string_view> utf8Chars(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8Len(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

void appendUtf8(std::string& out, uint32_t cp) {
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

void replaceAllLiteral(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

bool isAsciiSpace(char c) {
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
const ByteMap& byteMap() {
  static const ByteMap m;
  return m;
}

// ---- Regular expressions (ICU over UTF-8, byte offsets) --------------------------------------

class Regex {
 public:
  Regex(const std::string& pattern, const std::function<void(const std::string&)>& fail) {
    // Oniguruma's \s is Unicode White_Space (it includes \v and U+0085); ICU's is narrower.
    std::string p;
    for (size_t i = 0; i < pattern.size(); ++i) {
      if (pattern[i] == '\\' && i + 1 < pattern.size()) {
        const char c = pattern[i + 1];
        if (c == 's' || c == 'S') {
          p += c == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
        } else {
          p += pattern.substr(i, 2);
        }
        ++i;
      } else {
        p.push_back(pattern[i]);
      }
    }
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(p);
    UErrorCode st = U_ZERO_ERROR;
    UParseError pe{};
    URegularExpression* re = uregex_open(u.getBuffer(), u.length(), 0, &pe, &st);
    if (U_FAILURE(st))
      fail("the regular expression '" + pattern + "' does not compile (" + u_errorName(st) +
           " at offset " + std::to_string(pe.offset) + ")");
    re_.reset(re, uregex_close);
  }

  // Non-empty matches, left to right, as UTF-8 byte ranges.
  std::vector<std::pair<size_t, size_t>> findAll(std::string_view s) const {
    std::vector<std::pair<size_t, size_t>> out;
    UErrorCode st = U_ZERO_ERROR;
    // Matching mutates the matcher: one clone per call keeps encode() const and re-entrant.
    URegularExpression* re = uregex_clone(re_.get(), &st);
    UText* text = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &st);
    uregex_setUText(re, text, &st);
    while (U_SUCCESS(st) && uregex_findNext(re, &st)) {
      const int64_t a = uregex_start64(re, 0, &st), b = uregex_end64(re, 0, &st);
      if (b > a) out.emplace_back(static_cast<size_t>(a), static_cast<size_t>(b));
    }
    uregex_close(re);
    utext_close(text);
    if (U_FAILURE(st))
      throw TokenizerError(std::string("tokenizer: regular expression failed: ") + u_errorName(st));
    return out;
  }

 private:
  std::shared_ptr<URegularExpression> re_;
};

// A Split/Replace pattern: {"String": literal} or {"Regex": pattern}.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;

  std::vector<std::pair<size_t, size_t>> findAll(std::string_view s) const {
    if (regex) return regex->findAll(s);
    std::vector<std::pair<size_t, size_t>> out;
    if (literal.empty()) return out;
    for (size_t pos = 0, hit; (hit = s.find(literal, pos)) != std::string_view::npos;
         pos = hit + literal.size())
      out.emplace_back(hit, hit + literal.size());
    return out;
  }
  std::string replaceAll(std::string_view s, std::string_view with) const {
    std::string out;
    size_t prev = 0;
    for (auto [a, b] : findAll(s)) {
      out.append(s.substr(prev, a - prev));
      out.append(with);
      prev = b;
    }
    out.append(s.substr(prev));
    return out;
  }
};

// ---- Pre-tokenized pieces --------------------------------------------------------------------

struct Piece {
  std::string text;
  bool atStart = false;  // begins at offset 0 of the input (Metaspace's prepend_scheme first)
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// tokenizers' SplitDelimiterBehavior over the (match, gap) segments of one piece.
std::vector<Piece> splitPiece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& m,
                              SplitBehavior behavior, bool invert) {
  struct Seg {
    size_t a, b;
    bool match;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  for (auto [a, b] : m) {
    if (a > prev) segs.push_back({prev, a, invert});
    segs.push_back({a, b, !invert});
    prev = b;
  }
  if (prev < piece.text.size()) segs.push_back({prev, piece.text.size(), invert});

  std::vector<Seg> kept;
  bool previousMatch = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Seg& s : segs)
        if (!s.match) kept.push_back(s);
      break;
    case SplitBehavior::Isolated:
      kept = segs;
      break;
    case SplitBehavior::MergedWithPrevious:
      for (const Seg& s : segs) {
        if (s.match && !previousMatch && !kept.empty())
          kept.back().b = s.b;
        else
          kept.push_back(s);
        previousMatch = s.match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !previousMatch && !kept.empty())
          kept.back().a = it->a;
        else
          kept.push_back(*it);
        previousMatch = it->match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::Contiguous:
      for (const Seg& s : segs) {
        if (!kept.empty() && s.match == previousMatch)
          kept.back().b = s.b;
        else
          kept.push_back(s);
        previousMatch = s.match;
      }
      break;
  }
  std::vector<Piece> out;
  for (const Seg& s : kept)
    if (s.b > s.a) out.push_back({piece.text.substr(s.a, s.b - s.a), piece.atStart && s.a == 0});
  return out;
}

}  // namespace

// ---- The tokenizer ---------------------------------------------------------------------------

struct HfTokenizer::Impl {
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
  std::vector<std::function<std::vector<Piece>(const Piece&)>> preTokenizer;
  std::vector<std::function<std::vector<std::string>(std::vector<std::string>)>> decoder;
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

  void parse(const json& j);
  void parseNormalizer(const json& n, const std::string& field);
  void parsePreTokenizer(const json& p, const std::string& field);
  void parseDecoder(const json& d, const std::string& field);
  void parsePostProcessor(const json& p, const std::string& field);
  void parseModel(const json& m);
  Pattern pattern(const json& p, const std::string& field) const;

  void encodeWord(std::string_view word, std::vector<int32_t>& out) const;
  void encodeSegment(std::string_view text, bool atStart, std::vector<int32_t>& out,
                     std::unordered_map<std::string, std::vector<int32_t>>& cache) const;
};

namespace {

std::string typeOf(const json& j) {
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
               const std::function<void(const json&, const std::string&)>& parse) {
  const json& list = j.value(key, json::array());
  for (size_t i = 0; i < list.size(); ++i)
    parse(list[i], field + "." + key + "[" + std::to_string(i) + "]");
}

// Metaspace's prepend_scheme (always | first | never), or the older add_prefix_space flag.
std::string metaspaceScheme(const json& j) {
  const std::string scheme = getOr<std::string>(j, "prepend_scheme", "");
  if (!scheme.empty()) return scheme;
  return getOr(j, "add_prefix_space", true) ? "always" : "never";
}

}  // namespace

Pattern HfTokenizer::Impl::pattern(const json& p, const std::string& field) const {
  Pattern out;
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    out.literal = p["String"].get<std::string>();
  } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    out.regex = std::make_shared<Regex>(p["Regex"].get<std::string>(),
                                        [&](const std::string& m) { fail(field + ": " + m); });
  } else {
    fail(field + " must be {\"String\": ...} or {\"Regex\": ...}");
  }
  return out;
}

void HfTokenizer::Impl::parseNormalizer(const json& n, const std::string& field) {
  if (n.is_null()) return;
  const std::string type = typeOf(n);
  auto unicode = [&](const icu::Normalizer2* (*get)(UErrorCode&)) {
    UErrorCode st = U_ZERO_ERROR;
    const icu::Normalizer2* norm = get(st);
    if (U_FAILURE(st)) fail(field + ": ICU has no " + type + " normalizer");
    normalizer.push_back([norm](std::string& s) {
      UErrorCode e = U_ZERO_ERROR;
      const icu::UnicodeString u = norm->normalize(icu::UnicodeString::fromUTF8(s), e);
      s.clear();
      u.toUTF8String(s);
    });
  };
  if (type == "Sequence") {
    eachChild(n, "normalizers", field,
              [&](const json& c, const std::string& f) { parseNormalizer(c, f); });
  } else if (type == "Prepend") {
    const std::string pre = n.value("prepend", "");
    normalizer.push_back([pre](std::string& s) {
      if (!s.empty()) s.insert(0, pre);
    });
  } else if (type == "Replace") {
    const Pattern pat = pattern(n.value("pattern", json()), field + ".pattern");
    const std::string content = n.value("content", "");
    normalizer.push_back([pat, content](std::string& s) { s = pat.replaceAll(s, content); });
  } else if (type == "NFC") {
    unicode(&icu::Normalizer2::getNFCInstance);
  } else if (type == "NFD") {
    unicode(&icu::Normalizer2::getNFDInstance);
  } else if (type == "NFKC") {
    unicode(&icu::Normalizer2::getNFKCInstance);
  } else if (type == "NFKD") {
    unicode(&icu::Normalizer2::getNFKDInstance);
  } else if (type == "Lowercase") {
    normalizer.push_back([](std::string& s) {
      icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
      u.toLower();
      s.clear();
      u.toUTF8String(s);
    });
  } else if (type == "Strip") {
    const bool left = getOr(n, "strip_left", true), right = getOr(n, "strip_right", true);
    normalizer.push_back([left, right](std::string& s) {
      size_t a = 0, b = s.size();
      while (left && a < b && isAsciiSpace(s[a])) ++a;
      while (right && b > a && isAsciiSpace(s[b - 1])) --b;
      s = s.substr(a, b - a);
    });
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | Prepend | Replace | NFC | NFD | NFKC | NFKD | "
         "Lowercase | Strip");
  }
}

void HfTokenizer::Impl::parsePreTokenizer(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string type = typeOf(p);
  if (type == "Sequence") {
    eachChild(p, "pretokenizers", field,
              [&](const json& c, const std::string& f) { parsePreTokenizer(c, f); });
  } else if (type == "ByteLevel") {
    byteLevel = true;
    const bool prefixSpace = getOr(p, "add_prefix_space", false);
    std::shared_ptr<Regex> gpt2;
    if (getOr(p, "use_regex", true))
      gpt2 = std::make_shared<Regex>(
          R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
          [&](const std::string& m) { fail(field + ": " + m); });
    preTokenizer.push_back([prefixSpace, gpt2](const Piece& in) {
      Piece p = in;
      if (prefixSpace && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      std::vector<Piece> parts = {p};
      if (gpt2) parts = splitPiece(p, gpt2->findAll(p.text), SplitBehavior::Isolated, false);
      for (Piece& part : parts) {
        std::string mapped;
        for (char c : part.text) mapped += byteMap().toChar[static_cast<unsigned char>(c)];
        part.text = std::move(mapped);
      }
      return parts;
    });
  } else if (type == "Split") {
    const Pattern pat = pattern(p.value("pattern", json()), field + ".pattern");
    const std::string b = p.value("behavior", "Isolated");
    static const std::map<std::string, SplitBehavior> kBehaviors = {
        {"Removed", SplitBehavior::Removed},
        {"Isolated", SplitBehavior::Isolated},
        {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
        {"MergedWithNext", SplitBehavior::MergedWithNext},
        {"Contiguous", SplitBehavior::Contiguous}};
    const auto it = kBehaviors.find(b);
    if (it == kBehaviors.end())
      fail(field + ".behavior '" + b +
           "' is unknown: allowed Removed | Isolated | MergedWithPrevious | MergedWithNext | "
           "Contiguous");
    const SplitBehavior behavior = it->second;
    const bool invert = getOr(p, "invert", false);
    preTokenizer.push_back([pat, behavior, invert](const Piece& in) {
      return splitPiece(in, pat.findAll(in.text), behavior, invert);
    });
  } else if (type == "Metaspace") {
    const std::string rep = p.value("replacement", "\xE2\x96\x81");
    const std::string scheme = metaspaceScheme(p);
    if (scheme != "always" && scheme != "first" && scheme != "never")
      fail(field + ".prepend_scheme '" + scheme + "' is unknown: allowed always | first | never");
    const bool split = getOr(p, "split", true);
    preTokenizer.push_back([rep, scheme, split](const Piece& in) {
      Piece p = in;
      replaceAllLiteral(p.text, " ", rep);
      const bool starts = p.text.compare(0, rep.size(), rep) == 0;
      if (!starts && (scheme == "always" || (scheme == "first" && p.atStart)))
        p.text.insert(0, rep);
      if (!split) return std::vector<Piece>{p};
      Pattern lit;
      lit.literal = rep;
      return splitPiece(p, lit.findAll(p.text), SplitBehavior::MergedWithNext, false);
    });
  } else if (type == "Digits") {
    const bool individual = getOr(p, "individual_digits", false);
    auto digits =
        std::make_shared<Regex>("\\p{N}", [&](const std::string& m) { fail(field + ": " + m); });
    preTokenizer.push_back([digits, individual](const Piece& in) {
      return splitPiece(in, digits->findAll(in.text),
                        individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false);
    });
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | ByteLevel | Split | Metaspace | Digits");
  }
}

void HfTokenizer::Impl::parseDecoder(const json& d, const std::string& field) {
  if (d.is_null()) return;
  hasDecoder = true;
  using Tokens = std::vector<std::string>;
  const std::string type = typeOf(d);
  if (type == "Sequence") {
    eachChild(d, "decoders", field,
              [&](const json& c, const std::string& f) { parseDecoder(c, f); });
  } else if (type == "ByteLevel") {
    decoder.push_back([](Tokens tokens) {
      std::string bytes;
      for (const std::string& t : tokens) {
        std::string mapped;
        bool ok = true;
        for (std::string_view c : utf8Chars(t)) {
          const auto it = byteMap().toByte.find(std::string(c));
          if (it == byteMap().toByte.end()) {
            ok = false;
            break;
          }
          mapped.push_back(static_cast<char>(it->second));
        }
        bytes += ok ? mapped : t;  // a token outside the map (an added token) stays as written
      }
      return Tokens{ByteTokenizer::sanitizeUtf8(bytes)};
    });
  } else if (type == "Replace") {
    const Pattern pat = pattern(d.value("pattern", json()), field + ".pattern");
    const std::string content = d.value("content", "");
    decoder.push_back([pat, content](Tokens tokens) {
      for (std::string& t : tokens) t = pat.replaceAll(t, content);
      return tokens;
    });
  } else if (type == "ByteFallback") {
    decoder.push_back([](Tokens tokens) {
      Tokens out;
      std::string pending;
      size_t pendingCount = 0;
      auto flush = [&] {
        if (pendingCount == 0) return;
        if (ByteTokenizer::sanitizeUtf8(pending) == pending) {
          out.push_back(pending);
        } else {
          for (size_t i = 0; i < pendingCount; ++i) out.push_back("\xEF\xBF\xBD");
        }
        pending.clear();
        pendingCount = 0;
      };
      for (std::string& t : tokens) {
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
            std::isxdigit(static_cast<unsigned char>(t[3])) &&
            std::isxdigit(static_cast<unsigned char>(t[4]))) {
          pending.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
          ++pendingCount;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      return out;
    });
  } else if (type == "Fuse") {
    decoder.push_back([](Tokens tokens) {
      std::string all;
      for (const std::string& t : tokens) all += t;
      return Tokens{all};
    });
  } else if (type == "Strip") {
    const std::string content = d.value("content", " ");
    const int start = getOr(d, "start", 0), stop = getOr(d, "stop", 0);
    decoder.push_back([content, start, stop](Tokens tokens) {
      for (std::string& t : tokens) {
        for (int i = 0; i < start && t.compare(0, content.size(), content) == 0; ++i)
          t.erase(0, content.size());
        for (int i = 0; i < stop && t.size() >= content.size() &&
                        t.compare(t.size() - content.size(), content.size(), content) == 0;
             ++i)
          t.erase(t.size() - content.size());
      }
      return tokens;
    });
  } else if (type == "Metaspace") {
    const std::string rep = d.value("replacement", "\xE2\x96\x81");
    const std::string scheme = metaspaceScheme(d);
    decoder.push_back([rep, scheme](Tokens tokens) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        replaceAllLiteral(tokens[i], rep, " ");
        if (i == 0 && scheme != "never" && !tokens[i].empty() && tokens[i][0] == ' ')
          tokens[i].erase(0, 1);
      }
      return tokens;
    });
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | ByteLevel | Replace | ByteFallback | Fuse | "
         "Strip | Metaspace");
  }
}

void HfTokenizer::Impl::parsePostProcessor(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string type = typeOf(p);
  if (type == "Sequence") {
    eachChild(p, "processors", field,
              [&](const json& c, const std::string& f) { parsePostProcessor(c, f); });
  } else if (type == "ByteLevel") {
    // Only trims offsets: no tokens added.
  } else if (type == "TemplateProcessing") {
    const json& single = p.value("single", json::array());
    const json& specials = p.value("special_tokens", json::object());
    bool seenSequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string where = field + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        if (seenSequence) fail(where + ": a second sequence in a single-sequence template");
        seenSequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", "");
        if (!specials.contains(name) || !specials[name].contains("ids"))
          fail(where + ": special token '" + name + "' is not in " + field + ".special_tokens");
        for (const json& id : specials[name]["ids"]) {
          // Checked against the vocabulary once it is read (parse()): encode emits these ids.
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
            fail(field + ".special_tokens['" + name + "'].ids: " + id.dump() +
                 " is not a token id");
          (seenSequence ? templateAfter : templateBefore).push_back(id.get<int32_t>());
        }
      } else {
        fail(where + " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | ByteLevel | TemplateProcessing");
  }
}

void HfTokenizer::Impl::parseModel(const json& m) {
  const std::string type = typeOf(m);
  if (type != "BPE" && !(type.empty() && m.is_object() && m.contains("merges")))
    fail("model.type '" + type + "' is not supported: allowed BPE");
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail("model.vocab must be an object");
  for (const auto& [token, id] : m["vocab"].items()) {
    // Below INT32_MAX: vocabSize() is the highest id + 1.
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
      fail("model.vocab['" + token + "'] must be a non-negative integer id (below " +
           std::to_string(INT32_MAX) + ")");
    vocab[token] = id.get<int32_t>();
    idToToken[id.get<int32_t>()] = token;
  }
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0)
    fail("model.dropout must be null or 0 (BPE dropout is for training tokenizers)");
  byteFallback = getOr(m, "byte_fallback", false);
  fuseUnk = getOr(m, "fuse_unk", false);
  ignoreMerges = getOr(m, "ignore_merges", false);
  prefix = getOr<std::string>(m, "continuing_subword_prefix", "");
  suffix = getOr<std::string>(m, "end_of_word_suffix", "");
  const std::string unkToken = getOr<std::string>(m, "unk_token", "");
  if (!unkToken.empty()) {
    const auto it = vocab.find(unkToken);
    if (it == vocab.end()) fail("model.unk_token '" + unkToken + "' is not in model.vocab");
    unk = it->second;
  }
  const json& list = m.value("merges", json::array());
  if (!list.is_array()) fail("model.merges must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    std::string a, b;
    const json& e = list[i];
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail("model.merges[" + std::to_string(i) + "] '" + s + "' must be two tokens: \"a b\"");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail("model.merges[" + std::to_string(i) + "] must be \"a b\" or [\"a\", \"b\"]");
    }
    const auto ia = vocab.find(a), ib = vocab.find(b);
    std::string merged =
        a + (prefix.empty() || b.rfind(prefix, 0) != 0 ? b : b.substr(prefix.size()));
    const auto im = vocab.find(merged);
    if (ia == vocab.end() || ib == vocab.end() || im == vocab.end())
      fail("model.merges[" + std::to_string(i) + "] ('" + a + "', '" + b +
           "'): a token or their merge is not in model.vocab");
    const uint64_t key =
        (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    merges.emplace(key, Merge{static_cast<int32_t>(i), im->second});
  }
  if (byteFallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = vocab.find(name);
      byteIds[b] = it == vocab.end() ? -1 : it->second;
    }
  }
}

void HfTokenizer::Impl::parse(const json& j) {
  if (!j.is_object()) fail("the file must hold a JSON object");
  if (!j.contains("model")) fail("it has no 'model'");
  parseModel(j["model"]);
  if (j.contains("added_tokens")) {
    const json& list = j["added_tokens"];
    if (!list.is_array()) fail("added_tokens must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& t = list[i];
      if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
          !t["id"].is_number_integer() || !t["content"].is_string() ||
          t["content"].get<std::string>().empty())
        fail("added_tokens[" + std::to_string(i) +
             "] needs an integer 'id' and a non-empty "
             "'content'");
      if (t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= INT32_MAX)
        fail("added_tokens[" + std::to_string(i) + "].id " + t["id"].dump() +
             " must be a non-negative id (below " + std::to_string(INT32_MAX) + ")");
      AddedToken a{t["id"].get<int32_t>(),     t["content"].get<std::string>(),
                   getOr(t, "special", false), getOr(t, "lstrip", false),
                   getOr(t, "rstrip", false),  getOr(t, "single_word", false)};
      addedById[a.id] = added.size();
      addedByFirstByte[static_cast<unsigned char>(a.content[0])].push_back(added.size());
      added.push_back(std::move(a));
    }
  }
  parseNormalizer(j.value("normalizer", json()), "normalizer");
  parsePreTokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer");
  parseDecoder(j.value("decoder", json()), "decoder");
  parsePostProcessor(j.value("post_processor", json()), "post_processor");
  for (const auto& [id, _] : idToToken) vocabSize = std::max(vocabSize, id + 1);
  for (const AddedToken& a : added) vocabSize = std::max(vocabSize, a.id + 1);
  // The template's tokens are emitted by encode(): each must be a token of the vocabulary.
  for (const auto* ids : {&templateBefore, &templateAfter})
    for (int32_t id : *ids)
      if (!idToToken.count(id) && !addedById.count(id))
        fail("post_processor: special token id " + std::to_string(id) +
             " is neither in model.vocab nor in added_tokens");
}

// One pre-tokenized word through BPE (tokenizers' BPE::tokenize without dropout).
void HfTokenizer::Impl::encodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (ignoreMerges) {
    const auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;
  bool lastUnk = false;
  const std::vector<std::string_view> chars = utf8Chars(word);
  for (size_t i = 0; i < chars.size(); ++i) {
    std::string s(chars[i]);
    if (i > 0) s.insert(0, prefix);
    if (i + 1 == chars.size()) s += suffix;
    const auto it = vocab.find(s);
    if (it != vocab.end()) {
      symbols.push_back(it->second);
      lastUnk = false;
      continue;
    }
    if (byteFallback) {
      bool all = true;
      for (char c : chars[i]) all = all && byteIds[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : chars[i]) symbols.push_back(byteIds[static_cast<unsigned char>(c)]);
        lastUnk = false;
        continue;
      }
    }
    if (unk < 0)
      throw TokenizerError("tokenizer '" + file + "': the character '" + std::string(chars[i]) +
                           "' is not in the vocabulary and the model has no unk_token");
    if (!(fuseUnk && lastUnk)) symbols.push_back(unk);
    lastUnk = true;
  }
  // Merge the lowest-ranked adjacent pair, leftmost first, until none is in the merge table.
  while (symbols.size() > 1) {
    int32_t bestRank = INT32_MAX, bestId = -1;
    size_t bestPos = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t key =
          (static_cast<uint64_t>(symbols[i]) << 32) | static_cast<uint32_t>(symbols[i + 1]);
      const auto it = merges.find(key);
      if (it != merges.end() && it->second.rank < bestRank) {
        bestRank = it->second.rank;
        bestId = it->second.id;
        bestPos = i;
      }
    }
    if (bestId < 0) break;
    symbols[bestPos] = bestId;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(bestPos) + 1);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
}

void HfTokenizer::Impl::encodeSegment(
    std::string_view text, bool atStart, std::vector<int32_t>& out,
    std::unordered_map<std::string, std::vector<int32_t>>& cache) const {
  std::string normalized(text);
  for (const auto& step : normalizer) step(normalized);
  std::vector<Piece> pieces = {{normalized, atStart}};
  for (const auto& step : preTokenizer) {
    std::vector<Piece> next;
    for (const Piece& p : pieces) {
      std::vector<Piece> parts = step(p);
      next.insert(next.end(), std::make_move_iterator(parts.begin()),
                  std::make_move_iterator(parts.end()));
    }
    pieces = std::move(next);
  }
  for (const Piece& p : pieces) {
    if (p.text.empty()) continue;
    auto it = cache.find(p.text);
    if (it == cache.end()) {
      std::vector<int32_t> ids;
      encodeWord(p.text, ids);
      it = cache.emplace(p.text, std::move(ids)).first;
    }
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

// ---- Public API ------------------------------------------------------------------------------

std::string HfTokenizer::findIn(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (folder.empty()) return "";
  if (fs::is_regular_file(folder, ec) && fs::path(folder).filename() == "tokenizer.json")
    return folder;
  const fs::path p = fs::path(folder) / "tokenizer.json";
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

std::vector<std::string> HfTokenizer::filesOf(const std::string& tokenizerJson) {
  namespace fs = std::filesystem;
  if (tokenizerJson.empty()) return {};
  std::vector<std::string> out = {tokenizerJson};
  std::error_code ec;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const fs::path p = fs::path(tokenizerJson).parent_path() / name;
    if (fs::is_regular_file(p, ec)) out.push_back(p.string());
  }
  return out;
}

HfTokenizer HfTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = findIn(path);
  if (file.empty()) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec))
      file = path;
    else
      throw TokenizerError("tokenizer: '" + path +
                           "' is neither a tokenizer.json nor a folder "
                           "holding one");
  }
  auto impl = std::make_shared<Impl>();
  impl->file = file;
  std::ifstream in(file, std::ios::binary);
  if (!in) impl->fail("cannot be opened");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    impl->fail(std::string("is not valid JSON: ") + e.what());
  }
  try {
    impl->parse(j);
  } catch (const json::exception& e) {
    impl->fail(std::string("unexpected value: ") + e.what());
  }
  // bos/eos: tokenizer_config.json's names; else the template's leading token and the usual
  // end-of-text names.
  auto idOfEntry = [&](const json& e) -> int32_t {
    std::string name;
    if (e.is_string()) name = e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string())
      name = e["content"].get<std::string>();
    return name.empty() ? -1 : impl->tokenId(name);
  };
  const fs::path cfgPath = fs::path(file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::is_regular_file(cfgPath, ec)) {
    std::ifstream cin(cfgPath);
    const json cfg = json::parse(cin, nullptr, false);
    if (cfg.is_object()) {
      if (cfg.contains("bos_token")) impl->bos = idOfEntry(cfg["bos_token"]);
      if (cfg.contains("eos_token")) impl->eos = idOfEntry(cfg["eos_token"]);
    }
  }
  if (impl->bos < 0 && !impl->templateBefore.empty()) impl->bos = impl->templateBefore.front();
  if (impl->eos < 0)
    for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>"})
      if ((impl->eos = impl->tokenId(name)) >= 0) break;
  HfTokenizer t;
  t.impl_ = impl;
  return t;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view raw, bool addSpecialTokens) const {
  const Impl& m = *impl_;
  const std::string text = ByteTokenizer::sanitizeUtf8(raw);
  std::vector<int32_t> out;
  if (addSpecialTokens) out = m.templateBefore;
  std::unordered_map<std::string, std::vector<int32_t>> cache;
  // Added tokens are split out of the raw text first, leftmost-longest.
  size_t segStart = 0, pos = 0;
  auto isWordChar = [&](size_t i) {
    return i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) ||
                               text[i] == '_' || static_cast<unsigned char>(text[i]) >= 0x80);
  };
  while (pos < text.size()) {
    const Impl::AddedToken* best = nullptr;
    for (size_t k : m.addedByFirstByte[static_cast<unsigned char>(text[pos])]) {
      const Impl::AddedToken& a = m.added[k];
      if (text.compare(pos, a.content.size(), a.content) != 0) continue;
      if (a.singleWord && ((pos > 0 && isWordChar(pos - 1)) || isWordChar(pos + a.content.size())))
        continue;
      if (!best || a.content.size() > best->content.size()) best = &a;
    }
    if (!best) {
      ++pos;
      continue;
    }
    size_t segEnd = pos, next = pos + best->content.size();
    if (best->lstrip)
      while (segEnd > segStart && isAsciiSpace(text[segEnd - 1])) --segEnd;
    if (best->rstrip)
      while (next < text.size() && isAsciiSpace(text[next])) ++next;
    if (segEnd > segStart)
      m.encodeSegment(std::string_view(text).substr(segStart, segEnd - segStart), segStart == 0,
                      out, cache);
    out.push_back(best->id);
    segStart = pos = next;
  }
  if (segStart < text.size())
    m.encodeSegment(std::string_view(text).substr(segStart), segStart == 0, out, cache);
  if (addSpecialTokens) out.insert(out.end(), m.templateAfter.begin(), m.templateAfter.end());
  return out;
}

std::string HfTokenizer::decode(const std::vector<int32_t>& ids, bool skipSpecialTokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    const auto a = m.addedById.find(id);
    if (a != m.addedById.end()) {
      if (!(skipSpecialTokens && m.added[a->second].special))
        tokens.push_back(m.added[a->second].content);
      continue;
    }
    const auto t = m.idToToken.find(id);
    if (t != m.idToToken.end()) tokens.push_back(t->second);
  }
  if (!m.hasDecoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return ByteTokenizer::sanitizeUtf8(out);
  }
  for (const auto& step : m.decoder) tokens = step(std::move(tokens));
  std::string out;
  for (const std::string& t : tokens) out += t;
  return ByteTokenizer::sanitizeUtf8(out);
}

int32_t HfTokenizer::vocabSize() const {
  return impl_->vocabSize;
}

int32_t HfTokenizer::tokenId(std::string_view token) const {
  return impl_->tokenId(token);
}

int32_t HfTokenizer::bosId() const {
  return impl_->bos;
}
int32_t HfTokenizer::eosId() const {
  return impl_->eos;
}
const std::string& HfTokenizer::path() const {
  return impl_->file;
}

std::string HfTokenizer::describe() const {
  const std::string kind = impl_->byteLevel      ? "byte-level BPE"
                           : impl_->byteFallback ? "BPE with byte fallback"
                                                 : "BPE";
  return kind + ", " + std::to_string(impl_->vocabSize) + " tokens";
}

}  // namespace ts::engine
