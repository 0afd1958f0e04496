// Jinja2's filters and tests that chat templates use, with Jinja2's (and transformers' tojson)
// arguments and results. Any other filter or test is an error naming it.
#include <algorithm>
#include <climits>
#include <cmath>
#include <map>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

namespace {

using Filter = Value (*)(Evaluator&, const Value&, Args&);
using Test = bool (*)(const Value&, Args&);

// Jinja2's attribute getter: "a.b" or "0" parts, through dict keys and list indexes.
Value attributeOf(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (v.isMapping()) {
      const Value* x = v.dict->find(part);
      v = x ? *x : Value::undefined("'dict object' has no attribute '" + part + "'");
    } else if (v.kind == Value::Kind::List && !part.empty() && part.size() < 10 &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               std::stoul(part) < v.list->size()) {
      v = (*v.list)[std::stoul(part)];
    } else {
      return Value::undefined("no attribute '" + part + "'");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return v;
}

Value stringArg(const Args& a, size_t i, const char* name) {
  Value v = a.get(i, name);
  if (v.kind != Value::Kind::String)
    fail(a.pos, a.what + ": argument '" + name + "' must be a string, not a " + typeName(v));
  return v;
}

Value fTrim(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(1, {"chars"});
  return Value::string(stripChars(toStr(in), a.get(0, "chars"), true, true));
}
Value fLength(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  return Value::integer(length(in, a.pos));
}
Value fToJson(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(4, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (truthy(a.get(0, "ensure_ascii", Value::boolean(false))))
    fail(a.pos, "unsupported: tojson(ensure_ascii=True)");
  const Value indent = a.get(1, "indent", Value::none());
  if (indent.kind != Value::Kind::None && indent.kind != Value::Kind::Int)
    fail(a.pos, "tojson: indent must be an integer or none");
  if (indent.kind == Value::Kind::Int && (indent.i < 0 || indent.i > 1024))
    fail(a.pos, "tojson: indent " + std::to_string(indent.i) + " is outside 0..1024");
  const int ind = indent.kind == Value::Kind::Int ? static_cast<int>(indent.i) : -1;
  std::string itemSep = ind >= 0 ? "," : ", ", keySep = ": ";
  const Value seps = a.get(2, "separators", Value::none());
  if (seps.kind == Value::Kind::List && seps.list->size() == 2) {
    itemSep = toStr((*seps.list)[0]);
    keySep = toStr((*seps.list)[1]);
  } else if (seps.kind != Value::Kind::None) {
    fail(a.pos, "tojson: separators must be a pair of strings");
  }
  return Value::string(toJson(in, ind, truthy(a.get(3, "sort_keys", Value::boolean(false))),
                              itemSep, keySep, a.pos));
}
Value fUpper(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  return Value::string(asciiCase(toStr(in), true));
}
Value fLower(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  return Value::string(asciiCase(toStr(in), false));
}
Value fReplace(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(3, {"old", "new", "count"});
  const Value count = a.get(2, "count", Value::none());
  return Value::string(replaceAll(toStr(in), stringArg(a, 0, "old").s, stringArg(a, 1, "new").s,
                                  count.kind == Value::Kind::Int ? count.i : -1));
}
Value fFirst(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  const List items = iterate(in, a.pos);
  return items.empty() ? Value::undefined("the first item of an empty sequence") : items.front();
}
Value fLast(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  const List items = iterate(in, a.pos);
  return items.empty() ? Value::undefined("the last item of an empty sequence") : items.back();
}
Value fDefault(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(2, {"default_value", "boolean"});
  const bool boolean = truthy(a.get(1, "boolean", Value::boolean(false)));
  if (in.isUndefined() || (boolean && !truthy(in)))
    return a.get(0, "default_value", Value::string(""));
  return in;
}
Value fJoin(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(2, {"d", "attribute"});
  const std::string sep = toStr(a.get(0, "d", Value::string("")));
  const Value attr = a.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& item : iterate(in, a.pos)) {
    if (!first) out += sep;
    first = false;
    out += toStr(attr.kind == Value::Kind::None ? item : attributeOf(item, toStr(attr)));
  }
  return Value::string(std::move(out));
}
Value fList(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  return Value::makeList(iterate(in, a.pos));
}
Value fItems(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  if (in.isUndefined()) return Value::makeList({});
  if (!in.isMapping()) fail(a.pos, "filter 'items' needs a mapping, not a " + typeName(in));
  List out;
  for (const auto& [k, v] : in.dict->items)
    out.push_back(Value::makeList({Value::string(k), v}, true));
  return Value::makeList(std::move(out));
}

// select/reject/selectattr/rejectattr: `attr` "" = the item itself.
Value selectItems(const Value& in, Args& a, bool byAttr, bool keep) {
  const size_t first = byAttr ? 1 : 0;
  const std::string attr = byAttr ? stringArg(a, 0, "attribute").s : "";
  List out;
  for (const Value& item : iterate(in, a.pos)) {
    const Value v = byAttr ? attributeOf(item, attr) : item;
    bool ok;
    if (a.positional.size() <= first) {
      ok = truthy(v);
    } else {
      Args testArgs;
      testArgs.pos = a.pos;
      testArgs.what = "test '" + toStr(a.positional[first]) + "'";
      testArgs.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1,
                                 a.positional.end());
      ok = applyTest(toStr(a.positional[first]), v, testArgs);
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::makeList(std::move(out));
}
Value fSelect(Evaluator&, const Value& in, Args& a) {
  return selectItems(in, a, false, true);
}
Value fReject(Evaluator&, const Value& in, Args& a) {
  return selectItems(in, a, false, false);
}
Value fSelectAttr(Evaluator&, const Value& in, Args& a) {
  return selectItems(in, a, true, true);
}
Value fRejectAttr(Evaluator&, const Value& in, Args& a) {
  return selectItems(in, a, true, false);
}

Value fMap(Evaluator& ev, const Value& in, Args& a) {
  List out;
  const Value attr = a.get(99, "attribute");
  if (!attr.isUndefined()) {
    const Value dflt = a.get(99, "default");
    for (const Value& item : iterate(in, a.pos)) {
      Value v = attributeOf(item, toStr(attr));
      out.push_back(v.isUndefined() && !dflt.isUndefined() ? dflt : v);
    }
    return Value::makeList(std::move(out));
  }
  if (a.positional.empty()) fail(a.pos, "filter 'map' needs a filter name or attribute=");
  const std::string filter = toStr(a.positional[0]);
  for (const Value& item : iterate(in, a.pos)) {
    Args inner = a;
    inner.positional.erase(inner.positional.begin());
    inner.what = "filter '" + filter + "'";
    out.push_back(applyFilter(ev, filter, item, inner));
  }
  return Value::makeList(std::move(out));
}

Value fString(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  return Value::string(toStr(in));
}
Value fInt(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(2, {"default", "base"});
  const Value dflt = a.get(0, "default", Value::integer(0));
  if (in.kind == Value::Kind::Int || in.kind == Value::Kind::Bool)
    return Value::integer(in.kind == Value::Kind::Bool ? in.b : in.i);
  auto fromDouble = [&](double d) {
    if (!(std::abs(d) < 9.2e18))
      fail(a.pos, "filter 'int': " + formatFloat(d) + " is out of range");
    return Value::integer(static_cast<int64_t>(d));
  };
  if (in.kind == Value::Kind::Float) return fromDouble(in.f);
  double d = 0;
  try {
    size_t used = 0;
    const std::string s = stripChars(toStr(in), Value::none(), true, true);
    d = std::stod(s, &used);
    if (used != s.size()) return dflt;
  } catch (const std::exception&) {
    return dflt;
  }
  return fromDouble(d);
}
Value fFloat(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(1, {"default"});
  if (in.isNumber()) return Value::real(in.number());
  try {
    size_t used = 0;
    const std::string s = stripChars(toStr(in), Value::none(), true, true);
    const double d = std::stod(s, &used);
    if (used == s.size()) return Value::real(d);
  } catch (const std::exception&) {
  }
  return a.get(0, "default", Value::real(0.0));
}
Value fAbs(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  if (in.kind == Value::Kind::Float) return Value::real(std::abs(in.f));
  if (in.isNumber()) {
    const int64_t x = in.kind == Value::Kind::Bool ? in.b : in.i;
    if (x == INT64_MIN) fail(a.pos, "integer overflow (this renderer's integers are 64-bit)");
    return Value::integer(x < 0 ? -x : x);
  }
  fail(a.pos, "filter 'abs' needs a number, not a " + typeName(in));
}
Value fCapitalize(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  std::string s = asciiCase(toStr(in), false);
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return Value::string(std::move(s));
}
Value fTitle(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  std::string s = toStr(in);
  bool start = true;  // Jinja2 starts a word after whitespace, - ( { [ <
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isspace(u) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      start = true;
      continue;
    }
    c = static_cast<char>(start ? std::toupper(u) : std::tolower(u));
    start = false;
  }
  return Value::string(std::move(s));
}
Value fReverse(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  if (in.kind == Value::Kind::String) {
    std::vector<std::string> cps = codePoints(in.s);
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::string(std::move(out));
  }
  List items = iterate(in, a.pos);
  std::reverse(items.begin(), items.end());
  return Value::makeList(std::move(items));
}

// Sort and unique compare strings case-insensitively unless case_sensitive (Jinja2's default).
Value sortKey(const Value& item, const Value& attr, bool caseSensitive) {
  Value v = attr.kind == Value::Kind::None ? item : attributeOf(item, toStr(attr));
  if (!caseSensitive && v.kind == Value::Kind::String) v.s = asciiCase(v.s, false);
  return v;
}
Value fSort(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(3, {"reverse", "case_sensitive", "attribute"});
  const bool rev = truthy(a.get(0, "reverse", Value::boolean(false)));
  const bool cs = truthy(a.get(1, "case_sensitive", Value::boolean(false)));
  const Value attr = a.get(2, "attribute", Value::none());
  List items = iterate(in, a.pos);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const Value kx = sortKey(x, attr, cs), ky = sortKey(y, attr, cs);
    return rev ? compare("<", ky, kx, a.pos) : compare("<", kx, ky, a.pos);
  });
  return Value::makeList(std::move(items));
}
Value fUnique(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(2, {"case_sensitive", "attribute"});
  const bool cs = truthy(a.get(0, "case_sensitive", Value::boolean(false)));
  const Value attr = a.get(1, "attribute", Value::none());
  List out, seen;
  for (const Value& item : iterate(in, a.pos)) {
    const Value key = sortKey(item, attr, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); }))
      continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::makeList(std::move(out));
}
Value fSafe(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(0, {});
  return in;
}
Value fIndent(Evaluator&, const Value& in, Args& a) {
  a.expectAtMost(3, {"width", "first", "blank"});
  const Value w = a.get(0, "width", Value::integer(4));
  if (w.kind == Value::Kind::Int && w.i > 1024)
    fail(a.pos, "filter 'indent': width " + std::to_string(w.i) + " is above 1024");
  const std::string pad = w.kind == Value::Kind::String
                              ? w.s
                              : std::string(static_cast<size_t>(std::max<int64_t>(0, w.i)), ' ');
  const bool first = truthy(a.get(1, "first", Value::boolean(false)));
  const bool blank = truthy(a.get(2, "blank", Value::boolean(false)));
  std::vector<std::string> lines;
  const std::string s = toStr(in);
  size_t start = 0;
  for (size_t nl; (nl = s.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(s.substr(start, nl - start));
  lines.push_back(s.substr(start));  // s + "\n" split: the last line is this one
  std::string out = lines[0];
  for (size_t k = 1; k < lines.size(); ++k) {
    out += '\n';
    if (blank || !lines[k].empty()) out += pad;
    out += lines[k];
  }
  return Value::string(first ? pad + out : out);
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {{"trim", fTrim},
                                                      {"length", fLength},
                                                      {"count", fLength},
                                                      {"tojson", fToJson},
                                                      {"upper", fUpper},
                                                      {"lower", fLower},
                                                      {"replace", fReplace},
                                                      {"first", fFirst},
                                                      {"last", fLast},
                                                      {"default", fDefault},
                                                      {"d", fDefault},
                                                      {"join", fJoin},
                                                      {"list", fList},
                                                      {"items", fItems},
                                                      {"select", fSelect},
                                                      {"reject", fReject},
                                                      {"selectattr", fSelectAttr},
                                                      {"rejectattr", fRejectAttr},
                                                      {"map", fMap},
                                                      {"string", fString},
                                                      {"int", fInt},
                                                      {"float", fFloat},
                                                      {"abs", fAbs},
                                                      {"capitalize", fCapitalize},
                                                      {"title", fTitle},
                                                      {"reverse", fReverse},
                                                      {"sort", fSort},
                                                      {"unique", fUnique},
                                                      {"safe", fSafe},
                                                      {"indent", fIndent}};
  return table;
}

bool tDefined(const Value& v, Args&) {
  return !v.isUndefined();
}
bool tUndefined(const Value& v, Args&) {
  return v.isUndefined();
}
bool tNone(const Value& v, Args&) {
  return v.kind == Value::Kind::None;
}
bool tString(const Value& v, Args&) {
  return v.kind == Value::Kind::String;
}
bool tMapping(const Value& v, Args&) {
  return v.kind == Value::Kind::Dict;
}
bool tIterable(const Value& v, Args&) {
  return v.kind == Value::Kind::String || v.kind == Value::Kind::List ||
         v.kind == Value::Kind::Dict;
}
bool tNumber(const Value& v, Args&) {
  return v.isNumber();
}
bool tInteger(const Value& v, Args&) {
  return v.kind == Value::Kind::Int;
}
bool tFloat(const Value& v, Args&) {
  return v.kind == Value::Kind::Float;
}
bool tBoolean(const Value& v, Args&) {
  return v.kind == Value::Kind::Bool;
}
bool tTrue(const Value& v, Args&) {
  return v.kind == Value::Kind::Bool && v.b;
}
bool tFalse(const Value& v, Args&) {
  return v.kind == Value::Kind::Bool && !v.b;
}
bool tCallable(const Value& v, Args&) {
  return v.kind == Value::Kind::Callable;
}
int64_t intInput(const Value& v, Args& a) {
  if (v.kind != Value::Kind::Int && v.kind != Value::Kind::Bool)
    fail(a.pos, a.what + " needs an integer, not a " + typeName(v));
  return v.kind == Value::Kind::Bool ? v.b : v.i;
}
bool tEven(const Value& v, Args& a) {
  return intInput(v, a) % 2 == 0;
}
bool tOdd(const Value& v, Args& a) {
  return intInput(v, a) % 2 != 0;
}
bool tDivisible(const Value& v, Args& a) {
  const int64_t n = intInput(a.get(0, "num"), a);
  return n != 0 && intInput(v, a) % n == 0;
}
bool cmpTest(const char* op, const Value& v, Args& a) {
  return compare(op, v, a.get(0, "other"), a.pos);
}
bool tEq(const Value& v, Args& a) {
  return cmpTest("==", v, a);
}
bool tNe(const Value& v, Args& a) {
  return cmpTest("!=", v, a);
}
bool tLt(const Value& v, Args& a) {
  return cmpTest("<", v, a);
}
bool tLe(const Value& v, Args& a) {
  return cmpTest("<=", v, a);
}
bool tGt(const Value& v, Args& a) {
  return cmpTest(">", v, a);
}
bool tGe(const Value& v, Args& a) {
  return cmpTest(">=", v, a);
}
bool tIn(const Value& v, Args& a) {
  return compare("in", v, a.get(0, "seq"), a.pos);
}
bool tSameAs(const Value& v, Args& a) {
  const Value o = a.get(0, "other");
  if (v.kind != o.kind) return false;
  if (v.kind == Value::Kind::List) return v.list == o.list;
  return equal(v, o);  // none, booleans and small values: Python's identity in practice
}
bool tLowerCase(const Value& v, Args&) {
  return v.kind == Value::Kind::String && asciiCase(v.s, false) == v.s;
}
bool tUpperCase(const Value& v, Args&) {
  return v.kind == Value::Kind::String && asciiCase(v.s, true) == v.s;
}
bool tSequence(const Value& v, Args& a) {
  return tIterable(v, a);
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {{"defined", tDefined},
                                                    {"undefined", tUndefined},
                                                    {"none", tNone},
                                                    {"string", tString},
                                                    {"mapping", tMapping},
                                                    {"iterable", tIterable},
                                                    {"sequence", tSequence},
                                                    {"number", tNumber},
                                                    {"integer", tInteger},
                                                    {"float", tFloat},
                                                    {"boolean", tBoolean},
                                                    {"true", tTrue},
                                                    {"false", tFalse},
                                                    {"callable", tCallable},
                                                    {"even", tEven},
                                                    {"odd", tOdd},
                                                    {"divisibleby", tDivisible},
                                                    {"equalto", tEq},
                                                    {"eq", tEq},
                                                    {"==", tEq},
                                                    {"ne", tNe},
                                                    {"!=", tNe},
                                                    {"lt", tLt},
                                                    {"<", tLt},
                                                    {"le", tLe},
                                                    {"<=", tLe},
                                                    {"gt", tGt},
                                                    {">", tGt},
                                                    {"ge", tGe},
                                                    {">=", tGe},
                                                    {"greaterthan", tGt},
                                                    {"lessthan", tLt},
                                                    {"in", tIn},
                                                    {"sameas", tSameAs},
                                                    {"lower", tLowerCase},
                                                    {"upper", tUpperCase}};
  return table;
}

}  // namespace

Value applyFilter(Evaluator& ev, const std::string& name, const Value& input, Args& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail(args.pos, "unsupported filter '" + name + "'");
  return it->second(ev, input, args);
}

bool applyTest(const std::string& name, const Value& input, Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail(args.pos, "unsupported test '" + name + "'");
  return it->second(input, args);
}

}  // namespace ts::engine::chat
