// Template values with Python's semantics: truth, equality, str() and repr(), json.dumps as
// transformers' tojson calls it, and UTF-8 strings seen as code points (Python indexes, slices
// and strips str by code point, not by byte).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

void fail(const Pos& pos, const std::string& message) {
  throw Fault{message, pos, false};
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items.emplace_back(key, std::move(value));
}

Value Value::makeList(List items, bool tuple) {
  Value v = of(Kind::List);
  v.tuple = tuple;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::makeDict(Dict d) {
  Value v = of(Kind::Dict);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::makeNamespace(Dict d) {
  Value v = of(Kind::Namespace);
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::callable(Native f) {
  Value v = of(Kind::Callable);
  v.fn = std::make_shared<Native>(std::move(f));
  return v;
}

Value Args::get(size_t index, const char* name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [k, v] : named)
    if (k == name) return v;
  return fallback;
}

void Args::expectAtMost(size_t count, std::initializer_list<const char*> names) const {
  if (positional.size() > count)
    fail(pos, what + " takes at most " + std::to_string(count) + " positional argument" +
                  (count == 1 ? "" : "s") + ", got " + std::to_string(positional.size()));
  for (const auto& arg : named) {
    const auto& k = arg.first;  // (clang 14 cannot capture a structured binding)
    if (std::find_if(names.begin(), names.end(), [&](const char* n) { return k == n; }) ==
        names.end())
      fail(pos, what + " has no argument named '" + k + "' in this renderer");
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.b;
    case Value::Kind::Int:
      return v.i != 0;
    case Value::Kind::Float:
      return v.f != 0;
    case Value::Kind::String:
      return !v.s.empty();
    case Value::Kind::List:
      return !v.list->empty();
    case Value::Kind::Dict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.isNumber() && b.isNumber()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? a.b : a.i) == (b.kind == Value::Kind::Bool ? b.b : b.i);
    return a.number() == b.number();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.s == b.s;
    case Value::Kind::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i)
        if (!equal((*a.list)[i], (*b.list)[i])) return false;
      return true;
    case Value::Kind::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    }
    default:
      return a.dict == b.dict && a.fn == b.fn;  // identity
  }
}

std::string formatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |v| < 1e16.
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
            digits.substr(static_cast<size_t>(exp) + 1);
    }
  }
  if (out.empty()) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += ebuf;
  }
  return neg ? "-" + out : out;
}

namespace {

std::string reprString(const std::string& s) {
  const bool useDouble = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = useDouble ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == static_cast<unsigned char>(q))
      out += std::string("\\") + q;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

void jsonString(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void jsonValue(const Value& v, int indent, bool sortKeys, const std::string& itemSep,
               const std::string& keySep, int depth, const Pos& pos, std::string& out) {
  std::string nl, close;  // newline and indent before an item / the closing bracket
  if (indent >= 0) {
    nl.assign(1, '\n').append(static_cast<size_t>(indent * (depth + 1)), ' ');
    close.assign(1, '\n').append(static_cast<size_t>(indent * depth), ' ');
  }
  switch (v.kind) {
    case Value::Kind::None:
      out += "null";
      return;
    case Value::Kind::Bool:
      out += v.b ? "true" : "false";
      return;
    case Value::Kind::Int:
      out += std::to_string(v.i);
      return;
    case Value::Kind::Float:
      out += std::isnan(v.f)   ? "NaN"
             : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity")
                               : formatFloat(v.f);
      return;
    case Value::Kind::String:
      jsonString(v.s, out);
      return;
    case Value::Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += "[" + nl;
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += itemSep + nl;
        jsonValue((*v.list)[i], indent, sortKeys, itemSep, keySep, depth + 1, pos, out);
      }
      out += close + "]";
      return;
    }
    case Value::Kind::Dict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sortKeys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      out += "{" + nl;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += itemSep + nl;
        jsonString(items[i]->first, out);
        out += keySep;
        jsonValue(items[i]->second, indent, sortKeys, itemSep, keySep, depth + 1, pos, out);
      }
      out += close + "}";
      return;
    }
    default:
      fail(pos, "tojson: a " + typeName(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string typeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "undefined";
    case Value::Kind::None:
      return "none";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "string";
    case Value::Kind::List:
      return v.tuple ? "tuple" : "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Namespace:
      return "namespace";
    default:
      return "function";
  }
}

std::string toStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::String:
      return v.s;
    default:
      return toRepr(v);
  }
}

std::string toRepr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.b ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.i);
    case Value::Kind::Float:
      return formatFloat(v.f);
    case Value::Kind::String:
      return reprString(v.s);
    case Value::Kind::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) out += (i ? ", " : "") + toRepr((*v.list)[i]);
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      for (size_t i = 0; i < v.dict->items.size(); ++i)
        out += (i ? ", " : "") + reprString(v.dict->items[i].first) + ": " +
               toRepr(v.dict->items[i].second);
      return out + "}";
    }
    case Value::Kind::Namespace:
      return "<Namespace>";
    default:
      return "<function>";
  }
}

std::string toJson(const Value& v, int indent, bool sortKeys, const std::string& itemSep,
                   const std::string& keySep, const Pos& pos) {
  std::string out;
  jsonValue(v, indent, sortKeys, itemSep, keySep, 0, pos, out);
  return out;
}

Value fromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : j) items.push_back(fromJson(e));
      return Value::makeList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, e] : j.items()) d.items.emplace_back(k, fromJson(e));
      return Value::makeDict(std::move(d));
    }
    default:
      return Value::undefined("a binary JSON value");
  }
}

List iterate(const Value& v, const Pos& pos) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return {};
    case Value::Kind::List:
      return *v.list;
    case Value::Kind::Dict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (auto& c : codePoints(v.s)) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default:
      fail(pos, "a " + typeName(v) + " is not iterable");
  }
}

int64_t length(const Value& v, const Pos& pos) {
  switch (v.kind) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return static_cast<int64_t>(codePoints(v.s).size());
    case Value::Kind::List:
      return static_cast<int64_t>(v.list->size());
    case Value::Kind::Dict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      fail(pos, "a " + typeName(v) + " has no length");
  }
}

std::vector<std::string> codePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

namespace {
uint32_t decode(const std::string& cp) {
  const auto c0 = static_cast<unsigned char>(cp[0]);
  if (cp.size() == 1) return c0;
  uint32_t v = c0 & (cp.size() == 2 ? 0x1f : cp.size() == 3 ? 0x0f : 0x07);
  for (size_t k = 1; k < cp.size(); ++k) v = (v << 6) | (static_cast<unsigned char>(cp[k]) & 0x3f);
  return v;
}
}  // namespace

bool isPyWhitespace(uint32_t cp) {
  return (cp >= 9 && cp <= 13) || (cp >= 28 && cp <= 32) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::string stripChars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<std::string> cps = codePoints(s);
  std::vector<std::string> set;
  const bool whitespace = chars.kind == Value::Kind::Undefined || chars.kind == Value::Kind::None;
  if (!whitespace) set = codePoints(chars.s);
  auto strip = [&](const std::string& cp) {
    return whitespace ? isPyWhitespace(decode(cp))
                      : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip(cps[b])) ++b;
  if (right)
    while (e > b && strip(cps[e - 1])) --e;
  std::string out;
  for (size_t k = b; k < e; ++k) out += cps[k];
  return out;
}

std::string asciiCase(std::string s, bool upper) {
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string replaceAll(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {  // Python inserts `to` around every code point
    for (const std::string& cp : codePoints(s)) {
      if (count < 0 || done++ < count) out += to;
      out += cp;
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t k = s.find(from, pos);
    if (k == std::string::npos) break;
    out += s.substr(pos, k - pos) + to;
    pos = k + from.size();
    ++done;
  }
  return out + s.substr(pos);
}
}  // namespace ts::engine::chat
