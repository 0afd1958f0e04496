// Splits a template into text, {{ output }} and {% statement %} pieces (comments dropped) with
// Jinja2's whitespace rules as transformers configures them: newlines normalized to \n and one
// trailing newline dropped; `-` strips all whitespace on its side; trim_blocks drops the newline
// right after a statement or comment; lstrip_blocks drops the spaces and tabs before a statement
// or comment that starts its line (unless `{%+`). The tags' insides become tokens.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ChatTemplateInternal.h"

namespace ts::engine::chat {

namespace {

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {
    for (size_t k = 0; k < src_.size(); ++k)
      if (src_[k] == '\n') lineStarts_.push_back(k + 1);
  }

  std::vector<Piece> run() {
    size_t i = 0;
    bool stripNext = false, trimNewline = false, lineStarting = true;
    while (i <= src_.size()) {
      size_t j = findTag(i);
      std::string text = src_.substr(i, j - i);
      if (stripNext)
        text.erase(0, std::find_if_not(text.begin(), text.end(), isSpace) - text.begin());
      else if (trimNewline && !text.empty() && text[0] == '\n')
        text.erase(0, 1);
      if (j == src_.size()) {
        addText(std::move(text), i);
        break;
      }
      const char kind = src_[j + 1];
      const char mod = j + 2 < src_.size() ? src_[j + 2] : '\0';
      if (mod == '-') {
        text.erase(std::find_if_not(text.rbegin(), text.rend(), isSpace).base(), text.end());
      } else if (kind != '{' && mod != '+') {
        lstrip(text, lineStarting);
      }
      addText(std::move(text), i);
      size_t k = j + 2 + (mod == '-' || mod == '+' ? 1 : 0);
      char endMod = '\0';
      if (kind == '#') {
        const size_t e = src_.find("#}", k);
        if (e == std::string::npos) fail(posAt(j), "comment {# is never closed with #}");
        if (e > k && (src_[e - 1] == '-' || src_[e - 1] == '+')) endMod = src_[e - 1];
        i = e + 2;
      } else {
        Piece p{kind == '{' ? Piece::Type::Output : Piece::Type::Statement, {}, {}, posAt(j)};
        i = tokens(k, kind == '{' ? '}' : '%', p.tokens, endMod);
        pieces_.push_back(std::move(p));
      }
      // What follows the tag: `-` strips it; trim_blocks drops one newline after %} and #}.
      stripNext = endMod == '-';
      trimNewline = !stripNext && kind != '{' && endMod != '+';
      lineStarting = false;
      if (stripNext) {
        size_t e = i;
        while (e < src_.size() && isSpace(src_[e])) ++e;
        lineStarting = e > i && src_[e - 1] == '\n';
      } else if (trimNewline) {
        lineStarting = i < src_.size() && src_[i] == '\n';
      }
    }
    return std::move(pieces_);
  }

 private:
  size_t findTag(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#'))
        return k;
    return src_.size();
  }

  // lstrip_blocks: spaces before a statement at the start of its line go.
  static void lstrip(std::string& text, bool lineStarting) {
    const size_t nl = text.rfind('\n');
    const size_t start = nl == std::string::npos ? 0 : nl + 1;
    if (nl == std::string::npos && !lineStarting) return;
    if (start < text.size() &&
        std::all_of(text.begin() + static_cast<std::ptrdiff_t>(start), text.end(), isSpace))
      text.erase(start);
  }

  void addText(std::string text, size_t at) {
    if (!text.empty()) pieces_.push_back(Piece{Piece::Type::Text, std::move(text), {}, posAt(at)});
  }

  Pos posAt(size_t index) const {
    const auto it = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), index);
    const size_t line = static_cast<size_t>(it - lineStarts_.begin());
    return Pos{static_cast<int>(line), static_cast<int>(index - lineStarts_[line - 1] + 1)};
  }

  // Tokens up to the closing `}}` / `%}` (brackets balanced); returns the index after it.
  size_t tokens(size_t k, char close, std::vector<Token>& out, char& endMod) {
    int depth = 0;
    while (true) {
      while (k < src_.size() && isSpace(src_[k])) ++k;
      if (k >= src_.size()) fail(posAt(k), std::string("tag is never closed with ") + close + "}");
      const char c = src_[k];
      if (depth == 0) {
        if ((c == '-' || c == '+') && k + 2 < src_.size() + 0 && src_[k + 1] == close &&
            src_[k + 2] == '}') {
          endMod = c;
          out.push_back(Token{Token::Type::End, {}, 0, 0, posAt(k)});
          return k + 3;
        }
        if (c == close && k + 1 < src_.size() && src_[k + 1] == '}') {
          out.push_back(Token{Token::Type::End, {}, 0, 0, posAt(k)});
          return k + 2;
        }
      }
      Token t{Token::Type::Op, {}, 0, 0, posAt(k)};
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = k;
        while (e < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
          ++e;
        t.type = Token::Type::Name;
        t.text = src_.substr(k, e - k);
        k = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        k = number(k, t);
      } else if (c == '\'' || c == '"') {
        k = string(k, t);
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                    "/",  "%",  "~",  "(",  ")",  "[",  "]", "{", "}",
                                    ",",  ".",  ":",  "|",  "=",  "<",  ">"};
        const char* op = nullptr;
        for (const char* o : ops)
          if (src_.compare(k, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (!op) fail(t.pos, std::string("unexpected character '") + c + "' in a tag");
        t.text = op;
        k += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
      }
      out.push_back(std::move(t));
    }
  }

  size_t number(size_t k, Token& t) {
    size_t e = k;
    auto digits = [&] {
      while (e < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_'))
        ++e;
    };
    digits();
    bool isFloat = false;
    if (e + 1 < src_.size() && src_[e] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      isFloat = true;
      ++e;
      digits();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && std::isdigit(static_cast<unsigned char>(src_[x]))) {
        isFloat = true;
        e = x;
        digits();
      }
    }
    std::string text = src_.substr(k, e - k);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    if (isFloat) {
      t.type = Token::Type::Float;
      t.f = std::strtod(text.c_str(), nullptr);  // as Python's float(): 1e999 is inf
    } else {
      t.type = Token::Type::Int;
      try {
        t.i = std::stoll(text);
      } catch (const std::out_of_range&) {
        fail(t.pos, "integer literal " + text + " is too large");
      }
    }
    return e;
  }

  static void appendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // A Python string literal (Jinja decodes escapes as Python's unicode-escape does).
  size_t string(size_t k, Token& t) {
    const char q = src_[k];
    t.type = Token::Type::String;
    size_t e = k + 1;
    while (true) {
      if (e >= src_.size()) fail(t.pos, "string literal is never closed");
      const char c = src_[e];
      if (c == q) return e + 1;
      if (c != '\\' || e + 1 >= src_.size()) {
        t.text += c;
        ++e;
        continue;
      }
      const char n = src_[e + 1];
      e += 2;
      switch (n) {
        case 'n':
          t.text += '\n';
          break;
        case 't':
          t.text += '\t';
          break;
        case 'r':
          t.text += '\r';
          break;
        case 'b':
          t.text += '\b';
          break;
        case 'f':
          t.text += '\f';
          break;
        case 'v':
          t.text += '\v';
          break;
        case 'a':
          t.text += '\a';
          break;
        case '0':
          t.text += '\0';
          break;
        case '\\':
          t.text += '\\';
          break;
        case '\'':
          t.text += '\'';
          break;
        case '"':
          t.text += '"';
          break;
        case '\n':
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = n == 'x' ? 2 : n == 'u' ? 4 : 8;
          const std::string hex = src_.substr(e, len);
          if (hex.size() != len || !std::all_of(hex.begin(), hex.end(), [](char c) {
                return std::isxdigit(static_cast<unsigned char>(c)) != 0;
              }))
            fail(posAt(e - 2), std::string("bad \\") + n + " escape in a string literal");
          const auto cp = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
          if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            fail(posAt(e - 2), "escape \\" + std::string(1, n) + hex +
                                   " is not a Unicode character UTF-8 can hold");
          appendUtf8(t.text, cp);
          e += len;
          break;
        }
        default:
          t.text += '\\';
          t.text += n;  // Python keeps unknown escapes
      }
    }
  }

  std::string src_;
  std::vector<size_t> lineStarts_{0};
  std::vector<Piece> pieces_;
};

// Jinja2 reads every \r\n and \r as \n and drops one trailing newline (keep_trailing_newline).
std::string normalize(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      s += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      s += source[k];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

std::vector<Piece> lex(const std::string& source) {
  return Lexer(normalize(source)).run();
}

}  // namespace ts::engine::chat
