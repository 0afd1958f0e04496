#pragma once
// The one run-config document every wizard widget edits. Widgets never hold their own copy:
// they read with value() and write with setValue(); validation (the engine's own validator)
// and the memory estimate are recomputed after every change.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <QObject>
#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/Estimator.h"

namespace ts::gui {

class ConfigDocument : public QObject {
  Q_OBJECT
 public:
  explicit ConfigDocument(QObject* parent = nullptr);

  const nlohmann::json& document() const { return doc_; }
  // Replaces the whole document (preset, clone, import). Emits changed().
  void reset(nlohmann::json doc);
  // Dotted path ("model.layers"). A missing key reads as the resolved default.
  nlohmann::json value(std::string_view path) const;
  // Sets one key (creating objects on the way). Emits changed() only when the value differs.
  void setValue(std::string_view path, nlohmann::json v);

  // Validation through core::parseConfigJson (the engine's validator): every problem at once.
  const std::vector<core::ConfigIssue>& issues() const { return issues_; }
  bool isValid() const { return issues_.empty(); }
  // Parsed config when valid.
  const std::optional<core::RunConfig>& config() const { return config_; }
  // Resolved document (every default filled) when valid, else the document as edited.
  nlohmann::json resolved() const;
  // resolved() less the model keys the chosen family does not read (they keep their defaults
  // and do nothing: a LLaMA's "activation": "gelu" beside its SwiGLU MLP only misleads).
  nlohmann::json resolvedForFamily() const;
  // Estimator output for the current document (nullopt while invalid).
  const std::optional<core::MemoryEstimate>& estimate() const { return estimate_; }
  // Soft warnings that are not validation errors (e.g. estimate over device capacity, LoRA
  // adapters on a random base), in the user's terms.
  std::vector<std::string> warnings(int64_t deviceCapacity) const;
  // How the estimate counts memory (the estimator's notes), in the user's terms; not warnings.
  std::vector<std::string> estimateNotes() const;

  // What precision.gemm "auto" means on the engine's machine (capabilities:
  // precisions.bf16.auto_gemm == "bf16"); the estimate counts the bf16 GEMM scratch then.
  void setNativeBf16Gemm(bool native);

  int64_t effectiveBatch() const;  // micro_batch * grad_accum * ranks
  int revision() const { return revision_; }

  // Import: our config JSON, or a DeepSpeed JSON mapped onto our keys. Returns the error text
  // (empty on success); on success the document is replaced.
  std::string importText(const std::string& text);
  // Maps a DeepSpeed config onto a run-config document (the keys that have an equivalent).
  static nlohmann::json fromDeepSpeed(const nlohmann::json& ds, const nlohmann::json& base);
  static bool looksLikeDeepSpeed(const nlohmann::json& j);

 signals:
  void changed();

 private:
  void revalidate();

  nlohmann::json doc_ = nlohmann::json::object();
  nlohmann::json defaults_;
  std::vector<core::ConfigIssue> issues_;
  std::optional<core::RunConfig> config_;
  std::optional<core::MemoryEstimate> estimate_;
  int revision_ = 0;
  bool nativeBf16Gemm_ = false;
};

// Splits "a.b.c" into a JSON pointer "/a/b/c".
nlohmann::json::json_pointer pointerFor(std::string_view dottedPath);

}  // namespace ts::gui
