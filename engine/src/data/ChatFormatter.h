#pragma once
// Conversations for instruction tuning (data.source jsonl, lines with "messages" or ShareGPT
// "conversations"): the tokenizer's chat template renders them, and the rendered text is cut
// into turns that are trained (the assistant's) or not (everything else).
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/engine/tokenizer/ChatTemplate.h"

namespace ts::engine::detail {

// A line's messages as the template sees them: {"role", "content", ...} objects, ShareGPT's
// from/value mapped (human -> user, gpt -> assistant, system -> system). Throws
// std::invalid_argument naming the bad field (a bad role, a content that is not a string, no
// assistant turn).
nlohmann::ordered_json conversationMessages(const nlohmann::ordered_json& line);

class ChatFormatter {
 public:
  // The chat template of the tokenizer at `tokenizerJson`: tokenizer_config.json's
  // `chat_template` next to it (a string, or the "default" entry of a list of named ones), else
  // a chat_template.jinja there. Throws DatasetError naming tokenizer_config.json when there is
  // none or the template cannot be read.
  static ChatFormatter forTokenizer(const std::string& tokenizerJson);

  struct Turn {
    std::string text;
    bool trained = false;
  };
  // The rendered conversation, cut into turns (their texts concatenate to the whole render).
  // Assistant message i is the text between the render of messages[:i] with the generation
  // prompt and the render of messages[:i+1]; both must be prefixes of the whole render.
  // `tools` is the line's "tools" (null when none). Throws ChatTemplateError, or
  // std::runtime_error when a turn cannot be found in the whole render.
  std::vector<Turn> render(const nlohmann::ordered_json& messages,
                           const nlohmann::ordered_json& tools) const;

  const std::string& source() const { return source_; }  // where the template came from

 private:
  std::string renderPrefix(const nlohmann::ordered_json& messages, size_t count,
                           bool generationPrompt, const nlohmann::ordered_json& tools) const;
  size_t turnEnd(const nlohmann::ordered_json& messages, size_t i, size_t start,
                 const std::string& full, const nlohmann::ordered_json& tools) const;

  std::shared_ptr<const ChatTemplate> template_;
  nlohmann::ordered_json specialTokens_ = nlohmann::ordered_json::object();
  std::string source_;
};

}  // namespace ts::engine::detail
