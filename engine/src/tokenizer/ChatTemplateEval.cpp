// Runs the syntax tree. Scopes follow Jinja2: a for loop's body gets a fresh scope each
// iteration (a `set` inside never leaks out, hence namespace()), if has none, a macro call gets
// its own. Names resolve innermost scope first, then the render's variables, then the globals.
#include <algorithm>
#include <climits>
#include <cmath>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

namespace {

struct FrameGuard {
  std::vector<Dict>& frames;
  explicit FrameGuard(std::vector<Dict>& f) : frames(f) { frames.emplace_back(); }
  ~FrameGuard() { frames.pop_back(); }
};

int64_t asIndex(const Value& v, const Pos& pos, const char* what) {
  if (v.kind == Value::Kind::Int) return v.i;
  if (v.kind == Value::Kind::Bool) return v.b;
  fail(pos, std::string(what) + " must be an integer, not a " + typeName(v));
}

// Python's slice(start, stop, step).indices(n), as the positions it visits.
std::vector<size_t> sliceIndices(int64_t n, const Value& a, const Value& b, const Value& c,
                                 const Pos& pos) {
  auto given = [](const Value& v) { return !v.isUndefined() && v.kind != Value::Kind::None; };
  const int64_t step = given(c) ? asIndex(c, pos, "a slice step") : 1;
  if (step == 0) fail(pos, "slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t x = asIndex(v, pos, "a slice index");
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  const int64_t start = clamp(a, step > 0 ? 0 : n - 1);
  const int64_t stop = clamp(b, step > 0 ? n : -1);
  std::vector<size_t> out;
  for (__int128 k = start; step > 0 ? k < stop : k > stop; k += step)  // no overflow
    out.push_back(static_cast<size_t>(k));
  return out;
}

}  // namespace

std::string Evaluator::run(const Body& body) {
  frames_.assign(1, Dict{});
  std::string out;
  const Flow flow = exec(body, out);
  if (flow != Flow::Normal) fail(Pos{}, "{% break %} or {% continue %} outside a for loop");
  return out;
}

Evaluator::Flow Evaluator::exec(const Body& body, std::string& out) {
  for (const auto& s : body) {
    const Flow flow = execStmt(*s, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

// A chat template renders a conversation in thousands of steps; a runaway loop is an error.
void Evaluator::tick(const Pos& pos) {
  if (++steps_ > 2'000'000) fail(pos, "the template runs too long (2 million steps)");
}

Evaluator::Flow Evaluator::execStmt(const Stmt& s, std::string& out) {
  tick(s.pos);
  if (out.size() > (size_t{1} << 28)) fail(s.pos, "the template's output passed 256 MiB");
  switch (s.kind) {
    case Stmt::Kind::Text:
      out += s.text;
      return Flow::Normal;
    case Stmt::Kind::Output:
      out += toStr(eval(*s.expr));
      return Flow::Normal;
    case Stmt::Kind::If: {
      Flow flow = Flow::Normal;
      execIf(s, out, flow);
      return flow;
    }
    case Stmt::Kind::For:
      return execFor(s, out);
    case Stmt::Kind::Set:
      assign(s.targets, eval(*s.expr), s.pos);
      return Flow::Normal;
    case Stmt::Kind::SetAttr: {
      const Value ns = lookup(s.text);
      if (ns.kind != Value::Kind::Namespace)
        fail(s.pos, "cannot assign attribute on non-namespace object '" + s.text + "' (a " +
                        typeName(ns) + ")");
      ns.dict->set(s.attr, eval(*s.expr));
      return Flow::Normal;
    }
    case Stmt::Kind::SetBlock: {
      std::string text;
      if (exec(s.body, text) != Flow::Normal) fail(s.pos, "{% break %} inside {% set %}");
      assign(s.targets, Value::string(std::move(text)), s.pos);
      return Flow::Normal;
    }
    case Stmt::Kind::Macro:
      defineMacro(s);
      return Flow::Normal;
    case Stmt::Kind::Break:
      return Flow::Break;
    case Stmt::Kind::Continue:
      return Flow::Continue;
    case Stmt::Kind::Block:
      return exec(s.body, out);
  }
  return Flow::Normal;
}

void Evaluator::execIf(const Stmt& s, std::string& out, Flow& flow) {
  for (const auto& [cond, body] : s.branches)
    if (truthy(eval(*cond))) {
      flow = exec(body, out);
      return;
    }
  flow = exec(s.elseBody, out);
}

Evaluator::Flow Evaluator::execFor(const Stmt& s, std::string& out) {
  List items = iterate(eval(*s.expr), s.expr->pos);
  if (s.filter) {
    List kept;
    for (const Value& item : items) {
      FrameGuard frame(frames_);
      assign(s.targets, item, s.pos);
      if (truthy(eval(*s.filter))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) return exec(s.elseBody, out);
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < n; ++k) {
    tick(s.pos);
    FrameGuard frame(frames_);
    assign(s.targets, items[k], s.pos);
    Dict loop;
    loop.set("index", Value::integer(k + 1));
    loop.set("index0", Value::integer(k));
    loop.set("revindex", Value::integer(n - k));
    loop.set("revindex0", Value::integer(n - k - 1));
    loop.set("first", Value::boolean(k == 0));
    loop.set("last", Value::boolean(k == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("previtem", k > 0 ? items[k - 1] : Value::undefined("'loop.previtem' is undefined"));
    loop.set("nextitem",
             k + 1 < n ? items[k + 1] : Value::undefined("'loop.nextitem' is undefined"));
    loop.set("cycle", Value::callable([k](Args& a) {
               if (a.positional.empty()) fail(a.pos, "loop.cycle() needs at least one value");
               return a.positional[static_cast<size_t>(k) % a.positional.size()];
             }));
    frames_.back().set("loop", Value::makeDict(std::move(loop)));
    const Flow flow = exec(s.body, out);
    if (flow == Flow::Break) break;
  }
  return Flow::Normal;
}

void Evaluator::defineMacro(const Stmt& s) {
  const Stmt* macro = &s;
  assign({s.text}, Value::callable([this, macro](Args& a) {
           if (frames_.size() > 512) fail(a.pos, "macro calls nest too deeply");
           FrameGuard frame(frames_);
           const auto& params = macro->params;
           if (a.positional.size() > params.size())
             fail(a.pos, "macro '" + macro->text + "' takes " + std::to_string(params.size()) +
                             " arguments, got " + std::to_string(a.positional.size()));
           for (const auto& named : a.named) {
             const auto& k = named.first;  // (clang 14 cannot capture a structured binding)
             if (std::none_of(params.begin(), params.end(), [&](auto& p) { return p.first == k; }))
               fail(a.pos, "macro '" + macro->text + "' has no parameter '" + k + "'");
           }
           for (size_t i = 0; i < params.size(); ++i) {
             Value v = a.get(i, params[i].first.c_str());
             if (v.isUndefined() && params[i].second) v = eval(*params[i].second);
             if (v.isUndefined()) v = Value::undefined("'" + params[i].first + "' is undefined");
             frames_.back().set(params[i].first, std::move(v));
           }
           std::string text;
           if (exec(macro->body, text) != Flow::Normal)
             fail(macro->pos, "{% break %} outside a loop in macro '" + macro->text + "'");
           return Value::string(std::move(text));
         }),
         s.pos);
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& v, const Pos& pos) {
  if (targets.size() == 1) {
    frames_.back().set(targets[0], v);
    return;
  }
  const List items = iterate(v, pos);
  if (items.size() != targets.size())
    fail(pos, "cannot unpack " + std::to_string(items.size()) + " values into " +
                  std::to_string(targets.size()) + " names");
  for (size_t k = 0; k < targets.size(); ++k) frames_.back().set(targets[k], items[k]);
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto it = frames_.rbegin(); it != frames_.rend(); ++it)
    if (const Value* v = it->find(name)) return *v;
  if (const Value* v = context_.find(name)) return *v;
  if (const Value* v = globals_.find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

Value Evaluator::eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Literal:
      return e.literal;
    case Expr::Kind::Name:
      return lookup(e.name);
    case Expr::Kind::List:
    case Expr::Kind::Tuple: {
      List items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return Value::makeList(std::move(items), e.kind == Expr::Kind::Tuple);
    }
    case Expr::Kind::DictLit: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        const Value key = eval(*e.args[k]);
        if (key.kind != Value::Kind::String)
          fail(e.args[k]->pos,
               "unsupported: a dict key that is not a string (a " + typeName(key) + ")");
        d.set(key.s, eval(*e.args[k + 1]));
      }
      return Value::makeDict(std::move(d));
    }
    case Expr::Kind::Attr:
      return getAttr(eval(*e.args[0]), e.name, e.pos);
    case Expr::Kind::Item:
      return getItem(eval(*e.args[0]), eval(*e.args[1]), e.pos);
    case Expr::Kind::Slice:
      return slice(eval(*e.args[0]), e);
    case Expr::Kind::Call:
      return evalCall(e);
    case Expr::Kind::Filter: {
      const Value input = eval(*e.args[0]);
      Args args = evalArgs(e, 1);
      args.what = "filter '" + e.name + "'";
      return applyFilter(*this, e.name, input, args);
    }
    case Expr::Kind::Test: {
      const Value input = eval(*e.args[0]);
      Args args = evalArgs(e, 1);
      args.what = "test '" + e.name + "'";
      return Value::boolean(applyTest(e.name, input, args) != e.negated);
    }
    case Expr::Kind::Concat: {
      std::string s;
      for (const auto& a : e.args) s += toStr(eval(*a));
      return Value::string(std::move(s));
    }
    case Expr::Kind::And: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    case Expr::Kind::Or: {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    case Expr::Kind::Not:
      return Value::boolean(!truthy(eval(*e.args[0])));
    case Expr::Kind::Cond:
      if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the conditional's missing else");
    case Expr::Kind::Compare:
      return evalCompare(e);
    default:
      return evalOperator(e);
  }
}

Value Evaluator::evalOperator(const Expr& e) {
  if (e.kind == Expr::Kind::Binary)
    return binaryOp(e.name, eval(*e.args[0]), eval(*e.args[1]), e.pos);
  const Value v = eval(*e.args[0]);
  if (v.isUndefined()) fail(e.pos, v.s);
  if (!v.isNumber())
    fail(e.pos, "bad operand type for unary " + std::string(e.kind == Expr::Kind::Neg ? "-" : "+") +
                    ": a " + typeName(v));
  if (e.kind == Expr::Kind::Pos) return v;
  if (v.kind == Value::Kind::Float) return Value::real(-v.f);
  const int64_t x = v.kind == Value::Kind::Bool ? v.b : v.i;
  if (x == INT64_MIN) fail(e.pos, "integer overflow (this renderer's integers are 64-bit)");
  return Value::integer(-x);
}

Value Evaluator::evalCompare(const Expr& e) {
  Value left = eval(*e.args[0]);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    Value right = eval(*e.args[k + 1]);
    if (!compare(e.ops[k], left, right, e.pos)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Args Evaluator::evalArgs(const Expr& e, size_t from) {
  Args a;
  a.pos = e.pos;
  for (size_t k = from; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
  for (const auto& [name, x] : e.kwargs) a.named.emplace_back(name, eval(*x));
  return a;
}

Value Evaluator::evalCall(const Expr& e) {
  const Value f = eval(*e.args[0]);
  Args args = evalArgs(e, 1);
  const Expr& callee = *e.args[0];
  args.what = callee.kind == Expr::Kind::Name   ? callee.name + "()"
              : callee.kind == Expr::Kind::Attr ? "." + callee.name + "()"
                                                : "the call";
  if (f.kind != Value::Kind::Callable) {
    if (f.isUndefined())
      fail(e.pos, "cannot call " + args.what + ": " + f.s +
                      (callee.kind == Expr::Kind::Attr ? " in this renderer" : ""));
    fail(e.pos, "cannot call " + args.what + ": a " + typeName(f) + " is not callable");
  }
  return callValue(f, args);
}

Value Evaluator::callValue(const Value& f, Args& args) {
  return (*f.fn)(args);
}

Value Evaluator::getAttr(const Value& base, const std::string& name, const Pos& pos) {
  switch (base.kind) {
    case Value::Kind::Undefined:
      fail(pos, base.s + " (reading its attribute '" + name + "')");
    case Value::Kind::Namespace:
      if (const Value* v = base.dict->find(name)) return *v;
      return Value::undefined("'namespace' has no attribute '" + name + "'");
    case Value::Kind::Dict: {
      Value m = method(base, name, pos);
      if (!m.isUndefined()) return m;
      if (const Value* v = base.dict->find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    default: {
      Value m = method(base, name, pos);
      if (!m.isUndefined()) return m;
      return Value::undefined("a " + typeName(base) + " has no attribute or method '" + name + "'");
    }
  }
}

Value Evaluator::getItem(const Value& base, const Value& key, const Pos& pos) {
  switch (base.kind) {
    case Value::Kind::Undefined:
      fail(pos, base.s + " (reading an item of it)");
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      if (key.kind == Value::Kind::String) {
        if (const Value* v = base.dict->find(key.s)) return *v;
        return Value::undefined("'dict object' has no attribute '" + key.s + "'");
      }
      return Value::undefined("'dict object' has no item " + toRepr(key));
    case Value::Kind::List:
    case Value::Kind::String: {
      if (key.kind != Value::Kind::Int && key.kind != Value::Kind::Bool)
        return Value::undefined("a " + typeName(base) + " has no item " + toRepr(key));
      const bool isList = base.kind == Value::Kind::List;
      const std::vector<std::string> cps = isList ? std::vector<std::string>{} : codePoints(base.s);
      const auto n = static_cast<int64_t>(isList ? base.list->size() : cps.size());
      int64_t k = asIndex(key, pos, "an index");
      if (k < 0) k += n;
      if (k < 0 || k >= n)
        return Value::undefined("index " + toRepr(key) + " is out of range of a " + typeName(base));
      return isList ? (*base.list)[static_cast<size_t>(k)]
                    : Value::string(cps[static_cast<size_t>(k)]);
    }
    default:
      return Value::undefined("a " + typeName(base) + " has no items");
  }
}

Value Evaluator::slice(const Value& base, const Expr& e) {
  const Value a = e.args[1] ? eval(*e.args[1]) : Value::none();
  const Value b = e.args[2] ? eval(*e.args[2]) : Value::none();
  const Value c = e.args[3] ? eval(*e.args[3]) : Value::none();
  if (base.kind == Value::Kind::List) {
    List out;
    for (size_t k : sliceIndices(static_cast<int64_t>(base.list->size()), a, b, c, e.pos))
      out.push_back((*base.list)[k]);
    return Value::makeList(std::move(out), base.tuple);
  }
  if (base.kind == Value::Kind::String) {
    const std::vector<std::string> cps = codePoints(base.s);
    std::string out;
    for (size_t k : sliceIndices(static_cast<int64_t>(cps.size()), a, b, c, e.pos)) out += cps[k];
    return Value::string(std::move(out));
  }
  if (base.isUndefined()) fail(e.pos, base.s + " (slicing it)");
  fail(e.pos, "a " + typeName(base) + " cannot be sliced");
}

}  // namespace ts::engine::chat
