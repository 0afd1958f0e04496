#pragma once
// What the wizard and the planner show of a Hugging Face model folder: its architecture, shape,
// parameter count and stored dtype (config.json and the safetensors headers; no weights read),
// and the run-config keys that make a run fine-tune it. Widget-free so it is tested headless.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <QString>
#include <nlohmann/json.hpp>

#include "trainscope/core/model/HfConfig.h"

namespace ts::gui {

// "124.44 M", "51.4 K": parameter counts as the wizard and the folder summary show them.
QString humanCount(double n);

struct HfFolderInfo {
  QString error;  // why the folder cannot be used (names the file and field); empty when ok
  core::HfModelInfo info;
  core::HfStoredWeights stored;
  bool ok() const { return error.isEmpty(); }
  int64_t storedParameters() const;  // elements in the weight files
  // "GPT2LMHeadModel: 12 layers, d_model 768, 12 heads, 1024 positions, vocab 50257 ·
  //  124.44 M parameters · stored F32 (config.json: float32) · 548.1 MB in 1 file"
  QString summary() const;
};

// Reads the folder (or its config.json); never throws.
HfFolderInfo inspectHfFolder(const std::string& path);

// `doc` with model.* set from the folder (the sequence capped at 1024 positions, as import-hf
// writes it) and finetune.base_checkpoint naming the folder; other keys untouched.
nlohmann::json applyHfFolder(nlohmann::json doc, const HfFolderInfo& folder);

// applyHfFolder, and the run described as fine-tuning that folder: a name from the folder's
// name, notes and tags saying what it starts from (a preset's would describe another run).
nlohmann::json applyHfBase(nlohmann::json doc, const HfFolderInfo& folder);

// inspectHfFolder, re-read only when config.json or the weight files change (the wizard asks
// after every edit).
class HfFolderCache {
 public:
  const HfFolderInfo& get(const std::string& path);
  // Stores what a worker thread read (inspectHfFolder), so get() does not read it again.
  void put(const std::string& path, HfFolderInfo folder);

 private:
  struct Entry {
    std::string stamp;
    HfFolderInfo folder;
  };
  std::map<std::string, Entry> entries_;
};

}  // namespace ts::gui
