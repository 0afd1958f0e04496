// Builds the syntax tree from the lexer's pieces: statements by recursive descent over the
// pieces, expressions with Jinja2's precedence (conditional < or < and < not < comparisons <
// + - < ~ < * / // % < ** < unary < filters, tests, calls, attributes and subscripts).
// A statement or syntax this renderer does not run is an error naming it and its line:column.
#include <algorithm>
#include <set>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

namespace {

// Nesting deeper than this (expressions or statements) is refused rather than recursed into.
constexpr int kMaxDepth = 256;

class Parser {
 public:
  explicit Parser(const std::vector<Piece>& pieces) : pieces_(pieces) {}

  Body parseAll() {
    std::string ender;
    Body body = parseBody({}, ender, Pos{});
    return body;
  }

 private:
  // ---- statements ----
  // Pieces up to a statement named in `enders` (left with the cursor after its name).
  Body parseBody(const std::set<std::string>& enders, std::string& ender, const Pos& opened) {
    Body body;
    while (piece_ < pieces_.size()) {
      const Piece& p = pieces_[piece_++];
      if (p.type == Piece::Type::Text) {
        auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::Text, p.pos});
        s->text = p.text;
        body.push_back(std::move(s));
        continue;
      }
      toks_ = &p.tokens;
      t_ = 0;
      if (p.type == Piece::Type::Output) {
        auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::Output, p.pos});
        s->expr = parseExpr();
        expectEnd("{{ ... }}");
        body.push_back(std::move(s));
        continue;
      }
      if (peek().type != Token::Type::Name) fail(peek().pos, "a statement must start with a name");
      const std::string kw = next().text;
      if (enders.count(kw)) {
        ender = kw;
        return body;
      }
      body.push_back(statement(kw, p.pos));
    }
    if (!enders.empty())
      fail(opened,
           "the statement opened here is never closed (expected {% " + *enders.rbegin() + " %})");
    return body;
  }

  std::unique_ptr<Stmt> statement(const std::string& kw, const Pos& pos) {
    const DepthGuard guard(*this, pos);
    if (kw == "if") return ifStatement(pos);
    if (kw == "for") return forStatement(pos);
    if (kw == "set") return setStatement(pos);
    if (kw == "macro") return macroStatement(pos);
    if (kw == "break" || kw == "continue") {
      expectEnd("{% " + kw + " %}");
      return std::make_unique<Stmt>(
          Stmt{kw == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, pos});
    }
    if (kw == "generation") {  // transformers' assistant-mask marker: renders its body
      expectEnd("{% generation %}");
      auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::Block, pos});
      std::string ender;
      s->body = parseBody({"endgeneration"}, ender, pos);
      expectEnd("{% endgeneration %}");
      return s;
    }
    static const std::set<std::string> closers = {"endif", "endfor", "endset",       "endmacro",
                                                  "elif",  "else",   "endgeneration"};
    if (closers.count(kw)) fail(pos, "unexpected {% " + kw + " %} with nothing open to close");
    fail(pos, "unsupported statement {% " + kw +
                  " %} (this renderer runs if, for, set, macro, "
                  "break, continue and generation)");
  }

  std::unique_ptr<Stmt> ifStatement(const Pos& pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::If, pos});
    std::string ender = "elif";
    while (ender == "elif") {
      ExprPtr cond = parseExpr();
      expectEnd("{% if %}");
      Body body = parseBody({"elif", "else", "endif"}, ender, pos);
      s->branches.emplace_back(std::move(cond), std::move(body));
    }
    if (ender == "else") {
      expectEnd("{% else %}");
      s->elseBody = parseBody({"endif"}, ender, pos);
    }
    expectEnd("{% endif %}");
    return s;
  }

  std::unique_ptr<Stmt> forStatement(const Pos& pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::For, pos});
    s->targets = targetNames();
    if (!acceptName("in")) fail(peek().pos, "expected 'in' in {% for %}");
    s->expr = parseExpr(false);
    if (acceptName("if")) s->filter = parseExpr();
    if (peekName("recursive")) fail(peek().pos, "unsupported: recursive for loops");
    expectEnd("{% for %}");
    std::string ender;
    s->body = parseBody({"else", "endfor"}, ender, pos);
    if (ender == "else") {
      expectEnd("{% else %}");
      s->elseBody = parseBody({"endfor"}, ender, pos);
    }
    expectEnd("{% endfor %}");
    return s;
  }

  std::unique_ptr<Stmt> setStatement(const Pos& pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::Set, pos});
    if (peek().type == Token::Type::Name && peekOp(1, ".")) {
      s->kind = Stmt::Kind::SetAttr;
      s->text = next().text;
      next();
      if (peek().type != Token::Type::Name) fail(peek().pos, "expected an attribute name");
      s->attr = next().text;
    } else {
      s->targets = targetNames();
    }
    if (acceptOp("=")) {
      s->expr = parseExpr();
      expectEnd("{% set %}");
      return s;
    }
    if (s->kind != Stmt::Kind::Set || s->targets.size() != 1 || peek().type != Token::Type::End)
      fail(peek().pos, "expected '=' in {% set %} (block sets with filters are unsupported)");
    expectEnd("{% set %}");
    s->kind = Stmt::Kind::SetBlock;
    std::string ender;
    s->body = parseBody({"endset"}, ender, pos);
    expectEnd("{% endset %}");
    return s;
  }

  std::unique_ptr<Stmt> macroStatement(const Pos& pos) {
    auto s = std::make_unique<Stmt>(Stmt{Stmt::Kind::Macro, pos});
    if (peek().type != Token::Type::Name) fail(peek().pos, "expected the macro's name");
    s->text = next().text;
    expectOp("(");
    while (!acceptOp(")")) {
      if (!s->params.empty()) expectOp(",");
      if (peek().type != Token::Type::Name) fail(peek().pos, "expected a parameter name");
      std::string name = next().text;
      ExprPtr dflt;
      if (acceptOp("=")) dflt = parseExpr();
      s->params.emplace_back(std::move(name), std::move(dflt));
    }
    expectEnd("{% macro %}");
    std::string ender;
    s->body = parseBody({"endmacro"}, ender, pos);
    expectEnd("{% endmacro %}");
    return s;
  }

  std::vector<std::string> targetNames() {
    const bool paren = acceptOp("(");
    std::vector<std::string> names;
    do {
      if (peek().type != Token::Type::Name) fail(peek().pos, "expected a variable name");
      names.push_back(next().text);
    } while (acceptOp(","));
    if (paren) expectOp(")");
    return names;
  }

  // ---- expressions ----
  ExprPtr node(Expr::Kind kind, const Pos& pos) { return std::make_unique<Expr>(Expr{kind, pos}); }

  ExprPtr parseExpr(bool withCond = true) {
    ExprPtr e = parseOr();
    while (withCond && peekName("if")) {
      const Pos pos = next().pos;
      auto c = node(Expr::Kind::Cond, pos);
      c->args.push_back(parseOr());
      c->args.push_back(std::move(e));
      c->args.push_back(acceptName("else") ? parseExpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binaryChain(Expr::Kind kind, const char* word, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    while (peekName(word)) {
      auto n = node(kind, next().pos);
      n->args.push_back(std::move(e));
      n->args.push_back((this->*sub)());
      e = std::move(n);
    }
    return e;
  }
  ExprPtr parseOr() { return binaryChain(Expr::Kind::Or, "or", &Parser::parseAnd); }
  ExprPtr parseAnd() { return binaryChain(Expr::Kind::And, "and", &Parser::parseNot); }

  ExprPtr parseNot() {
    if (!peekName("not")) return parseCompare();
    auto n = node(Expr::Kind::Not, next().pos);
    n->args.push_back(parseNot());
    return n;
  }

  ExprPtr parseCompare() {
    ExprPtr first = parseMath1();
    ExprPtr cmp;
    static const std::set<std::string> ops = {"==", "!=", "<", "<=", ">", ">="};
    while (true) {
      std::string op;
      const Pos pos = peek().pos;
      if (peek().type == Token::Type::Op && ops.count(peek().text))
        op = next().text;
      else if (acceptName("in"))
        op = "in";
      else if (peekName("not") && peekName("in", 1)) {
        t_ += 2;
        op = "not in";
      } else
        break;
      if (!cmp) {
        cmp = node(Expr::Kind::Compare, pos);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr binaryOps(std::initializer_list<const char*> ops, ExprPtr (Parser::*sub)()) {
    ExprPtr e = (this->*sub)();
    while (peek().type == Token::Type::Op &&
           std::any_of(ops.begin(), ops.end(), [&](const char* o) { return peek().text == o; })) {
      auto n = node(Expr::Kind::Binary, peek().pos);
      n->name = next().text;
      n->args.push_back(std::move(e));
      n->args.push_back((this->*sub)());
      e = std::move(n);
    }
    return e;
  }
  ExprPtr parseMath1() { return binaryOps({"+", "-"}, &Parser::parseConcat); }
  ExprPtr parseMath2() { return binaryOps({"*", "/", "//", "%"}, &Parser::parsePow); }
  ExprPtr parsePow() { return binaryOps({"**"}, &Parser::parseUnaryFiltered); }
  ExprPtr parseUnaryFiltered() { return parseUnary(true); }

  ExprPtr parseConcat() {
    ExprPtr e = parseMath2();
    if (!peekOp(0, "~")) return e;
    auto n = node(Expr::Kind::Concat, peek().pos);
    n->args.push_back(std::move(e));
    while (acceptOp("~")) n->args.push_back(parseMath2());
    return n;
  }

  ExprPtr parseUnary(bool withFilter) {
    const DepthGuard guard(*this, peek().pos);
    ExprPtr e;
    if (peekOp(0, "-") || peekOp(0, "+")) {
      const Token& t = next();
      e = node(t.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, t.pos);
      e->args.push_back(parseUnary(false));
    } else {
      e = parsePrimary();
    }
    e = parsePostfix(std::move(e));
    if (withFilter) e = parseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr parsePrimary() {
    const Token& t = next();
    auto lit = [&](Value v) {
      auto n = node(Expr::Kind::Literal, t.pos);
      n->literal = std::move(v);
      return n;
    };
    switch (t.type) {
      case Token::Type::Name:
        if (t.text == "true" || t.text == "True") return lit(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return lit(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return lit(Value::none());
        {
          auto n = node(Expr::Kind::Name, t.pos);
          n->name = t.text;
          return n;
        }
      case Token::Type::String: {
        std::string s = t.text;
        while (peek().type == Token::Type::String) s += next().text;  // 'a' 'b' == 'ab'
        return lit(Value::string(std::move(s)));
      }
      case Token::Type::Int:
        return lit(Value::integer(t.i));
      case Token::Type::Float:
        return lit(Value::real(t.f));
      case Token::Type::End:
        fail(t.pos, "expected an expression before the end of the tag");
      case Token::Type::Op:
        break;
    }
    if (t.text == "(") return parseParens(t.pos);
    if (t.text == "[") {
      auto n = node(Expr::Kind::List, t.pos);
      while (!acceptOp("]")) {
        if (!n->args.empty()) expectOp(",");
        if (acceptOp("]")) break;
        n->args.push_back(parseExpr());
      }
      return n;
    }
    if (t.text == "{") {
      auto n = node(Expr::Kind::DictLit, t.pos);
      while (!acceptOp("}")) {
        if (!n->args.empty()) expectOp(",");
        if (acceptOp("}")) break;
        n->args.push_back(parseExpr());
        expectOp(":");
        n->args.push_back(parseExpr());
      }
      return n;
    }
    fail(t.pos, "unexpected '" + t.text + "' in an expression");
  }

  ExprPtr parseParens(const Pos& pos) {
    if (acceptOp(")")) return node(Expr::Kind::Tuple, pos);
    ExprPtr e = parseExpr();
    if (!peekOp(0, ",")) {
      expectOp(")");
      return e;
    }
    auto n = node(Expr::Kind::Tuple, pos);
    n->args.push_back(std::move(e));
    while (acceptOp(",")) {
      if (peekOp(0, ")")) break;
      n->args.push_back(parseExpr());
    }
    expectOp(")");
    return n;
  }

  ExprPtr parsePostfix(ExprPtr e) {
    while (true) {
      if (peekOp(0, ".")) {
        const Pos pos = next().pos;
        const Token& t = next();
        if (t.type == Token::Type::Name) {
          auto n = node(Expr::Kind::Attr, pos);
          n->name = t.text;
          n->args.push_back(std::move(e));
          e = std::move(n);
        } else if (t.type == Token::Type::Int) {
          auto n = node(Expr::Kind::Item, pos);
          n->args.push_back(std::move(e));
          auto k = node(Expr::Kind::Literal, t.pos);
          k->literal = Value::integer(t.i);
          n->args.push_back(std::move(k));
          e = std::move(n);
        } else {
          fail(t.pos, "expected an attribute name after '.'");
        }
      } else if (peekOp(0, "[")) {
        e = parseSubscript(std::move(e));
      } else if (peekOp(0, "(")) {
        e = parseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parseSubscript(ExprPtr base) {
    const Pos pos = next().pos;
    ExprPtr start, stop, step;
    if (!peekOp(0, ":")) start = parseExpr();
    if (!acceptOp(":")) {
      expectOp("]");
      auto n = node(Expr::Kind::Item, pos);
      n->args.push_back(std::move(base));
      n->args.push_back(std::move(start));
      return n;
    }
    if (!peekOp(0, ":") && !peekOp(0, "]")) stop = parseExpr();
    if (acceptOp(":") && !peekOp(0, "]")) step = parseExpr();
    expectOp("]");
    auto n = node(Expr::Kind::Slice, pos);
    n->args.push_back(std::move(base));
    n->args.push_back(std::move(start));
    n->args.push_back(std::move(stop));
    n->args.push_back(std::move(step));
    return n;
  }

  // `(args)` after `callee` (args[0]); filters and tests reuse it with their input.
  ExprPtr parseCall(ExprPtr callee, Expr::Kind kind = Expr::Kind::Call) {
    auto n = node(kind, callee->pos);  // errors point at what is called
    n->args.push_back(std::move(callee));
    readArgs(*n);
    return n;
  }

  void readArgs(Expr& n) {
    expectOp("(");
    bool first = true;
    while (!acceptOp(")")) {
      if (!first) expectOp(",");
      first = false;
      if (acceptOp(")")) return;
      if (peekOp(0, "*") || peekOp(0, "**"))
        fail(peek().pos, "unsupported: *args / **kwargs in a call");
      if (peek().type == Token::Type::Name && peekOp(1, "=")) {
        std::string name = next().text;
        next();
        n.kwargs.emplace_back(std::move(name), parseExpr());
      } else {
        n.args.push_back(parseExpr());
      }
    }
  }

  ExprPtr parseFilterExpr(ExprPtr e) {
    while (true) {
      if (peekOp(0, "|")) {
        next();
        if (peek().type != Token::Type::Name) fail(peek().pos, "expected a filter name after '|'");
        const Token& t = next();
        auto n = node(Expr::Kind::Filter, t.pos);
        n->name = t.text;
        n->args.push_back(std::move(e));
        if (peekOp(0, "(")) readArgs(*n);
        e = std::move(n);
      } else if (peekName("is")) {
        next();
        auto n = node(Expr::Kind::Test, peek().pos);
        n->negated = acceptName("not");
        if (peek().type != Token::Type::Name) fail(peek().pos, "expected a test name after 'is'");
        n->name = next().text;
        n->args.push_back(std::move(e));
        if (peekOp(0, "(")) {
          readArgs(*n);
        } else if (startsPrimary()) {
          n->args.push_back(parsePostfix(parsePrimary()));
        }
        e = std::move(n);
      } else if (peekOp(0, "(")) {
        e = parseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  // A test's bare argument (`x is divisibleby 3`), as Jinja2 decides it.
  bool startsPrimary() const {
    const Token& t = peek();
    if (t.type == Token::Type::Name) return t.text != "else" && t.text != "or" && t.text != "and";
    if (t.type == Token::Type::String || t.type == Token::Type::Int || t.type == Token::Type::Float)
      return true;
    return t.type == Token::Type::Op && (t.text == "[" || t.text == "{");
  }

  // ---- tokens ----
  const Token& peek(size_t ahead = 0) const {
    const size_t k = std::min(t_ + ahead, toks_->size() - 1);
    return (*toks_)[k];
  }
  const Token& next() {
    const Token& t = peek();
    if (t.type != Token::Type::End) ++t_;
    return t;
  }
  bool peekName(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == Token::Type::Name && peek(ahead).text == name;
  }
  bool peekOp(size_t ahead, const char* op) const {
    return peek(ahead).type == Token::Type::Op && peek(ahead).text == op;
  }
  bool acceptName(const char* name) {
    if (!peekName(name)) return false;
    next();
    return true;
  }
  bool acceptOp(const char* op) {
    if (!peekOp(0, op)) return false;
    next();
    return true;
  }
  void expectOp(const char* op) {
    if (!acceptOp(op)) fail(peek().pos, std::string("expected '") + op + "'" + found());
  }
  void expectEnd(const std::string& what) {
    if (peek().type != Token::Type::End)
      fail(peek().pos, "unexpected '" + peek().text + "' in " + what);
  }
  std::string found() const {
    return peek().type == Token::Type::End ? " before the end of the tag"
                                           : ", found '" + peek().text + "'";
  }

  struct DepthGuard {
    Parser& p;
    DepthGuard(Parser& parser, const Pos& pos) : p(parser) {
      if (++p.depth_ > kMaxDepth) fail(pos, "the template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };

  const std::vector<Piece>& pieces_;
  int depth_ = 0;
  size_t piece_ = 0;
  const std::vector<Token>* toks_ = nullptr;
  size_t t_ = 0;
};

}  // namespace

Body parse(const std::vector<Piece>& pieces) {
  return Parser(pieces).parseAll();
}

}  // namespace ts::engine::chat
