// Run config entry points: parse a text or a document, load a file (with `--set` overrides).
// The schema is ConfigSchema.cpp, the cross-field rules ConfigRules.cpp, the overrides
// ConfigOverrides.cpp.
#include "trainscope/core/config/Config.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "ConfigInternal.h"

namespace ts::core {
namespace {

using config::valueText;
using nlohmann::json;

// nlohmann reports the 1-based offset of the last byte it read, i.e. the END of the offending
// token; users look for its start, so step back over a string or literal token.
void lineColumn(const std::string& text, size_t byte, size_t& line, size_t& col) {
  size_t end = std::min(byte, text.size());
  if (end > 0) --end;  // 0-based index of the last byte read
  if (end < text.size()) {
    auto literal = [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '+';
    };
    if (text[end] == '"' && end > 0) {
      size_t i = end;
      while (i > 0) {
        --i;
        if (text[i] == '\n') break;
        if (text[i] == '"' && (i == 0 || text[i - 1] != '\\')) {
          end = i;
          break;
        }
      }
    } else if (literal(text[end])) {
      while (end > 0 && literal(text[end - 1])) --end;
    }
  }
  line = 1;
  col = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
}

}  // namespace

std::string ConfigIssue::toString() const {
  if (path.empty()) return value.empty() ? message : message + " (got " + value + ")";
  std::string out = path;
  if (!value.empty()) out += " = " + value;
  out += ": " + message;
  return out;
}

ConfigResult parseConfigJson(const nlohmann::json& doc, const ValidationContext& ctx) {
  ConfigResult result;
  try {
    if (!doc.is_object()) {
      result.issues.push_back(
          ConfigIssue{"", valueText(doc), "the config must be a JSON object ({...})"});
      return result;
    }
    RunConfig cfg;
    std::set<std::string> bad;
    config::readSchema(doc, cfg, result.issues, bad);
    config::resolveAutoArch(doc, cfg, result.issues, bad);
    config::checkCrossField(cfg, ctx, bad, result.issues);
    if (result.issues.empty()) result.config = std::move(cfg);
  } catch (const std::exception& e) {
    // Defensive: the validator itself must never throw out of the API.
    result.issues.push_back(ConfigIssue{"", "", std::string("internal error: ") + e.what()});
    result.config.reset();
  }
  return result;
}

ConfigResult parseConfigText(const std::string& text, const ValidationContext& ctx) {
  try {
    return parseConfigJson(parseBoundedJson(text), ctx);
  } catch (const json::parse_error& e) {
    size_t line = 0, col = 0;
    lineColumn(text, e.byte, line, col);
    std::string what = e.what();
    // Strip nlohmann's "[json.exception.parse_error.101] parse error at line x, column y: ".
    auto pos = what.find(": ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    ConfigResult r;
    r.issues.push_back(ConfigIssue{"", "",
                                   "malformed JSON at line " + std::to_string(line) + ", column " +
                                       std::to_string(col) + ": " + what});
    return r;
  } catch (const std::exception& e) {
    ConfigResult r;
    r.issues.push_back(ConfigIssue{"", "", std::string("malformed JSON: ") + e.what()});
    return r;
  }
}

namespace {
// Reads the file; on failure returns an issue naming it.
std::optional<std::string> readFile(const std::string& path, std::vector<ConfigIssue>& issues) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    issues.push_back(
        ConfigIssue{"", "", "cannot open config file " + path + ": " + std::strerror(errno)});
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    issues.push_back(ConfigIssue{"", "", "cannot read config file " + path});
    return std::nullopt;
  }
  return ss.str();
}

// Document-level issues (malformed JSON, not an object) name the file; field issues carry a path.
void prefixFile(const std::string& path, std::vector<ConfigIssue>& issues) {
  for (auto& i : issues) {
    if (i.path.empty()) i.message = path + ": " + i.message;
  }
}
}  // namespace

ConfigResult loadConfigFile(const std::string& path, const ValidationContext& ctx) {
  return loadConfigWithOverrides(path, {}, ctx);
}

ConfigResult loadConfigWithOverrides(const std::string& path,
                                     const std::vector<std::string>& overrides,
                                     const ValidationContext& ctx) {
  ConfigResult result;
  try {
    auto text = readFile(path, result.issues);
    if (!text) return result;
    json doc;
    try {
      doc = parseBoundedJson(*text);
    } catch (const json::exception&) {
      result = parseConfigText(*text, ctx);  // produces the line/column message
      prefixFile(path, result.issues);
      return result;
    }
    std::vector<ConfigIssue> overrideIssues;
    for (const auto& o : overrides) {
      auto is = applyOverride(doc, o);
      overrideIssues.insert(overrideIssues.end(), is.begin(), is.end());
    }
    result = parseConfigJson(doc, ctx);
    prefixFile(path, result.issues);
    if (!overrideIssues.empty()) {
      result.issues.insert(result.issues.begin(), overrideIssues.begin(), overrideIssues.end());
      result.config.reset();
    }
  } catch (const std::exception& e) {
    result.config.reset();
    result.issues.push_back(ConfigIssue{"", path, std::string("internal error: ") + e.what()});
  }
  return result;
}

}  // namespace ts::core