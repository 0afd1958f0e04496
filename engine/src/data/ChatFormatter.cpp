// Conversations through the tokenizer's chat template, cut into trained (assistant) and
// untrained turns by rendering prefixes of the conversation, as TRL and axolotl find the
// assistant's spans: assistant message i starts where the render of messages[:i] with the
// generation prompt ends and ends where the render of messages[:i+1] ends. Templates that
// render a final assistant turn differently from the same turn followed by more messages
// (Qwen3 adds an empty reasoning block to the last one) get the end from the next message
// instead: the render of messages[:i+2] minus that next message's own text.
#include "ChatFormatter.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "trainscope/engine/data/Dataset.h"

namespace ts::engine::detail {

namespace {

using ojson = nlohmann::ordered_json;

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string readText(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer_config.json's chat_template: a string, or [{"name", "template"}] with a "default".
std::string templateOf(const ojson& cfg, const std::string& where) {
  const ojson& t = cfg["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const ojson& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
    throw DatasetError(where +
                       ": chat_template is a list of named templates without a "
                       "\"default\" one; allowed: a string or a list holding \"default\"");
  }
  throw DatasetError(where + ": chat_template must be a string (or a list of named templates)");
}

// What apply_chat_template passes besides the messages: the tokenizer's special tokens.
ojson specialTokensOf(const ojson& cfg) {
  ojson tokens = ojson::object();
  for (const auto& [key, v] : cfg.items()) {
    const bool named = key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0;
    if (named && v.is_string()) tokens[key] = v;
    if (named && v.is_object() && v.contains("content") && v["content"].is_string())
      tokens[key] = v["content"];
    if (key == "additional_special_tokens" && v.is_array()) tokens[key] = v;
  }
  return tokens;
}

}  // namespace

ojson conversationMessages(const ojson& line) {
  const bool hasMessages = line.contains("messages"), hasShareGpt = line.contains("conversations");
  if (hasMessages && hasShareGpt)
    throw std::invalid_argument("has both \"messages\" and \"conversations\": allowed one");
  const char* field = hasMessages ? "messages" : "conversations";
  const ojson& list = line[field];
  if (!list.is_array() || list.empty())
    throw std::invalid_argument(std::string("\"") + field + "\" must be a non-empty list");
  ojson out = ojson::array();
  bool assistant = false;
  for (size_t i = 0; i < list.size(); ++i) {
    const ojson& m = list[i];
    const std::string at = std::string(field) + "[" + std::to_string(i) + "]";
    if (!m.is_object()) throw std::invalid_argument(at + " must be an object");
    const char* roleKey = hasMessages ? "role" : "from";
    const char* textKey = hasMessages ? "content" : "value";
    if (!m.contains(roleKey) || !m[roleKey].is_string())
      throw std::invalid_argument(at + "." + roleKey + " must be a string");
    if (!m.contains(textKey) || !m[textKey].is_string())
      throw std::invalid_argument(at + "." + textKey + " must be a string");
    std::string role = m[roleKey].get<std::string>();
    if (hasShareGpt) {
      if (role == "human")
        role = "user";
      else if (role == "gpt")
        role = "assistant";
      else if (role != "system")
        throw std::invalid_argument(at + ".from '" + role +
                                    "' is not a ShareGPT role: allowed human, gpt, system");
      out.push_back({{"role", role}, {"content", m["value"]}});
    } else {
      if (role != "system" && role != "user" && role != "assistant" && role != "tool")
        throw std::invalid_argument(at + ".role '" + role +
                                    "' is not a chat role: allowed system, user, assistant, tool");
      out.push_back(m);  // other keys (tool_calls, ...) are the template's to read
    }
    assistant = assistant || role == "assistant";
  }
  if (!assistant)
    throw std::invalid_argument(std::string("\"") + field +
                                "\" has no assistant turn: nothing to train");
  return out;
}

ChatFormatter ChatFormatter::forTokenizer(const std::string& tokenizerJson) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(tokenizerJson).parent_path();
  const fs::path cfgPath = dir / "tokenizer_config.json";
  const fs::path jinjaPath = dir / "chat_template.jinja";
  std::error_code ec;
  ChatFormatter f;
  ojson cfg = ojson::object();
  if (fs::is_regular_file(cfgPath, ec)) {
    cfg = core::parseBoundedJsonOrDiscarded<ojson>(readText(cfgPath));
    if (!cfg.is_object())
      throw DatasetError("tokenizer_config.json '" + cfgPath.string() + "' is not a JSON object");
  }
  std::string source;
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    f.source_ = "tokenizer_config.json '" + cfgPath.string() + "'";
    source = templateOf(cfg, f.source_);
  } else if (fs::is_regular_file(jinjaPath, ec)) {
    f.source_ = "chat_template.jinja '" + jinjaPath.string() + "'";
    source = readText(jinjaPath);
  } else {
    throw DatasetError(
        "conversations need the tokenizer's chat template, but tokenizer_config.json '" +
        cfgPath.string() + "' has no chat_template (and there is no chat_template.jinja " +
        "next to it): use a tokenizer folder whose tokenizer_config.json has one");
  }
  try {
    f.template_ = std::make_shared<ChatTemplate>(source, f.source_);
  } catch (const ChatTemplateError& e) {
    throw DatasetError(std::string(e.what()) + " (the tokenizer's chat template)");
  }
  f.specialTokens_ = specialTokensOf(cfg);
  return f;
}

std::string ChatFormatter::renderPrefix(const ojson& messages, size_t count, bool generationPrompt,
                                        const ojson& tools) const {
  ojson context = {{"messages", ojson::array()},
                   {"tools", tools},
                   {"documents", nullptr},
                   {"add_generation_prompt", generationPrompt}};
  for (size_t k = 0; k < count; ++k) context["messages"].push_back(messages[k]);
  for (const auto& [k, v] : specialTokens_.items()) context[k] = v;
  return template_->render(context);
}

size_t ChatFormatter::turnEnd(const ojson& messages, size_t i, size_t start,
                              const std::string& full, const ojson& tools) const {
  if (i + 1 == messages.size()) return full.size();
  const std::string upTo = renderPrefix(messages, i + 1, false, tools);
  if (startsWith(full, upTo) && upTo.size() >= start) return upTo.size();
  // The turn renders differently when it is the last: end where the next message begins.
  const std::string withNext = renderPrefix(messages, i + 2, false, tools);
  const std::string before = renderPrefix(messages, i, false, tools);
  ojson skipping = ojson::array();
  for (size_t k = 0; k < i; ++k) skipping.push_back(messages[k]);
  skipping.push_back(messages[i + 1]);
  std::string nextOnly;
  try {
    nextOnly = renderPrefix(skipping, skipping.size(), false, tools);
  } catch (const ChatTemplateError&) {
    nextOnly.clear();  // the template refuses that order: no way to isolate the next message
  }
  if (startsWith(full, withNext) && startsWith(nextOnly, before)) {
    const std::string next = nextOnly.substr(before.size());
    if (withNext.size() >= start + next.size() &&
        withNext.compare(withNext.size() - next.size(), next.size(), next) == 0)
      return withNext.size() - next.size();
  }
  throw std::runtime_error("the chat template renders message " + std::to_string(i) +
                           " (assistant) differently once more messages follow it, so its "
                           "text cannot be found in the whole conversation");
}

std::vector<ChatFormatter::Turn> ChatFormatter::render(const ojson& messages,
                                                       const ojson& tools) const {
  const std::string full = renderPrefix(messages, messages.size(), false, tools);
  std::vector<Turn> turns;
  size_t done = 0;  // full[..done) is in turns
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].value("role", "") != "assistant") continue;
    const std::string prompt = renderPrefix(messages, i, true, tools);
    if (!startsWith(full, prompt) || prompt.size() < done)
      throw std::runtime_error("the chat template's render of the messages before message " +
                               std::to_string(i) + " (assistant), with the generation prompt, " +
                               "is not where the whole conversation's render continues with it");
    const size_t end = turnEnd(messages, i, prompt.size(), full, tools);
    if (prompt.size() > done) turns.push_back({full.substr(done, prompt.size() - done), false});
    if (end > prompt.size())
      turns.push_back({full.substr(prompt.size(), end - prompt.size()), true});
    done = end;
  }
  if (done < full.size()) turns.push_back({full.substr(done), false});
  return turns;
}

}  // namespace ts::engine::detail
