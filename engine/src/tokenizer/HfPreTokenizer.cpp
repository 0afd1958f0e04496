// tokenizer.json's pre_tokenizer: Sequence, ByteLevel, Split, Metaspace, Digits. Each step cuts
// every piece of the normalized text into smaller pieces, which BPE then encodes one by one.
#include <map>

#include "HfTokenizerInternal.h"

namespace ts::engine {

using hf::getOr;
using hf::json;
using hf::Piece;

namespace {

using Step = std::function<std::vector<Piece>(const Piece&)>;

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

// GPT-2's: split on its regular expression, then spell every byte as a printable character.
Step byteLevelStep(const HfTokenizer::Impl& impl, const json& p, const std::string& field) {
  const bool prefixSpace = getOr(p, "add_prefix_space", false);
  std::shared_ptr<hf::Regex> gpt2;
  if (getOr(p, "use_regex", true))
    gpt2 = std::make_shared<hf::Regex>(
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
        [&](const std::string& m) { impl.fail(field + ": " + m); });
  return [prefixSpace, gpt2](const Piece& in) {
    Piece p = in;
    if (prefixSpace && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
    std::vector<Piece> parts = {p};
    if (gpt2) parts = splitPiece(p, gpt2->findAll(p.text), SplitBehavior::Isolated, false);
    for (Piece& part : parts) {
      std::string mapped;
      for (char c : part.text) mapped += hf::byteMap().toChar[static_cast<unsigned char>(c)];
      part.text = std::move(mapped);
    }
    return parts;
  };
}

Step splitStep(const HfTokenizer::Impl& impl, const json& p, const std::string& field) {
  const hf::Pattern pat = impl.pattern(p.value("pattern", json()), field + ".pattern");
  const std::string b = p.value("behavior", "Isolated");
  static const std::map<std::string, SplitBehavior> kBehaviors = {
      {"Removed", SplitBehavior::Removed},
      {"Isolated", SplitBehavior::Isolated},
      {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
      {"MergedWithNext", SplitBehavior::MergedWithNext},
      {"Contiguous", SplitBehavior::Contiguous}};
  const auto it = kBehaviors.find(b);
  if (it == kBehaviors.end())
    impl.fail(field + ".behavior '" + b +
              "' is unknown: allowed Removed | Isolated | MergedWithPrevious | MergedWithNext | "
              "Contiguous");
  const SplitBehavior behavior = it->second;
  const bool invert = getOr(p, "invert", false);
  return [pat, behavior, invert](const Piece& in) {
    return splitPiece(in, pat.findAll(in.text), behavior, invert);
  };
}

// SentencePiece's: spaces become the replacement character, each word keeping its own.
Step metaspaceStep(const HfTokenizer::Impl& impl, const json& p, const std::string& field) {
  const std::string rep = p.value("replacement", "\xE2\x96\x81");
  const std::string scheme = hf::metaspaceScheme(p);
  if (scheme != "always" && scheme != "first" && scheme != "never")
    impl.fail(field + ".prepend_scheme '" + scheme +
              "' is unknown: allowed always | first | never");
  const bool split = getOr(p, "split", true);
  return [rep, scheme, split](const Piece& in) {
    Piece p = in;
    hf::replaceAllLiteral(p.text, " ", rep);
    const bool starts = p.text.compare(0, rep.size(), rep) == 0;
    if (!starts && (scheme == "always" || (scheme == "first" && p.atStart))) p.text.insert(0, rep);
    if (!split) return std::vector<Piece>{p};
    hf::Pattern lit;
    lit.literal = rep;
    return splitPiece(p, lit.findAll(p.text), SplitBehavior::MergedWithNext, false);
  };
}

Step digitsStep(const HfTokenizer::Impl& impl, const json& p, const std::string& field) {
  const bool individual = getOr(p, "individual_digits", false);
  auto digits = std::make_shared<hf::Regex>(
      "\\p{N}", [&](const std::string& m) { impl.fail(field + ": " + m); });
  return [digits, individual](const Piece& in) {
    return splitPiece(in, digits->findAll(in.text),
                      individual ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false);
  };
}

}  // namespace

void HfTokenizer::Impl::parsePreTokenizer(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string type = hf::typeOf(p);
  if (type == "Sequence") {
    hf::eachChild(p, "pretokenizers", field,
                  [&](const json& c, const std::string& f) { parsePreTokenizer(c, f); });
  } else if (type == "ByteLevel") {
    byteLevel = true;
    preTokenizer.push_back(byteLevelStep(*this, p, field));
  } else if (type == "Split") {
    preTokenizer.push_back(splitStep(*this, p, field));
  } else if (type == "Metaspace") {
    preTokenizer.push_back(metaspaceStep(*this, p, field));
  } else if (type == "Digits") {
    preTokenizer.push_back(digitsStep(*this, p, field));
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | ByteLevel | Split | Metaspace | Digits");
  }
}

}  // namespace ts::engine
