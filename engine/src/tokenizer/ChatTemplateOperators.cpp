// Arithmetic, comparison and membership with Python's rules: int op int stays int (floor
// division and modulo round toward minus infinity), / is true division, + joins strings and
// lists, * repeats them; an undefined operand is an error, as in Jinja2.
#include <cmath>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

namespace {

bool intLike(const Value& v) {
  return v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool;
}
int64_t intOf(const Value& v) {
  return v.kind == Value::Kind::Bool ? v.b : v.i;
}

[[noreturn]] void badOperands(const std::string& op, const Value& a, const Value& b,
                              const Pos& pos) {
  if (a.isUndefined()) fail(pos, a.s);
  if (b.isUndefined()) fail(pos, b.s);
  fail(pos,
       "unsupported operand types for " + op + ": '" + typeName(a) + "' and '" + typeName(b) + "'");
}

// Python's ints do not overflow; this renderer's are 64-bit, so an overflow is an error.
// `v` by reference: read after the __builtin_*_overflow call beside it has written it.
int64_t checked(bool overflowed, const int64_t& v, const Pos& pos) {
  if (overflowed) fail(pos, "integer overflow (this renderer's integers are 64-bit)");
  return v;
}

Value repeat(const Value& seq, int64_t times, const Pos& pos) {
  const size_t unit = seq.kind == Value::Kind::String ? seq.s.size() : seq.list->size();
  if (times > 0 && unit > 0 && static_cast<uint64_t>(times) > (uint64_t{1} << 26) / unit)
    fail(pos, "a repeated string or list longer than 64 Mi items");
  if (seq.kind == Value::Kind::String) {
    std::string out;
    for (int64_t k = 0; k < times; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  List out;
  for (int64_t k = 0; k < times; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return Value::makeList(std::move(out), seq.tuple);
}

Value arithmetic(const std::string& op, const Value& a, const Value& b, const Pos& pos) {
  if (intLike(a) && intLike(b)) {
    const int64_t x = intOf(a), y = intOf(b);
    int64_t r = 0;
    if (op == "-") return Value::integer(checked(__builtin_sub_overflow(x, y, &r), r, pos));
    if (op == "*") return Value::integer(checked(__builtin_mul_overflow(x, y, &r), r, pos));
    if (op == "/") {
      if (y == 0) fail(pos, "division by zero");
      return Value::real(static_cast<double>(x) / static_cast<double>(y));
    }
    if (op == "//" || op == "%") {
      if (y == 0) fail(pos, "integer division or modulo by zero");
      if (y == -1) {  // x / -1 overflows for the smallest int64
        if (op == "%") return Value::integer(0);
        return Value::integer(checked(__builtin_sub_overflow(int64_t{0}, x, &r), r, pos));
      }
      int64_t q = x / y;
      r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value::integer(op == "//" ? q : r);
    }
    if (op == "**") {
      if (y < 0) return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t p = 1, base = x;  // by squaring, every product checked
      for (int64_t e = y; e > 0; e >>= 1) {
        if (e & 1) p = checked(__builtin_mul_overflow(p, base, &r), r, pos);
        if (e > 1) base = checked(__builtin_mul_overflow(base, base, &r), r, pos);
      }
      return Value::integer(p);
    }
  }
  const double x = a.number(), y = b.number();
  if (op == "-") return Value::real(x - y);
  if (op == "*") return Value::real(x * y);
  if (op == "**") return Value::real(std::pow(x, y));
  if (y == 0) fail(pos, "float division by zero");
  if (op == "/") return Value::real(x / y);
  const double q = std::floor(x / y);
  return Value::real(op == "//" ? q : x - q * y);
}

}  // namespace

Value binaryOp(const std::string& op, const Value& a, const Value& b, const Pos& pos) {
  if (a.isNumber() && b.isNumber()) {
    if (op == "+") {
      int64_t r = 0;
      if (intLike(a) && intLike(b))
        return Value::integer(checked(__builtin_add_overflow(intOf(a), intOf(b), &r), r, pos));
      return Value::real(a.number() + b.number());
    }
    return arithmetic(op, a, b, pos);
  }
  if (op == "+") {
    if (a.kind == Value::Kind::String && b.kind == Value::Kind::String)
      return Value::string(a.s + b.s);
    if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return Value::makeList(std::move(out), a.tuple);
    }
  }
  if (op == "*") {
    const bool seqA = a.kind == Value::Kind::String || a.kind == Value::Kind::List;
    const bool seqB = b.kind == Value::Kind::String || b.kind == Value::Kind::List;
    if (seqA && intLike(b)) return repeat(a, intOf(b), pos);
    if (seqB && intLike(a)) return repeat(b, intOf(a), pos);
  }
  if (op == "%" && a.kind == Value::Kind::String)
    fail(pos, "unsupported: printf-style string formatting with '%'");
  badOperands(op, a, b, pos);
}

bool compare(const std::string& op, const Value& a, const Value& b, const Pos& pos) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in" || op == "not in") {
    bool found = false;
    switch (b.kind) {
      case Value::Kind::Undefined:
        break;
      case Value::Kind::String:
        if (a.kind != Value::Kind::String)
          fail(pos, "'in <string>' requires a string on the left, not a " + typeName(a));
        found = b.s.find(a.s) != std::string::npos;
        break;
      case Value::Kind::List:
        for (const Value& x : *b.list) found = found || equal(a, x);
        break;
      case Value::Kind::Dict:
      case Value::Kind::Namespace:
        found = a.kind == Value::Kind::String && b.dict->find(a.s) != nullptr;
        break;
      default:
        fail(pos, "argument of type '" + typeName(b) + "' is not iterable");
    }
    return op == "in" ? found : !found;
  }
  int order = 0;  // <0, 0, >0
  if (a.isNumber() && b.isNumber()) {
    order = a.number() < b.number() ? -1 : a.number() > b.number() ? 1 : 0;
  } else if (a.kind == Value::Kind::String && b.kind == Value::Kind::String) {
    order = a.s.compare(b.s);  // UTF-8 byte order is code point order
  } else if (a.kind == Value::Kind::List && b.kind == Value::Kind::List) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n && order == 0; ++k) {
      if (equal((*a.list)[k], (*b.list)[k])) continue;
      order = compare("<", (*a.list)[k], (*b.list)[k], pos) ? -1 : 1;
    }
    if (order == 0) order = a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size();
  } else {
    if (a.isUndefined()) fail(pos, a.s);
    if (b.isUndefined()) fail(pos, b.s);
    fail(pos, "'" + op + "' not supported between a " + typeName(a) + " and a " + typeName(b));
  }
  if (op == "<") return order < 0;
  if (op == "<=") return order <= 0;
  if (op == ">") return order > 0;
  return order >= 0;
}

}  // namespace ts::engine::chat
