#pragma once
// Byte-level tokenizer: every byte of the UTF-8 text is one token (vocab 256), so any file
// round-trips exactly and no vocabulary file is needed.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ts::engine {

class ByteTokenizer {
 public:
  static constexpr int kVocabSize = 256;
  static std::vector<int32_t> encode(std::string_view text);
  // Exact bytes back; ids outside 0..255 are skipped.
  static std::string decodeBytes(const std::vector<int32_t>& tokens);
  // For display/events (JSON needs valid UTF-8): like decodeBytes, but invalid or truncated
  // UTF-8 sequences become U+FFFD.
  static std::string decode(const std::vector<int32_t>& tokens);
  // Replace every invalid UTF-8 sequence in `bytes` with U+FFFD.
  static std::string sanitizeUtf8(std::string_view bytes);
};

}  // namespace ts::engine
