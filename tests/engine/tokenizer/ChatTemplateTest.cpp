// The chat-template renderer against transformers: every committed model template
// (tests/data/chat_templates/<name>.jinja) on every committed conversation, and one snippet per
// construct, byte for byte with tests/data/chat_templates/golden.json
// (tools/make_chat_template_golden.py); then the errors for what it does not run.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trainscope/engine/tokenizer/ChatTemplate.h"

namespace ts::engine {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const fs::path kDir = fs::path(TRAINSCOPE_TEST_DATA) / "chat_templates";

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ojson& golden() {
  static const ojson g = ojson::parse(readFile(kDir / "golden.json"));
  return g;
}

// The golden's pinned "now" (2025-03-09 14:05:06), for strftime_now.
std::tm pinnedNow() {
  std::tm t{};
  t.tm_year = 125;
  t.tm_mon = 2;
  t.tm_mday = 9;
  t.tm_hour = 14;
  t.tm_min = 5;
  t.tm_sec = 6;
  timegm(&t);  // fills the weekday and day of the year
  return t;
}

// Renders, or returns the error as "ERROR: ..." (raised by the template or not).
std::string renderOrError(const ChatTemplate& t, const ojson& context, bool* raised = nullptr) {
  try {
    return t.render(context);
  } catch (const ChatTemplateError& e) {
    if (raised) *raised = e.raisedByTemplate();
    return std::string("ERROR: ") + e.what();
  }
}

void expectMatches(const std::string& got, const ojson& want, bool raised,
                   const std::string& label) {
  if (want.contains("output")) {
    EXPECT_EQ(got, want["output"].get<std::string>()) << label;
  } else {
    const std::string message = want["error"].get<std::string>();
    EXPECT_NE(got.find("ERROR: "), std::string::npos) << label << ": rendered " << got;
    EXPECT_NE(got.find(message), std::string::npos) << label << ": " << got;
    EXPECT_TRUE(raised) << label << ": expected the template's own raise_exception";
  }
}

TEST(ChatTemplateTest, ModelTemplatesMatchTransformers) {
  const ojson& g = golden();
  ASSERT_GE(g["cases"].size(), 80u);
  for (const ojson& c : g["cases"]) {
    const std::string name = c["template"].get<std::string>();
    ChatTemplate t(readFile(kDir / (name + ".jinja")), name + ".jinja");
    t.setClock(pinnedNow);
    // What apply_chat_template passes: the messages, tools/documents (None), the flag and the
    // tokenizer's special tokens.
    ojson context = {{"messages", g["conversations"][c["conversation"].get<std::string>()]},
                     {"tools", nullptr},
                     {"documents", nullptr},
                     {"add_generation_prompt", c["add_generation_prompt"]}};
    for (const auto& [k, v] : g["special_tokens"][name].items()) context[k] = v;
    bool raised = false;
    const std::string got = renderOrError(t, context, &raised);
    expectMatches(got, c, raised,
                  name + " / " + c["conversation"].get<std::string>() +
                      (c["add_generation_prompt"].get<bool>() ? " + generation prompt" : ""));
  }
}

TEST(ChatTemplateTest, SnippetsMatchJinja) {
  for (const ojson& s : golden()["snippets"]) {
    const std::string name = s["name"].get<std::string>();
    std::string got;
    bool raised = false;
    try {
      ChatTemplate t(s["template"].get<std::string>(), name);
      t.setClock(pinnedNow);
      got = renderOrError(t, s["context"], &raised);
    } catch (const ChatTemplateError& e) {
      got = std::string("ERROR: ") + e.what();
    }
    expectMatches(got, s, raised, "snippet '" + name + "'");
  }
}

// The error a template gives when it is read or run, or "" when it renders.
std::string errorOf(const std::string& source, const ojson& context = ojson::object()) {
  try {
    ChatTemplate t(source, "t.jinja");
    t.render(context);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplateTest, UnsupportedConstructsAreNamedWithTheirPosition) {
  EXPECT_EQ(errorOf("{{ x | wordcount }}", {{"x", "a b"}}),
            "chat template 't.jinja' at 1:8: unsupported filter 'wordcount'");
  EXPECT_EQ(errorOf("a\n  {{ 1 is prime }}"),
            "chat template 't.jinja' at 2:11: unsupported test 'prime'");
  EXPECT_EQ(errorOf("ok\n{% include 'other.jinja' %}"),
            "chat template 't.jinja' at 2:1: unsupported statement {% include %} (this renderer "
            "runs if, for, set, macro, break, continue and generation)");
  EXPECT_EQ(errorOf("{{ 'a {}'.format(1) }}"),
            "chat template 't.jinja' at 1:10: cannot call .format(): a string has no attribute or "
            "method 'format' in this renderer");
  EXPECT_EQ(errorOf("{% for x in y recursive %}{% endfor %}"),
            "chat template 't.jinja' at 1:15: unsupported: recursive for loops");
  EXPECT_EQ(errorOf("{{ '%s' % x }}", {{"x", 1}}),
            "chat template 't.jinja' at 1:9: unsupported: printf-style string formatting with '%'");
  EXPECT_EQ(errorOf("{{ f(*args) }}"),
            "chat template 't.jinja' at 1:6: unsupported: *args / **kwargs in a call");
  EXPECT_EQ(errorOf("{{ x | tojson(ensure_ascii=true) }}", {{"x", 1}}),
            "chat template 't.jinja' at 1:8: unsupported: tojson(ensure_ascii=True)");
}

TEST(ChatTemplateTest, SyntaxAndRuntimeErrorsNameThePlace) {
  EXPECT_EQ(errorOf("x\n{% if a %}yes"),
            "chat template 't.jinja' at 2:1: the statement opened here is never closed "
            "(expected {% endif %})");
  EXPECT_EQ(errorOf("{% endfor %}"),
            "chat template 't.jinja' at 1:1: unexpected {% endfor %} with nothing open to close");
  EXPECT_EQ(errorOf("{{ a + }}"),
            "chat template 't.jinja' at 1:8: expected an expression before the end of the tag");
  EXPECT_EQ(errorOf("{{ 'abc }}"),
            "chat template 't.jinja' at 1:4: string literal is never closed");
  EXPECT_EQ(errorOf("{{ x.y }}"),
            "chat template 't.jinja' at 1:5: 'x' is undefined (reading its attribute 'y')");
  EXPECT_EQ(errorOf("{{ m.a + 1 }}", {{"m", ojson::object()}}),
            "chat template 't.jinja' at 1:8: 'dict object' has no attribute 'a'");
  EXPECT_EQ(errorOf("{% set d = {} %}{% set d.a = 1 %}"),
            "chat template 't.jinja' at 1:17: cannot assign attribute on non-namespace object "
            "'d' (a dict)");
  EXPECT_EQ(errorOf("{{ nothing() }}"),
            "chat template 't.jinja' at 1:4: cannot call nothing(): 'nothing' is undefined");
}

TEST(ChatTemplateTest, DeepNestingIsRefusedNotRecursedInto) {
  EXPECT_NE(errorOf("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}")
                .find("the template nests too deeply"),
            std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(errorOf(ifs).find("the template nests too deeply"), std::string::npos);
  EXPECT_NE(errorOf("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}")
                .find("macro calls nest too deeply"),
            std::string::npos);
}

// Python's ints do not overflow and its loops have no budget; here both are errors, never
// wrong output or a hang.
TEST(ChatTemplateTest, OverflowsAndRunawayLoopsAreErrors) {
  EXPECT_EQ(errorOf("{{ 9223372036854775807 + 1 }}"),
            "chat template 't.jinja' at 1:24: integer overflow (this renderer's integers are "
            "64-bit)");
  EXPECT_NE(errorOf("{{ 3 ** 99 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(errorOf("{{ 'xy' * 100000000 }}").find("longer than 64 Mi items"), std::string::npos);
  EXPECT_NE(errorOf("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                    "{% endfor %}")
                .find("the template runs too long"),
            std::string::npos);
  EXPECT_NE(errorOf("{{ '\\U00110000' }}").find("is not a Unicode character"), std::string::npos);
}

TEST(ChatTemplateTest, RaiseExceptionIsTheTemplatesOwnError) {
  ChatTemplate t(
      "{% if messages[0]['role'] == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}ok",
      "gemma.jinja");
  EXPECT_EQ(t.render({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), "ok");
  try {
    t.render({{"messages", {{{"role", "system"}, {"content", "hi"}}}}});
    FAIL() << "expected a ChatTemplateError";
  } catch (const ChatTemplateError& e) {
    EXPECT_TRUE(e.raisedByTemplate());
    EXPECT_EQ(e.line(), 1);
    EXPECT_EQ(std::string(e.what()),
              "chat template 'gemma.jinja' raised an error at 1:44: System role not supported");
  }
}

TEST(ChatTemplateTest, StrftimeNowUsesTheClock) {
  ChatTemplate t("{{ strftime_now('%d %b %Y') }}");
  t.setClock(pinnedNow);
  EXPECT_EQ(t.render(ojson::object()), "09 Mar 2025");
}

}  // namespace
}  // namespace ts::engine
