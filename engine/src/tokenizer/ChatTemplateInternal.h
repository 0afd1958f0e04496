#pragma once
// The chat-template renderer's parts (ChatTemplate.h): values with Python's semantics, the
// lexer, the syntax tree, the parser, the evaluator and the built-in filters, tests, methods
// and functions. Internal to the engine.
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/engine/tokenizer/ChatTemplate.h"

namespace ts::engine::chat {

struct Pos {
  int line = 1, column = 1;
};

// A renderer error before the template's name is known; ChatTemplate wraps it.
struct Fault {
  std::string message;
  Pos pos;
  bool raised = false;  // the template's raise_exception
};
[[noreturn]] void fail(const Pos& pos, const std::string& message);

struct Value;
using List = std::vector<Value>;
struct Args;
using Native = std::function<Value(Args&)>;

// Insertion-ordered string-keyed map, like a Python dict built from JSON.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };
  Kind kind = Kind::Undefined;
  bool b = false;
  bool tuple = false;  // a List printed as a Python tuple ((a, b), from items())
  int64_t i = 0;
  double f = 0;
  std::string s;  // String; for Undefined, what was undefined (for errors)
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;  // Dict and Namespace (shared: set ns.x changes every copy)
  std::shared_ptr<Native> fn;

  static Value of(Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
  static Value undefined(std::string what) {
    Value v;
    v.s = std::move(what);
    return v;
  }
  static Value none() { return of(Kind::None); }
  static Value boolean(bool x) {
    Value v = of(Kind::Bool);
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v = of(Kind::Int);
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v = of(Kind::Float);
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v = of(Kind::String);
    v.s = std::move(x);
    return v;
  }
  static Value makeList(List items, bool tuple = false);
  static Value makeDict(Dict d = {});
  static Value makeNamespace(Dict d = {});
  static Value callable(Native f);

  bool isUndefined() const { return kind == Kind::Undefined; }
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool isMapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  double number() const {
    return kind == Kind::Float ? f : static_cast<double>(kind == Kind::Bool ? b : i);
  }
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
  Pos pos;
  std::string what;  // "filter 'join'", for errors
  // The i-th positional or the named argument, else `fallback`; errors on extra arguments are
  // checked by done().
  Value get(size_t index, const char* name, Value fallback = Value::undefined("")) const;
  void expectAtMost(size_t count, std::initializer_list<const char*> names) const;
};

// Python semantics.
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
std::string toStr(const Value& v);   // str(v); Undefined -> ""
std::string toRepr(const Value& v);  // repr(v)
std::string typeName(const Value& v);
std::string formatFloat(double v);  // repr(float)
// json.dumps(v, ensure_ascii=False, indent=indent (< 0: none), sort_keys=sortKeys).
std::string toJson(const Value& v, int indent, bool sortKeys, const std::string& itemSep,
                   const std::string& keySep, const Pos& pos);
Value fromJson(const nlohmann::ordered_json& j);
// Items of a for loop / list(): a list's items, a dict's keys, a string's characters.
List iterate(const Value& v, const Pos& pos);
int64_t length(const Value& v, const Pos& pos);

// UTF-8 as code points, for Python's str indexing, slicing and whitespace.
std::vector<std::string> codePoints(std::string_view s);
bool isPyWhitespace(uint32_t cp);
std::string stripChars(const std::string& s, const Value& chars, bool left, bool right);
std::string asciiCase(std::string s, bool upper);  // str.upper()/lower() on ASCII letters
// str.replace(from, to, count) (count < 0: all).
std::string replaceAll(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count);

// ---- lexer ----
struct Token {
  enum class Type { Name, String, Int, Float, Op, End };
  Type type;
  std::string text;  // Name, Op; decoded String
  int64_t i = 0;
  double f = 0;
  Pos pos;
};
struct Piece {
  enum class Type { Text, Output, Statement };
  Type type;
  std::string text;           // Text
  std::vector<Token> tokens;  // Output, Statement (ending in an End token)
  Pos pos;
};
std::vector<Piece> lex(const std::string& source);

// ---- syntax tree ----
struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
struct Expr {
  enum class Kind {
    Literal,
    Name,
    List,
    Tuple,
    DictLit,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Neg,
    Pos,
    Binary,
    Concat,
    Compare,
    And,
    Or,
    Not,
    Cond
  };
  Expr(Kind k, Pos p) : kind(k), pos(p) {}
  Kind kind;
  Pos pos;
  Value literal;
  std::string name;           // Name, Attr, Filter, Test, Binary op
  std::vector<ExprPtr> args;  // operands / items / call args (Slice: start, stop, step)
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare
  bool negated = false;          // Test: is not
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;
struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetAttr, SetBlock, Macro, Break, Continue, Block };
  Stmt(Kind k, Pos p) : kind(k), pos(p) {}
  Kind kind;
  Pos pos;
  std::string text;                                // Text; SetAttr: the namespace; Macro: its name
  std::string attr;                                // SetAttr
  std::vector<std::string> targets;                // For, Set, SetBlock
  ExprPtr expr;                                    // Output, For (iterable), Set, SetAttr
  ExprPtr filter;                                  // For: `if cond`
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (cond, body)...
  Body body, elseBody;                             // For, SetBlock, Macro, Block; If/For else
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro (default may be null)
};

Body parse(const std::vector<Piece>& pieces);

// ---- built-ins (ChatTemplateBuiltins.cpp) ----
class Evaluator;
Value applyFilter(Evaluator& ev, const std::string& name, const Value& input, Args& args);
bool applyTest(const std::string& name, const Value& input, Args& args);
// A bound method (`'x'.strip`), or Undefined when `base` has no such attribute.
Value method(const Value& base, const std::string& name, const Pos& pos);
void addGlobals(Dict& globals, std::function<std::tm()> clock);

// ---- evaluator (ChatTemplateEval.cpp) ----
class Evaluator {
 public:
  Evaluator(const Dict& context, const Dict& globals) : context_(context), globals_(globals) {}
  std::string run(const Body& body);
  Value eval(const Expr& e);
  Value callValue(const Value& f, Args& args);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, std::string& out);
  Flow execStmt(const Stmt& s, std::string& out);
  Flow execFor(const Stmt& s, std::string& out);
  void tick(const Pos& pos);
  void execIf(const Stmt& s, std::string& out, Flow& flow);
  void defineMacro(const Stmt& s);
  void assign(const std::vector<std::string>& targets, const Value& v, const Pos& pos);
  Value lookup(const std::string& name) const;
  Value evalOperator(const Expr& e);
  Value evalCompare(const Expr& e);
  Value evalCall(const Expr& e);
  Value getAttr(const Value& base, const std::string& name, const Pos& pos);
  Value getItem(const Value& base, const Value& key, const Pos& pos);
  Value slice(const Value& base, const Expr& e);
  Args evalArgs(const Expr& e, size_t from);

  const Dict& context_;
  const Dict& globals_;
  std::vector<Dict> frames_;
  int64_t steps_ = 0;
};

Value binaryOp(const std::string& op, const Value& a, const Value& b, const Pos& pos);
bool compare(const std::string& op, const Value& a, const Value& b, const Pos& pos);

}  // namespace ts::engine::chat
