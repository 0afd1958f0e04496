// tokenizer.json's decoder (Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)
// and HfTokenizer::decode, which runs the ids' tokens through it.
#include <cctype>

#include "HfTokenizerInternal.h"
#include "trainscope/engine/tokenizer/ByteTokenizer.h"

namespace ts::engine {

using hf::getOr;
using hf::json;
using Tokens = HfTokenizer::Impl::Tokens;

namespace {

using Step = std::function<Tokens(Tokens)>;

// GPT-2's printable characters back to the bytes they stand for.
Step byteLevelStep() {
  return [](Tokens tokens) {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool ok = true;
      for (std::string_view c : hf::utf8Chars(t)) {
        const auto it = hf::byteMap().toByte.find(std::string(c));
        if (it == hf::byteMap().toByte.end()) {
          ok = false;
          break;
        }
        mapped.push_back(static_cast<char>(it->second));
      }
      bytes += ok ? mapped : t;  // a token outside the map (an added token) stays as written
    }
    return Tokens{ByteTokenizer::sanitizeUtf8(bytes)};
  };
}

Step replaceStep(const HfTokenizer::Impl& impl, const json& d, const std::string& field) {
  const hf::Pattern pat = impl.pattern(d.value("pattern", json()), field + ".pattern");
  const std::string content = d.value("content", "");
  return [pat, content](Tokens tokens) {
    for (std::string& t : tokens) t = pat.replaceAll(t, content);
    return tokens;
  };
}

// Runs of <0xNN> tokens become their bytes: one token when they spell valid UTF-8, else one
// U+FFFD per byte token.
Step byteFallbackStep() {
  return [](Tokens tokens) {
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
  };
}

Step fuseStep() {
  return [](Tokens tokens) {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return Tokens{all};
  };
}

Step stripStep(const json& d) {
  const std::string content = d.value("content", " ");
  const int start = getOr(d, "start", 0), stop = getOr(d, "stop", 0);
  return [content, start, stop](Tokens tokens) {
    for (std::string& t : tokens) {
      for (int i = 0; i < start && t.compare(0, content.size(), content) == 0; ++i)
        t.erase(0, content.size());
      for (int i = 0; i < stop && t.size() >= content.size() &&
                      t.compare(t.size() - content.size(), content.size(), content) == 0;
           ++i)
        t.erase(t.size() - content.size());
    }
    return tokens;
  };
}

Step metaspaceStep(const json& d) {
  const std::string rep = d.value("replacement", "\xE2\x96\x81");
  const std::string scheme = hf::metaspaceScheme(d);
  return [rep, scheme](Tokens tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      hf::replaceAllLiteral(tokens[i], rep, " ");
      if (i == 0 && scheme != "never" && !tokens[i].empty() && tokens[i][0] == ' ')
        tokens[i].erase(0, 1);
    }
    return tokens;
  };
}

}  // namespace

void HfTokenizer::Impl::parseDecoder(const json& d, const std::string& field) {
  if (d.is_null()) return;
  hasDecoder = true;
  const std::string type = hf::typeOf(d);
  if (type == "Sequence") {
    hf::eachChild(d, "decoders", field,
                  [&](const json& c, const std::string& f) { parseDecoder(c, f); });
  } else if (type == "ByteLevel") {
    decoder.push_back(byteLevelStep());
  } else if (type == "Replace") {
    decoder.push_back(replaceStep(*this, d, field));
  } else if (type == "ByteFallback") {
    decoder.push_back(byteFallbackStep());
  } else if (type == "Fuse") {
    decoder.push_back(fuseStep());
  } else if (type == "Strip") {
    decoder.push_back(stripStep(d));
  } else if (type == "Metaspace") {
    decoder.push_back(metaspaceStep(d));
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | ByteLevel | Replace | ByteFallback | Fuse | "
         "Strip | Metaspace");
  }
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

}  // namespace ts::engine
