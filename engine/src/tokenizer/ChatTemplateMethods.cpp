// Python str and dict methods that chat templates call (`message.content.strip()`,
// `tool.items()`), and the globals transformers gives templates: raise_exception, strftime_now,
// namespace, plus Jinja2's range and dict.
#include <algorithm>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

namespace {

std::string strArg(const Args& a, size_t i, const char* name) {
  const Value v = a.get(i, name);
  if (v.kind != Value::Kind::String)
    fail(a.pos, a.what + ": argument '" + name + "' must be a string, not a " + typeName(v));
  return v.s;
}

// str.split(sep=None, maxsplit=-1).
Value split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.kind == Value::Kind::String) {
    size_t pos = 0;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t k = s.find(sep.s, pos);
      if (k == std::string::npos) break;
      out.push_back(Value::string(s.substr(pos, k - pos)));
      pos = k + sep.s.size();
    }
    out.push_back(Value::string(s.substr(pos)));
    return Value::makeList(std::move(out));
  }
  // Runs of whitespace; leading and trailing whitespace gives no empty parts.
  const std::vector<std::string> cps = codePoints(s);
  auto space = [&](size_t k) { return stripChars(cps[k], Value::none(), true, true).empty(); };
  size_t k = 0;
  while (k < cps.size()) {
    while (k < cps.size() && space(k)) ++k;
    if (k == cps.size()) break;
    std::string part;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      for (; k < cps.size(); ++k) part += cps[k];
      out.push_back(Value::string(stripChars(part, Value::none(), false, true)));
      break;
    }
    while (k < cps.size() && !space(k)) part += cps[k++];
    out.push_back(Value::string(std::move(part)));
  }
  return Value::makeList(std::move(out));
}

bool affix(const std::string& s, const Value& what, bool prefix, const Args& a) {
  auto one = [&](const Value& v) {
    if (v.kind != Value::Kind::String)
      fail(a.pos, a.what + " takes a string or a tuple of strings, not a " + typeName(v));
    if (v.s.size() > s.size()) return false;
    return prefix ? s.compare(0, v.s.size(), v.s) == 0
                  : s.compare(s.size() - v.s.size(), v.s.size(), v.s) == 0;
  };
  if (what.kind == Value::Kind::List) return std::any_of(what.list->begin(), what.list->end(), one);
  return one(what);
}

Value stringMethod(const std::string& s, const std::string& name, Args& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    a.expectAtMost(1, {"chars"});
    return Value::string(stripChars(s, a.get(0, "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    a.expectAtMost(1, {});
    return Value::boolean(affix(s, a.get(0, "prefix"), name == "startswith", a));
  }
  if (name == "split") {
    a.expectAtMost(2, {"sep", "maxsplit"});
    const Value sep = a.get(0, "sep", Value::none());
    if (sep.kind == Value::Kind::String && sep.s.empty()) fail(a.pos, "split(): empty separator");
    const Value max = a.get(1, "maxsplit", Value::integer(-1));
    return split(s, sep, max.kind == Value::Kind::Int ? max.i : -1);
  }
  if (name == "upper" || name == "lower") {
    a.expectAtMost(0, {});
    return Value::string(asciiCase(s, name == "upper"));
  }
  if (name == "replace") {
    a.expectAtMost(3, {});
    const Value count = a.get(2, "count", Value::integer(-1));
    return Value::string(replaceAll(s, strArg(a, 0, "old"), strArg(a, 1, "new"),
                                    count.kind == Value::Kind::Int ? count.i : -1));
  }
  if (name == "title" || name == "capitalize") {
    a.expectAtMost(0, {});
    if (name == "title") {
      std::string out = s;
      bool start = true;  // Python: a word is a run of letters
      for (char& c : out) {
        const auto u = static_cast<unsigned char>(c);
        const bool letter = std::isalpha(u) != 0;
        c = static_cast<char>(letter ? (start ? std::toupper(u) : std::tolower(u)) : c);
        start = !letter;
      }
      return Value::string(std::move(out));
    }
    std::string out = asciiCase(s, false);
    if (!out.empty()) out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "count") {
    a.expectAtMost(1, {});
    const std::string sub = strArg(a, 0, "sub");
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(codePoints(s).size()) + 1);
      int64_t n = 0;
      for (size_t k = s.find(sub); k != std::string::npos; k = s.find(sub, k + sub.size())) ++n;
      return Value::integer(n);
    }
    const size_t k = s.find(sub);
    return Value::integer(
        k == std::string::npos ? -1 : static_cast<int64_t>(codePoints(s.substr(0, k)).size()));
  }
  if (name == "join") {
    a.expectAtMost(1, {});
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a.get(0, "iterable"), a.pos)) {
      if (v.kind != Value::Kind::String)
        fail(a.pos, "str.join() needs strings, got a " + typeName(v));
      out += (first ? "" : s) + v.s;
      first = false;
    }
    return Value::string(std::move(out));
  }
  // isdigit, isalpha, isspace ...: ASCII classes.
  a.expectAtMost(0, {});
  int (*cls)(int) = name == "isdigit"   ? ::isdigit
                    : name == "isalpha" ? ::isalpha
                    : name == "isalnum" ? ::isalnum
                                        : ::isspace;
  return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return cls(static_cast<unsigned char>(c)) != 0;
  }));
}

Value dictMethod(const Value& d, const std::string& name, Args& a) {
  if (name == "get") {
    a.expectAtMost(2, {});
    const Value key = a.get(0, "key");
    const Value* v = key.kind == Value::Kind::String ? d.dict->find(key.s) : nullptr;
    return v ? *v : a.get(1, "default", Value::none());
  }
  a.expectAtMost(0, {});
  List out;
  for (const auto& [k, v] : d.dict->items) {
    if (name == "keys")
      out.push_back(Value::string(k));
    else if (name == "values")
      out.push_back(v);
    else
      out.push_back(Value::makeList({Value::string(k), v}, true));
  }
  return Value::makeList(std::move(out));
}

}  // namespace

Value method(const Value& base, const std::string& name, const Pos& pos) {
  (void)pos;
  static const char* strMethods[] = {"strip",      "lstrip",  "rstrip", "startswith", "endswith",
                                     "split",      "upper",   "lower",  "replace",    "title",
                                     "capitalize", "find",    "count",  "join",       "isdigit",
                                     "isalpha",    "isalnum", "isspace"};
  static const char* dictMethods[] = {"items", "keys", "values", "get"};
  auto in = [&](auto& list) {
    return std::any_of(std::begin(list), std::end(list), [&](const char* m) { return name == m; });
  };
  if (base.kind == Value::Kind::String && in(strMethods)) {
    const std::string s = base.s;
    return Value::callable([s, name](Args& a) { return stringMethod(s, name, a); });
  }
  if (base.kind == Value::Kind::Dict && in(dictMethods))
    return Value::callable([base, name](Args& a) { return dictMethod(base, name, a); });
  return Value::undefined("a " + typeName(base) + " has no method '" + name + "'");
}

void addGlobals(Dict& g, std::function<std::tm()> clock) {
  g.set("raise_exception", Value::callable([](Args& a) -> Value {
          throw Fault{toStr(a.get(0, "message")), a.pos, true};
        }));
  g.set("strftime_now", Value::callable([clock](Args& a) {
          const Value fmt = a.get(0, "format");
          if (fmt.kind != Value::Kind::String) fail(a.pos, "strftime_now() needs a format string");
          const std::tm now = clock();
          std::string out(256 + fmt.s.size() * 8, '\0');
          out.resize(std::strftime(out.data(), out.size(), fmt.s.c_str(), &now));
          return Value::string(std::move(out));
        }));
  auto keywords = [](Args& a, const char* what) {
    Dict d;
    if (!a.positional.empty()) {
      if (a.positional.size() > 1 || !a.positional[0].isMapping())
        fail(a.pos, std::string(what) + "() takes keyword arguments or one mapping");
      d = *a.positional[0].dict;
    }
    for (const auto& [k, v] : a.named) d.set(k, v);
    return d;
  };
  g.set("namespace", Value::callable([keywords](Args& a) {
          return Value::makeNamespace(keywords(a, "namespace"));
        }));
  g.set("dict",
        Value::callable([keywords](Args& a) { return Value::makeDict(keywords(a, "dict")); }));
  g.set("range", Value::callable([](Args& a) {
          std::vector<int64_t> n;
          for (const Value& v : a.positional) {
            if (v.kind != Value::Kind::Int) fail(a.pos, "range() takes integers");
            n.push_back(v.i);
          }
          if (n.empty() || n.size() > 3) fail(a.pos, "range() takes 1 to 3 integers");
          const int64_t start = n.size() > 1 ? n[0] : 0, stop = n.size() > 1 ? n[1] : n[0];
          const int64_t step = n.size() > 2 ? n[2] : 1;
          if (step == 0) fail(a.pos, "range() step must not be zero");
          const __int128 span = (static_cast<__int128>(stop) - start) / step;
          if (span > 100000) fail(a.pos, "range() is too long for a template");
          List out;
          for (__int128 k = start; step > 0 ? k < stop : k > stop; k += step)
            out.push_back(Value::integer(static_cast<int64_t>(k)));
          return Value::makeList(std::move(out));
        }));
}

}  // namespace ts::engine::chat
