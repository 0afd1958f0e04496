// model.arch "auto": the run's model is its fine-tuning base's (docs/config.md).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include "trainscope/core/protocol/BoundedJson.h"

#include "ConfigInternal.h"
#include "trainscope/core/model/HfConfig.h"

namespace ts::core::config {

namespace fs = std::filesystem;

namespace {

// The base's model.*: a Hugging Face folder's, or a checkpoint's run config's.
ModelConfig baseModel(const std::string& base) {
  if (isHfModelFolder(base)) return readHfConfig(base).model;
  const fs::path state = fs::path(base) / "state.json";
  std::ifstream in(state);
  if (!in)
    throw HfConfigError(base +
                        ": neither a Hugging Face model folder (config.json) nor a checkpoint "
                        "(state.json)");
  nlohmann::json s;
  try {
    s = parseBoundedJson(in);
  } catch (const std::exception& e) {
    throw HfConfigError(state.string() + ": not valid JSON: " + e.what());
  }
  if (!s.contains("config") || !s["config"].is_object())
    throw HfConfigError(state.string() + ": has no run config ('config')");
  RunConfig c;
  std::vector<ConfigIssue> issues;
  std::set<std::string> bad;
  readSchema(s["config"], c, issues, bad);
  if (!issues.empty())
    throw HfConfigError(state.string() +
                        ": its run config is invalid: " + issues.front().toString());
  return c.model;
}

}  // namespace

void resolveAutoArch(const nlohmann::json& doc, RunConfig& c, std::vector<ConfigIssue>& issues,
                     std::set<std::string>& bad) {
  if (c.model.arch != "auto") return;
  const std::string& base = c.finetune.base_checkpoint;
  if (base.empty()) {
    issues.push_back({"model.arch", "\"auto\"",
                      "auto takes the model from finetune.base_checkpoint, which is not set"});
    bad.insert("model");
    return;
  }
  ModelConfig m;
  try {
    m = baseModel(base);
  } catch (const std::exception& e) {
    issues.push_back({"model.arch", "\"auto\"", std::string("cannot read the base: ") + e.what()});
    bad.insert("model");
    return;
  }
  const nlohmann::json* set = nullptr;
  if (doc.contains("model") && doc["model"].is_object()) set = &doc["model"];
  auto explicitly = [&](const char* k) { return set && set->contains(k); };
  m.seq_len = explicitly("seq_len") ? c.model.seq_len : std::min(m.seq_len, 1024);
  m.dropout = c.model.dropout;
  const ModelConfig runSet = c.model;
  c.model = m;
  if (!set) return;
  // Every key the user wrote must agree with the base (they are not silently replaced).
  RunConfig asSet, asBase;
  asSet.model = runSet;
  asBase.model = m;
  const auto js = toJson(asSet)["model"], jb = toJson(asBase)["model"];
  for (const auto& [k, v] : set->items()) {
    if (k == "arch" || k == "seq_len" || k == "dropout" || !jb.contains(k)) continue;
    if (js[k] != jb[k])
      issues.push_back({"model." + k, valueText(v),
                        "disagrees with the base " + base + " (" + valueText(jb[k]) +
                            "); model.arch auto takes it from there: remove the key"});
  }
}

}  // namespace ts::core::config
