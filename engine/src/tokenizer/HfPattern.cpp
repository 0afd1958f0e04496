// Split/Replace patterns of a tokenizer.json: literal strings and ICU regular expressions.
#include <unicode/unistr.h>
#include <unicode/uregex.h>
#include <unicode/utext.h>

#include "HfTokenizerInternal.h"

namespace ts::engine {
namespace hf {

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

Regex::Regex(const std::string& pattern, const std::function<void(const std::string&)>& fail) {
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

std::vector<std::pair<size_t, size_t>> Regex::findAll(std::string_view s) const {
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

std::vector<std::pair<size_t, size_t>> Pattern::findAll(std::string_view s) const {
  if (regex) return regex->findAll(s);
  std::vector<std::pair<size_t, size_t>> out;
  if (literal.empty()) return out;
  for (size_t pos = 0, hit; (hit = s.find(literal, pos)) != std::string_view::npos;
       pos = hit + literal.size())
    out.emplace_back(hit, hit + literal.size());
  return out;
}

std::string Pattern::replaceAll(std::string_view s, std::string_view with) const {
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

}  // namespace hf

hf::Pattern HfTokenizer::Impl::pattern(const json& p, const std::string& field) const {
  hf::Pattern out;
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    out.literal = p["String"].get<std::string>();
  } else if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    out.regex = std::make_shared<hf::Regex>(p["Regex"].get<std::string>(),
                                            [&](const std::string& m) { fail(field + ": " + m); });
  } else {
    fail(field + " must be {\"String\": ...} or {\"Regex\": ...}");
  }
  return out;
}

}  // namespace ts::engine
