#include <gtest/gtest.h>

#include "trainscope/engine/tokenizer/ByteTokenizer.h"

using ts::engine::ByteTokenizer;

TEST(ByteTokenizer, RoundTripsUtf8Exactly) {
  const std::string text = "h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9F\x99\x82\n";  // "héllo ✓ 🙂"
  const auto ids = ByteTokenizer::encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0xC3);
  EXPECT_EQ(ids[2], 0xA9);
  for (int32_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 256);
  }
  EXPECT_EQ(ByteTokenizer::decodeBytes(ids), text);
  EXPECT_EQ(ByteTokenizer::decode(ids), text);  // valid UTF-8 is left alone
}

TEST(ByteTokenizer, DecodeReplacesBrokenUtf8) {
  // A cut multibyte sequence (what a model emits mid-character), a lone continuation byte,
  // an overlong '/', and a UTF-16 surrogate encoded in UTF-8.
  EXPECT_EQ(ByteTokenizer::decode({'a', 0xE2, 0x9C}), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ByteTokenizer::decode({0x80, 'b'}),
            "\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(ByteTokenizer::sanitizeUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ByteTokenizer::sanitizeUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(ByteTokenizer::decodeBytes({65, -1, 300, 66}), "AB");
}
