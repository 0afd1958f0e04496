// tokenizer.json's model: BPE (vocabulary, merges, byte fallback, unk), read and run on one
// pre-tokenized word at a time.
#include <climits>
#include <cstdio>

#include "HfTokenizerInternal.h"

namespace ts::engine {

using hf::getOr;

void HfTokenizer::Impl::parseModel(const json& m) {
  const std::string type = hf::typeOf(m);
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
  parseMerges(m.value("merges", json::array()));
  if (byteFallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = vocab.find(name);
      byteIds[b] = it == vocab.end() ? -1 : it->second;
    }
  }
}

// Each merge "a b" (or [a, b]) as the pair of ids it joins -> its rank and the joined id.
void HfTokenizer::Impl::parseMerges(const json& list) {
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
  const std::vector<std::string_view> chars = hf::utf8Chars(word);
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

}  // namespace ts::engine
