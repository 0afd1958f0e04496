// `--set key.path=value` overrides, applied to the document before validation.
#include <algorithm>
#include <optional>
#include "trainscope/core/protocol/BoundedJson.h"

#include "ConfigInternal.h"

namespace ts::core {
namespace {

using nlohmann::json;

std::vector<std::string> splitKey(const std::string& key) {
  std::vector<std::string> parts;
  std::string cur;
  for (char ch : key) {
    if (ch == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  parts.push_back(cur);
  return parts;
}

bool validKeyPart(const std::string& p) {
  return !p.empty() && std::all_of(p.begin(), p.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
  });
}

// The section names toJson writes; empty when `first` is one of them.
std::vector<std::string> unknownSectionNames(const std::string& first) {
  RunConfig defaults;
  json known = toJson(defaults);
  if (known.contains(first)) return {};
  std::vector<std::string> names;
  for (auto it = known.begin(); it != known.end(); ++it) names.push_back(it.key());
  return names;
}

// What is wrong with an assignment: the path an issue names, and why.
struct OverrideProblem {
  std::string path, message;
};

// The object that holds the last name of `parts`, made on the way where missing; nullptr (and
// `problem` set) when a name on the way holds a value.
json* parentOf(json& doc, const std::string& key, const std::vector<std::string>& parts,
               std::optional<OverrideProblem>& problem) {
  if (!doc.is_object()) doc = json::object();
  json* node = &doc;
  std::string walked;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    walked = config::joinPath(walked, parts[i]);
    json& next = (*node)[parts[i]];
    if (next.is_null()) next = json::object();
    if (!next.is_object()) {
      problem = {key, walked + " is not a section (it holds " + config::valueText(next) + ")"};
      return nullptr;
    }
    node = &next;
  }
  return node;
}

std::optional<OverrideProblem> applyAssignment(json& doc, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos) {
    return OverrideProblem{"--set",
                           "expected key.path=value, e.g. precision.policy=bf16 (no '=' found)"};
  }
  std::string key = assignment.substr(0, eq);
  std::string text = assignment.substr(eq + 1);
  const std::vector<std::string> parts = splitKey(key);
  for (const auto& p : parts) {
    if (!validKeyPart(p)) {
      return OverrideProblem{key.empty() ? "--set" : key,
                             "the key must be dot-separated names of letters, digits and '_' "
                             "(e.g. precision.loss_scale.init)"};
    }
  }
  // The first name must be known; deeper names are checked by validation like the file.
  if (auto names = unknownSectionNames(parts[0]); !names.empty()) {
    return OverrideProblem{
        key, "unknown section \"" + parts[0] + "\"; allowed: " + config::joinList(names)};
  }
  std::optional<OverrideProblem> problem;
  json* parent = parentOf(doc, key, parts, problem);
  if (!parent) return problem;
  json value = parseBoundedJsonOrDiscarded(text);
  if (value.is_discarded()) value = text;  // bf16 -> "bf16"
  (*parent)[parts.back()] = std::move(value);
  return std::nullopt;
}

}  // namespace

std::vector<ConfigIssue> applyOverride(nlohmann::json& doc, const std::string& assignment) {
  auto eqPos = assignment.find('=');
  std::string shownValue = eqPos == std::string::npos ? assignment : assignment.substr(eqPos + 1);
  auto bad = [&](std::string path, std::string msg) {
    return std::vector<ConfigIssue>{
        ConfigIssue{std::move(path), shownValue, "--set: " + std::move(msg)}};
  };
  try {
    if (auto problem = applyAssignment(doc, assignment))
      return bad(problem->path, problem->message);
  } catch (const std::exception& e) {
    return bad("--set", std::string("cannot apply override: ") + e.what());
  }
  return {};
}

}  // namespace ts::core
