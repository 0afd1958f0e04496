// tokenizer.json's normalizer: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip.
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include "HfTokenizerInternal.h"

namespace ts::engine {

using hf::getOr;

void HfTokenizer::Impl::parseNormalizer(const json& n, const std::string& field) {
  if (n.is_null()) return;
  const std::string type = hf::typeOf(n);
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
    hf::eachChild(n, "normalizers", field,
                  [&](const json& c, const std::string& f) { parseNormalizer(c, f); });
  } else if (type == "Prepend") {
    const std::string pre = n.value("prepend", "");
    normalizer.push_back([pre](std::string& s) {
      if (!s.empty()) s.insert(0, pre);
    });
  } else if (type == "Replace") {
    const hf::Pattern pat = pattern(n.value("pattern", json()), field + ".pattern");
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
      while (left && a < b && hf::isAsciiSpace(s[a])) ++a;
      while (right && b > a && hf::isAsciiSpace(s[b - 1])) --b;
      s = s.substr(a, b - a);
    });
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | Prepend | Replace | NFC | NFD | NFKC | NFKD | "
         "Lowercase | Strip");
  }
}

}  // namespace ts::engine
