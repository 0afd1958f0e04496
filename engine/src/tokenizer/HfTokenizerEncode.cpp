// HfTokenizer::encode: added tokens split out of the text first, then each segment between them
// through the normalizer, the pre-tokenizer and BPE; the post-processor's tokens around it all.
#include <cctype>

#include "HfTokenizerInternal.h"
#include "trainscope/engine/tokenizer/ByteTokenizer.h"

namespace ts::engine {

using hf::Piece;

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
      while (segEnd > segStart && hf::isAsciiSpace(text[segEnd - 1])) --segEnd;
    if (best->rstrip)
      while (next < text.size() && hf::isAsciiSpace(text[next])) ++next;
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

}  // namespace ts::engine
