// tokenizer.json against the `tokenizers` library: the ids it gives for a hostile multilingual
// text (tests/data/tokenizers, made by tools/make_hf_tiny.py) for three tokenizers trained and
// configured the way GPT-2's, LLaMA-3's and LLaMA-2's files are.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trainscope/engine/tokenizer/HfTokenizer.h"

namespace ts::engine {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kDir = fs::path(TRAINSCOPE_TEST_DATA) / "tokenizers";

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json expected() {
  std::ifstream in(kDir / "expected.json");
  return json::parse(in);
}

// First differing position, for a readable failure on long id lists.
std::string firstDifference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  for (size_t i = 0; i < std::max(got.size(), want.size()); ++i)
    if (i >= got.size() || i >= want.size() || got[i] != want[i])
      return "at " + std::to_string(i) + ": got " +
             (i < got.size() ? std::to_string(got[i]) : "end") + ", want " +
             (i < want.size() ? std::to_string(want[i]) : "end");
  return "";
}

class TokenizerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerGolden, IdsEqualTheTokenizersLibrary) {
  const json e = expected();
  const json& c = e["cases"][GetParam()];
  const HfTokenizer tok = HfTokenizer::load((kDir / GetParam()).string());
  EXPECT_EQ(tok.vocabSize(), c["vocab_size"].get<int32_t>());
  const std::string text = readFile(kDir / e["text_file"].get<std::string>());
  const auto want = c["ids"].get<std::vector<int32_t>>();
  const auto got = tok.encode(text);
  EXPECT_EQ(got, want) << firstDifference(got, want);
  const auto wantSpecial = c["ids_special"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok.encode(text, true), wantSpecial);
  EXPECT_EQ(tok.decode(want), c["decoded"].get<std::string>());
  if (c["decoded_roundtrip"].get<bool>()) {
    EXPECT_EQ(tok.decode(want), text);
  }
  for (const json& x : c["extra"]) {
    const std::string s = x["text"].get<std::string>();
    const auto ids = x["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(s), ids) << "text '" << s << "' " << firstDifference(tok.encode(s), ids);
    EXPECT_EQ(tok.encode(s, true), x["ids_special"].get<std::vector<int32_t>>()) << s;
    EXPECT_EQ(tok.decode(ids), x["decoded"].get<std::string>()) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TokenizerGolden, ::testing::Values("gpt2", "llama3", "llama2"));

TEST(Tokenizer, SpecialTokensComeFromTokenizerConfig) {
  const HfTokenizer llama2 = HfTokenizer::load((kDir / "llama2").string());
  EXPECT_EQ(llama2.bosId(), llama2.tokenId("<s>"));
  EXPECT_EQ(llama2.eosId(), llama2.tokenId("</s>"));
  EXPECT_EQ(llama2.tokenId("<s>"), 1);
  const HfTokenizer llama3 = HfTokenizer::load((kDir / "llama3").string());
  EXPECT_EQ(llama3.eosId(), llama3.tokenId("<|end_of_text|>"));
  EXPECT_EQ(llama3.describe(), "byte-level BPE, 400 tokens");
  EXPECT_EQ(llama2.describe(), "BPE with byte fallback, 512 tokens");
  EXPECT_EQ(llama3.tokenId("no such token"), -1);
}

TEST(Tokenizer, InvalidUtf8IsReadAsReplacementCharacters) {
  const HfTokenizer tok = HfTokenizer::load((kDir / "gpt2").string());
  EXPECT_EQ(tok.encode("a\xff"
                       "b"),
            tok.encode("a\xEF\xBF\xBD"
                       "b"));
}

class TokenizerErrors : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("ts_tok_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir); }
  void TearDown() override { fs::remove_all(dir); }
  // gpt2's tokenizer.json with one change applied.
  std::string loadError(const std::function<void(json&)>& change) {
    std::ifstream in(kDir / "gpt2" / "tokenizer.json");
    json j = json::parse(in);
    change(j);
    const fs::path p = dir / "tokenizer.json";
    std::ofstream(p) << j.dump();
    try {
      HfTokenizer::load(p.string());
    } catch (const TokenizerError& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(TokenizerErrors, NameTheFileTheFieldAndWhatIsAllowed) {
  std::string m = loadError([](json& j) { j["model"]["type"] = "WordPiece"; });
  EXPECT_NE(m.find("tokenizer.json"), std::string::npos) << m;
  EXPECT_NE(m.find("model.type 'WordPiece' is not supported: allowed BPE"), std::string::npos) << m;

  m = loadError([](json& j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; });
  EXPECT_NE(m.find("pre_tokenizer.type 'Whitespace' is not supported: allowed Sequence"),
            std::string::npos)
      << m;
  m = loadError([](json& j) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", json::array({{{"type", "NFC"}}, {{"type", "BertX"}}})}};
  });
  EXPECT_NE(m.find("normalizer.normalizers[1].type 'BertX'"), std::string::npos) << m;
  m = loadError([](json& j) { j["model"]["merges"][3] = json::array({"Ġ", "no-such-token"}); });
  EXPECT_NE(m.find("model.merges[3]"), std::string::npos) << m;
  m = loadError([](json& j) {
    j["pre_tokenizer"] = {
        {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  });
  EXPECT_NE(m.find("pre_tokenizer.pattern: the regular expression '(unclosed' does not compile"),
            std::string::npos)
      << m;
  m = loadError([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; });
  EXPECT_NE(m.find("decoder.type 'WordPiece' is not supported"), std::string::npos) << m;

  std::ofstream(dir / "tokenizer.json") << "{\"model\": ";
  try {
    HfTokenizer::load(dir.string());
    FAIL() << "truncated JSON loaded";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("is not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(HfTokenizer::load((dir / "nothing").string()), TokenizerError);
}

}  // namespace
}  // namespace ts::engine
