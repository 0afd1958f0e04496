// Conversations in jsonl data (data.source jsonl, lines with "messages" or ShareGPT
// "conversations"): rendered with the tokenizer's chat template (tokenizer_config.json), each
// turn tokenized on its own, targets only on the assistant turns' tokens. The tokenizer is
// tests/data/chat_tokenizer (a tiny byte-level BPE with ChatML's tokens and Qwen2.5's
// template, tools/make_chat_template_golden.py); other templates are tried by writing a
// tokenizer_config.json with one of tests/data/chat_templates next to a copy of it.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../../support/TrainerHarness.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"

namespace ts::engine {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kData = TRAINSCOPE_TEST_DATA;
const fs::path kChatTokenizer = kData / "chat_tokenizer";

std::string readText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

core::RunConfig chatConfig(const fs::path& file, const fs::path& tokenizer) {
  core::RunConfig c = testsupport::tinyAdditionConfig();
  c.data.source = "jsonl";
  c.data.path = file.string();
  c.data.tokenizer = tokenizer.string();
  c.data.val_fraction = 0;
  c.model.seq_len = 400;
  c.model.vocab = 512;
  return c;
}

void writeLines(const fs::path& file, const std::vector<json>& lines) {
  std::ofstream f(file);
  for (const json& l : lines) f << l.dump() << "\n";
}

// A copy of the chat tokenizer whose tokenizer_config.json carries `templateName`'s template.
fs::path tokenizerWith(const fs::path& dir, const std::string& templateName, const json& tokens) {
  const fs::path t = dir / templateName;
  fs::create_directories(t);
  fs::copy_file(kChatTokenizer / "tokenizer.json", t / "tokenizer.json");
  json cfg = tokens;
  cfg["chat_template"] = readText(kData / "chat_templates" / (templateName + ".jinja"));
  std::ofstream(t / "tokenizer_config.json") << cfg.dump(2);
  return t;
}

// The one training row's trained targets, decoded (the assistant turns' text).
std::string trainedText(Dataset& ds, const fs::path& tokenizer, int T) {
  std::vector<int32_t> in(T), tg(T), trained;
  ds.nextTrainBatch(in.data(), tg.data(), 1, T);
  for (int t = 0; t < T; ++t)
    if (tg[t] >= 0) trained.push_back(tg[t]);
  return HfTokenizer::load(tokenizer.string()).decode(trained);
}

const json kMessages = {{"messages",
                         {{{"role", "system"}, {"content", "Be brief."}},
                          {{"role", "user"}, {"content", "Hi"}},
                          {{"role", "assistant"}, {"content", "Hello!"}},
                          {{"role", "user"}, {"content", "2+2?"}},
                          {{"role", "assistant"}, {"content", "4"}}}}};

// Rows equal the template's text tokenized turn by turn; only the assistant turns (through
// their end token and newline) are targets.
TEST(ChatJsonl, MessagesAndShareGptTrainOnTheAssistantTurnsOnly) {
  const fs::path dir = testsupport::scratchDir("chat_jsonl");
  const fs::path file = dir / "chat.jsonl";
  const json shareGpt = {
      {"conversations", {{{"from", "human"}, {"value", "Hi"}}, {{"from", "gpt"}, {"value", "Yo"}}}},
      {"id", 3}};
  writeLines(file, {kMessages, shareGpt});
  auto c = chatConfig(file, kChatTokenizer);
  auto ds = makeDataset(c);
  EXPECT_NE(ds->describe().find("2 samples (0 prompt/completion, 0 text, 2 conversation)"),
            std::string::npos)
      << ds->describe();
  const HfTokenizer tok = HfTokenizer::load(kChatTokenizer.string());
  // The Qwen2.5 template's text, by turn (trained or not), tokenized the same way.
  auto sampleOf = [&](const std::vector<std::pair<std::string, bool>>& turns) {
    std::pair<std::vector<int32_t>, std::vector<bool>> s;
    for (const auto& [text, trained] : turns)
      for (int32_t id : tok.encode(text, false)) {
        s.first.push_back(id);
        s.second.push_back(trained);
      }
    return s;
  };
  const auto want0 =
      sampleOf({{"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                 "<|im_start|>assistant\n",
                 false},
                {"Hello!<|im_end|>\n", true},
                {"<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n", false},
                {"4<|im_end|>\n", true}});
  const auto want1 =
      sampleOf({{"<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                 "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
                 false},
                {"Yo<|im_end|>\n", true}});
  ASSERT_EQ(tok.encode("<|im_end|>", false), std::vector<int32_t>{tok.tokenId("<|im_end|>")});
  const int T = c.model.seq_len, B = 2;
  std::vector<int32_t> in(B * T), tg(B * T);
  ds->nextTrainBatch(in.data(), tg.data(), B, T);
  int matched = 0;
  for (int r = 0; r < B; ++r) {
    const int32_t* ri = in.data() + r * T;
    const int32_t* rt = tg.data() + r * T;
    for (const auto* want : {&want0, &want1}) {
      const auto& [ids, trained] = *want;
      if (!std::equal(ids.begin(), ids.end() - 1, ri)) continue;
      ++matched;
      for (int t = 0; t < T; ++t) {
        const bool isTarget = t + 1 < int(ids.size()) && trained[t + 1];
        EXPECT_EQ(rt[t], isTarget ? ids[t + 1] : -1) << "row " << r << " position " << t;
      }
    }
  }
  EXPECT_EQ(matched, 2) << "each row is one of the two conversations";
  fs::remove_all(dir);
}

// Qwen3 renders the last assistant turn with an empty reasoning block and earlier ones
// without: each turn is trained as the whole conversation shows it.
TEST(ChatJsonl, TurnsAreFoundWhereTheTemplateRendersTheLastTurnDifferently) {
  const fs::path dir = testsupport::scratchDir("chat_qwen3");
  const fs::path file = dir / "chat.jsonl";
  writeLines(file, {kMessages});
  const fs::path tok = tokenizerWith(dir, "qwen3", {{"eos_token", "<|im_end|>"}});
  auto c = chatConfig(file, tok);
  auto ds = makeDataset(c);
  EXPECT_EQ(trainedText(*ds, tok, c.model.seq_len),
            "Hello!<|im_end|>\n<think>\n\n</think>\n\n4<|im_end|>\n");
  fs::remove_all(dir);
}

// Llama 3.1: the system turn with its date and the headers are prompt; the replies and
// <|eot_id|> are trained. OLMo 2: the end token is trained, the newline after it is not.
TEST(ChatJsonl, LlamaAndOlmoTemplates) {
  const fs::path dir = testsupport::scratchDir("chat_llama");
  const fs::path file = dir / "chat.jsonl";
  writeLines(file, {kMessages});
  const fs::path llama = tokenizerWith(
      dir, "llama-3.1", {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}});
  auto c = chatConfig(file, llama);
  EXPECT_EQ(trainedText(*makeDataset(c), llama, c.model.seq_len), "Hello!<|eot_id|>4<|eot_id|>");
  const fs::path olmo = tokenizerWith(
      dir, "olmo-2", {{"bos_token", "<|end_of_text|>"}, {"eos_token", "<|end_of_text|>"}});
  c = chatConfig(file, olmo);
  EXPECT_EQ(trainedText(*makeDataset(c), olmo, c.model.seq_len),
            "Hello!<|end_of_text|>4<|end_of_text|>");
  fs::remove_all(dir);
}

TEST(ChatJsonl, BadConversationsAreReportedWithTheirLines) {
  const fs::path dir = testsupport::scratchDir("chat_bad");
  const fs::path file = dir / "bad.jsonl";
  writeLines(file, {kMessages,
                    {{"messages", {{{"role", "bot"}, {"content", "x"}}}}},
                    {{"conversations", {{{"from", "robot"}, {"value", "x"}}}}},
                    {{"messages", {{{"role", "user"}, {"content", "only a question"}}}}},
                    {{"messages", {{{"role", "user"}, {"content", 3}}}}},
                    {{"messages", json::array()}},
                    {{"messages", kMessages["messages"]}, {"text", "both"}}});
  auto c = chatConfig(file, kChatTokenizer);
  const std::string m = testsupport::errorOf([&] { makeDataset(c); });
  EXPECT_NE(m.find("jsonl file '" + file.string() + "': 6 bad lines"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2: messages[0].role 'bot' is not a chat role: allowed system, user, "
                   "assistant, tool"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("line 3: conversations[0].from 'robot' is not a ShareGPT role: allowed "
                   "human, gpt, system"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("line 4: \"messages\" has no assistant turn: nothing to train"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("line 5: messages[0].content must be a string"), std::string::npos) << m;
  EXPECT_NE(m.find("line 6: \"messages\" must be a non-empty list"), std::string::npos) << m;
  EXPECT_NE(m.find("line 7: has a conversation and also \"text\"/\"prompt\""), std::string::npos)
      << m;
  EXPECT_EQ(m.find("line 1:"), std::string::npos) << m;
  fs::remove_all(dir);
}

TEST(ChatJsonl, TemplateErrorsNameTheLineAndTheTemplate) {
  const fs::path dir = testsupport::scratchDir("chat_template_errors");
  const fs::path file = dir / "chat.jsonl";
  writeLines(file, {kMessages});
  // Gemma 2 refuses a system turn: its own message, with the line.
  const fs::path gemma = tokenizerWith(dir, "gemma-2", {{"bos_token", "<|begin_of_text|>"}});
  std::string m = testsupport::errorOf([&] { makeDataset(chatConfig(file, gemma)); });
  EXPECT_NE(m.find("line 1: the chat template cannot render it: chat template 'tokenizer_config"
                   ".json '" +
                   (gemma / "tokenizer_config.json").string() + "'' raised an error at 1:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("System role not supported"), std::string::npos) << m;
  // Mistral v0.3 puts the system text into the last user turn: earlier turns are not prefixes.
  const fs::path mistral = tokenizerWith(
      dir, "mistral-v0.3", {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|im_end|>"}});
  m = testsupport::errorOf([&] { makeDataset(chatConfig(file, mistral)); });
  EXPECT_NE(m.find("line 1: the chat template's render of the messages before message 2 "
                   "(assistant), with the generation prompt, is not where the whole "
                   "conversation's render continues with it"),
            std::string::npos)
      << m;
  // A template the renderer cannot run is refused when it is read, naming the construct.
  const fs::path odd = dir / "odd";
  fs::create_directories(odd);
  fs::copy_file(kChatTokenizer / "tokenizer.json", odd / "tokenizer.json");
  std::ofstream(odd / "tokenizer_config.json")
      << json({{"chat_template", "{% for m in messages %}{{ m.content | wordwrap }}{% endfor %}"}})
             .dump();
  m = testsupport::errorOf([&] { makeDataset(chatConfig(file, odd)); });
  EXPECT_NE(m.find("unsupported filter 'wordwrap'"), std::string::npos) << m;
  fs::remove_all(dir);
}

TEST(ChatJsonl, NoChatTemplateIsAClearError) {
  const fs::path dir = testsupport::scratchDir("chat_no_template");
  const fs::path file = dir / "chat.jsonl";
  writeLines(file, {kMessages});
  const fs::path plain = kData / "tokenizers" / "llama3";
  std::string m = testsupport::errorOf([&] { makeDataset(chatConfig(file, plain)); });
  EXPECT_NE(m.find("conversations need the tokenizer's chat template, but tokenizer_config.json '" +
                   (plain / "tokenizer_config.json").string() + "' has no chat_template"),
            std::string::npos)
      << m;
  m = testsupport::errorOf([&] { makeDataset(chatConfig(file, "bytes")); });
  EXPECT_NE(m.find("holds conversations, which need the tokenizer's chat template "
                   "(tokenizer_config.json), but the run's tokenizer is bytes"),
            std::string::npos)
      << m;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ts::engine
