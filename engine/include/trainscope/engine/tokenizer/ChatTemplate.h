#pragma once
// A model's chat template (the Jinja2 text in tokenizer_config.json's `chat_template`), rendered
// the way transformers' apply_chat_template(..., tokenize=False) renders it: Jinja2 with
// trim_blocks and lstrip_blocks, the loop controls (break/continue), transformers'
// {% generation %} block, its tojson (ensure_ascii=False; indent, separators, sort_keys),
// raise_exception(msg), strftime_now(fmt) and namespace(). The Jinja2 subset covers what the
// templates of Llama 3.x, Qwen2.5/3, Gemma 2/3, Phi-3/3.5/4, OLMo 2 and Mistral use (the goldens
// in tests/data/chat_templates): text, {{ }}, {% %}, {# #} and whitespace control; if/elif/else,
// for (loop.*, `for x in y if cond`, else), set (names, tuples, namespace attributes, blocks),
// macros; Python-like values, operators, slicing, string/dict methods, and the common filters
// and tests. Anything else (an unknown filter, test, method or statement) is refused with an
// error naming the construct and its line:column, when the template is read or when it runs;
// nothing is ever silently rendered differently. Where Python has no limit this renderer has
// one, and passing it is an error too: integers are 64-bit, a render runs at most 2 million
// steps, nesting is at most 256 deep. upper/lower/title/capitalize change ASCII letters only.
#include <ctime>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace ts::engine {

// A template that cannot be read or run. The message names the template, the line:column and
// the construct (or the template's own raise_exception message).
class ChatTemplateError : public std::runtime_error {
 public:
  ChatTemplateError(const std::string& message, int line, int column, bool raised)
      : std::runtime_error(message), line_(line), column_(column), raised_(raised) {}
  int line() const { return line_; }
  int column() const { return column_; }
  // True when the template itself called raise_exception (e.g. "roles must alternate").
  bool raisedByTemplate() const { return raised_; }

 private:
  int line_, column_;
  bool raised_;
};

class ChatTemplate {
 public:
  // Parses `source`; `name` labels errors (a file name). Throws ChatTemplateError.
  explicit ChatTemplate(const std::string& source, std::string name = "chat template");

  // Renders with the variables of `context` (an object: messages, add_generation_prompt,
  // bos_token, eos_token, tools, ...). Key order is kept (tojson and dict loops follow it).
  // Throws ChatTemplateError.
  std::string render(const nlohmann::ordered_json& context) const;

  // The "now" strftime_now formats (local time by default); tests pin it.
  void setClock(std::function<std::tm()> now) { clock_ = std::move(now); }
  const std::string& name() const { return name_; }

  struct Program;

 private:
  std::string name_;
  std::shared_ptr<const Program> program_;
  std::function<std::tm()> clock_;
};

}  // namespace ts::engine
