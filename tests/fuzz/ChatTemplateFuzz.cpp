// A model's chat template (tokenizer_config.json's chat_template, engine/ChatTemplate.h): the
// input is the template text, parsed and rendered on fixed conversations (with and without a
// system turn and the generation prompt, a non-string content, tools) with a pinned clock.
// Documented error: ChatTemplateError (a construct the renderer does not run, a syntax error,
// the template's own raise_exception); anything else thrown, or a crash, is a bug. The output
// of a render must be the same when rendered again (no state leaks between renders).
#include <cstdint>
#include <string>

#include "FuzzSupport.h"
#include "trainscope/engine/tokenizer/ChatTemplate.h"

using namespace ts::engine;
using ojson = nlohmann::ordered_json;

namespace {

std::tm pinned() {
  std::tm t{};
  t.tm_year = 125;
  t.tm_mon = 2;
  t.tm_mday = 9;
  return t;
}

std::vector<ojson> contexts() {
  const ojson sys = {{"role", "system"}, {"content", "Be brief."}};
  const ojson user = {{"role", "user"}, {"content", " Hi\n"}};
  const ojson reply = {{"role", "assistant"}, {"content", "<think>\nx\n</think>\n\nHello!"}};
  const ojson odd = {{"role", "tool"}, {"content", {{"k", {1, 2.5, nullptr}}}}};
  const ojson tools = {
      {{"type", "function"}, {"function", {{"name", "f"}, {"parameters", ojson::object()}}}}};
  return {{{"messages", {sys, user, reply, user}},
           {"add_generation_prompt", true},
           {"bos_token", "<s>"},
           {"eos_token", "</s>"},
           {"tools", nullptr}},
          {{"messages", {user, reply}}, {"add_generation_prompt", false}, {"tools", tools}},
          {{"messages", {user, odd, reply}}, {"add_generation_prompt", false}},
          {{"messages", ojson::array()}}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const std::string source(reinterpret_cast<const char*>(data), size);
  static const std::vector<ojson> kContexts = contexts();
  try {
    ChatTemplate t(source, "fuzz.jinja");
    t.setClock(pinned);
    for (const ojson& c : kContexts) {
      try {
        const std::string out = t.render(c);
        TS_FUZZ_CHECK(t.render(c) == out, "a second render gives the same text");
      } catch (const ChatTemplateError& e) {
        TS_FUZZ_CHECK(std::string(e.what()).find("chat template 'fuzz.jinja'") == 0,
                      "render errors name the template: " + std::string(e.what()));
      }
    }
  } catch (const ChatTemplateError& e) {
    TS_FUZZ_CHECK(std::string(e.what()).find("chat template 'fuzz.jinja'") == 0,
                  "parse errors name the template: " + std::string(e.what()));
  }
  return 0;
}
