#pragma once
// A model family: everything one architecture is, asked by the rest of the engine instead of
// branching on its name. Its tensor description (names, shapes, roles, block slots), the shape
// flags of its decoder, config.json in and out, the Hugging Face and PEFT names, its refusals
// and its named shapes for the planner. Each family lives in its own folder,
// engine/core/src/model/families/<family>/, and is listed once in the registry
// (ModelFamily.cpp). Qt-free and compute-free: the estimator, the GUI and the engine share it.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/ModelSpec.h"

namespace ts::core {

struct HfModelInfo;
class HfFields;

// A block projection as LoRA sees it: the short target names that select it, the module
// (PEFT's target name), in and out, and where it sits under the block ("self_attn.q_proj").
struct Projection {
  std::vector<std::string> targets;
  std::string module;
  int64_t in = 0, out = 0;
  std::string path;
};

// Builds the tensor list a family describes; LoRA adapters follow their projection's weight.
class TensorListBuilder {
 public:
  TensorListBuilder(const ArchSpec& arch, const FinetuneConfig& finetune)
      : arch_(arch), finetune_(finetune) {}
  const ArchSpec& arch() const { return arch_; }
  // A tensor, trainable unless LoRA freezes the base; null (and not listed) when it has no
  // elements.
  TensorSpec* add(std::string name, std::vector<int64_t> shape, TensorRole role, int block,
                  std::string module = {}, BlockSlot slot = BlockSlot::None, bool resid = false);
  // The projection's LoRA A (r, in) and B (out, r) under `prefix + p.path`, as PEFT names
  // them, when a target selects it.
  void adapters(const std::string& prefix, int block, const Projection& p);
  std::vector<TensorSpec> take() { return std::move(tensors_); }

 private:
  const ArchSpec& arch_;
  const FinetuneConfig& finetune_;
  std::vector<TensorSpec> tensors_;
};

// One problem with a run config: its JSON path, the value (JSON text) and why.
using IssueSink = std::function<void(std::string path, nlohmann::json value, std::string why)>;

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // model.arch's value and the name the GUI shows.
  virtual std::string name() const = 0;
  virtual std::string displayName() const = 0;
  // One line for the GUI: what the description is ("LayerNorm, learned positions, ...").
  virtual std::string description() const = 0;
  // The model.* keys its description reads beyond the ones every family has (layers, heads,
  // d_model, seq_len, vocab, dropout), as config.json sets them ("kv_heads", "d_ff", ...).
  virtual std::vector<std::string> modelKeys() const = 0;
  bool readsModelKey(const std::string& key) const {
    const auto keys = modelKeys();
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  }

  // The decoder's shape flags (bias, learned positions, tied head, fused q|k|v, SwiGLU,
  // RMSNorm) from model.*; the sizes are already set in `a`.
  virtual void describe(const ModelConfig& m, ArchSpec& a) const = 0;
  // A block's projections in storage order.
  virtual std::vector<Projection> projections(const ArchSpec& a) const = 0;
  // Every parameter tensor in storage order (block by block).
  virtual void tensors(TensorListBuilder& b) const = 0;
  // What this engine does not run of the family's config (model.* keys the description does
  // not have, techniques its layers do not fit).
  virtual void refusals(const RunConfig& c, const IssueSink& add) const = 0;

  // Hugging Face: the architectures (config.json "architectures"[0]) and model_type values it
  // reads, model_type i standing for architecture i; the first architecture is the one
  // exports write.
  virtual std::vector<std::string> hfArchitectures() const = 0;
  virtual std::vector<std::string> hfModelTypes() const = 0;
  // Why an architecture this family resembles but does not read is refused (" (its q/k/v
  // projections have biases ...)"), or "".
  virtual std::string hfNearMiss(std::string_view /*architecture*/) const { return ""; }
  // config.json into model.* (and tiedHead); throws HfConfigError naming the file and field.
  virtual void readHfConfig(const HfFields& f, HfModelInfo& hf) const = 0;
  // config.json of a model of this shape (without the dtype keys).
  virtual nlohmann::json writeHfConfig(const ArchSpec& a, double dropout) const = 0;
  // The names a tensor may carry in a Hugging Face folder, the one exports write first.
  virtual std::vector<std::string> hfNames(const TensorSpec& t, bool tiedHead) const = 0;
  // Whether the folder stores it transposed (GPT-2's Conv1D keeps (in, out)).
  virtual bool hfTransposed(const TensorSpec& t) const = 0;
  // The model.* keys of a folder's shape that a run fine-tuning it differs in, beyond the
  // sizes every family has (layers, heads, d_model, vocab).
  virtual void hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                                 std::vector<std::string>& out) const = 0;

  // PEFT: the prefix of adapter tensor names, whether LoRA weights are (in, out)
  // (fan_in_fan_out), and target_modules for the run's targets.
  virtual std::string peftPrefix() const = 0;
  virtual bool peftFanInFanOut() const = 0;
  virtual std::vector<std::string> peftTargets(const RunConfig& c) const = 0;

  // Named shapes for the planner ("gpt2-xl") and their aliases ("gpt2-1.5b").
  virtual std::vector<std::pair<std::string, ModelConfig>> presets() const = 0;
  virtual std::vector<std::pair<std::string, std::string>> presetAliases() const = 0;
};

// The registry: every family, in the order the GUI lists them.
const std::vector<const ModelFamily*>& modelFamilies();
std::vector<std::string> modelFamilyNames();
// The family named `arch` (model.arch), or null.
const ModelFamily* findModelFamily(std::string_view arch);
// Throws std::invalid_argument naming the allowed families.
const ModelFamily& modelFamily(std::string_view arch);
// The family that reads a config.json's architecture or model_type; null when none does.
const ModelFamily* familyForHf(std::string_view architectureOrModelType);
// ASCII lower case (model.* values are matched case-insensitively).
std::string lowerAscii(std::string s);
// Appends `name` unless `names` holds it already (PEFT target lists keep first-seen order).
void addUnique(std::vector<std::string>& names, const std::string& name);
// Every LoRA module name of every family (the config schema's list).
std::vector<std::string> allLoraModules();

}  // namespace ts::core
