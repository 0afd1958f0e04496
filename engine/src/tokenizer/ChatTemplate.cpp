#include "trainscope/engine/tokenizer/ChatTemplate.h"

#include "ChatTemplateInternal.h"

namespace ts::engine {

struct ChatTemplate::Program {
  chat::Body body;
};

namespace {

ChatTemplateError wrap(const std::string& name, const chat::Fault& f) {
  const std::string at = std::to_string(f.pos.line) + ":" + std::to_string(f.pos.column);
  const std::string message =
      f.raised ? "chat template '" + name + "' raised an error at " + at + ": " + f.message
               : "chat template '" + name + "' at " + at + ": " + f.message;
  return ChatTemplateError(message, f.pos.line, f.pos.column, f.raised);
}

std::tm localNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string name)
    : name_(std::move(name)), clock_(localNow) {
  try {
    auto program = std::make_shared<Program>();
    program->body = chat::parse(chat::lex(source));
    program_ = std::move(program);
  } catch (const chat::Fault& f) {
    throw wrap(name_, f);
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object())
    throw ChatTemplateError("chat template '" + name_ + "': the render context must be an object",
                            0, 0, false);
  chat::Dict vars, globals;
  for (const auto& [k, v] : context.items()) vars.set(k, chat::fromJson(v));
  chat::addGlobals(globals, clock_);
  try {
    chat::Evaluator ev(vars, globals);
    return ev.run(program_->body);
  } catch (const chat::Fault& f) {
    throw wrap(name_, f);
  }
}

}  // namespace ts::engine
