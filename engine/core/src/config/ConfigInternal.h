#pragma once
// Internal to the run config: what its schema (ConfigSchema.cpp), cross-field rules
// (ConfigRules.cpp), `--set` overrides (ConfigOverrides.cpp) and entry points (Config.cpp) share.
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"

namespace ts::core::config {

// Integers print in full ("16777216", not "1.67772e+07"): a limit the user must type exactly.
std::string fmtNumber(double v);
std::string joinList(const std::vector<std::string>& v, const char* sep = ", ");
// A value as an issue shows it: compact JSON, cut at 80 characters.
std::string valueText(const nlohmann::json& j);
std::string joinPath(const std::string& base, const std::string& key);

// finetune.lora.targets: the short names (q, k, v, o, fc, proj), and those then every family's
// module names.
const std::vector<std::string>& loraShortTargets();
const std::vector<std::string>& loraTargetNames();

// Reads `doc` into `config` field by field against the schema; every problem goes to `issues`
// and its path to `bad` (so the cross-field rules skip what they cannot trust).
void readSchema(const nlohmann::json& doc, RunConfig& config, std::vector<ConfigIssue>& issues,
                std::set<std::string>& bad);

// Rules that involve more than one field, in a fixed order; a rule reading a path in `bad` (or
// below a section in it) is skipped.
void checkCrossField(const RunConfig& c, const ValidationContext& ctx,
                     const std::set<std::string>& bad, std::vector<ConfigIssue>& issues);

}  // namespace ts::core::config

namespace ts::core::config {

// model.arch "auto": every model.* shape key from the fine-tuning base (a Hugging Face folder's
// config.json, or a trainscope checkpoint's run config); model.seq_len and model.dropout stay
// the run's (seq_len, when not set, is the base's capped at 1024). Explicitly set keys that
// disagree with the base, and a missing or unreadable base, are issues.
void resolveAutoArch(const nlohmann::json& doc, RunConfig& config, std::vector<ConfigIssue>& issues,
                     std::set<std::string>& bad);

}  // namespace ts::core::config
