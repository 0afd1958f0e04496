// Hugging Face tokenizer.json (engine/HfTokenizer.h): the input up to its first NUL byte is the
// file, read by HfTokenizer::load from <scratch>/tokenizer.json; what follows the NUL (up to
// 1 KiB) is one more text to encode. Fixed texts (ASCII, whitespace runs, digits, accents, CJK,
// emoji, special-token names, invalid UTF-8) and that one are encoded with and without special
// tokens, and every id must be in [0, vocabSize()); each encoding is decoded (the result must be
// valid UTF-8), as are ids outside the vocabulary (skipped). Documented error: TokenizerError
// (an unreadable or unsupported file, or a character that the vocabulary cannot encode).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "FuzzSupport.h"
#include "trainscope/engine/tokenizer/ByteTokenizer.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"

using namespace ts::engine;

namespace {
const char* const kTexts[] = {
    "Hello world",
    "  the  quick\tbrown\n\nfox's 12345 jumped!! ",
    "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x98\x80",
    "<s>hi</s><|endoftext|><unk> <|begin_of_text|>x",
    "\xFF\xFE bad \xC3 utf8 \xE2\x82",
    "",
};

void checkEncoding(const HfTokenizer& t, std::string_view text) {
  for (bool special : {false, true}) {
    std::vector<int32_t> ids;
    try {
      ids = t.encode(text, special);
    } catch (const TokenizerError&) {
      continue;  // a character the vocabulary has no token for, and no unk_token
    }
    for (int32_t id : ids)
      TS_FUZZ_CHECK(id >= 0 && id < t.vocabSize(),
                    "encode gave id " + std::to_string(id) + " outside [0, " +
                        std::to_string(t.vocabSize()) + ")");
    for (bool skip : {false, true}) {
      const std::string s = t.decode(ids, skip);
      TS_FUZZ_CHECK(ByteTokenizer::sanitizeUtf8(s) == s, "decode gives valid UTF-8");
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view file = in.substr(0, nul);
  const std::string_view extra =
      nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1, 1024);
  const auto path = ts::fuzz::scratchDir("tokenizer") / "tokenizer.json";
  ts::fuzz::writeFile(path, file);
  HfTokenizer t;
  try {
    t = HfTokenizer::load(path.string());
  } catch (const TokenizerError&) {
    return 0;
  }
  const int32_t vocab = t.vocabSize();
  TS_FUZZ_CHECK(vocab >= 0, "vocabulary size");
  TS_FUZZ_CHECK(t.bosId() >= -1 && t.bosId() < vocab, "bos id");
  TS_FUZZ_CHECK(t.eosId() >= -1 && t.eosId() < vocab, "eos id");
  (void)t.describe();
  for (const char* text : kTexts) checkEncoding(t, text);
  if (!extra.empty()) checkEncoding(t, extra);
  const std::string s = t.decode({-1, 0, vocab - 1, vocab, INT32_MAX, INT32_MIN});
  TS_FUZZ_CHECK(ByteTokenizer::sanitizeUtf8(s) == s, "decode gives valid UTF-8");
  return 0;
}
