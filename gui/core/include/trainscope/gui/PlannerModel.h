#pragma once
// The memory planner page's logic: a model choice (our presets or the estimator's model
// shapes) plus technique toggles -> a run config; the per-rank estimate and the planner's
// ranked suggestions computed off the GUI thread; exports of the chosen setup (run config,
// DeepSpeed JSON, Hugging Face Trainer arguments). Widget-free so it is tested headless.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <QAbstractTableModel>
#include <QObject>
#include <QString>
#include <QStringList>
#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/plan/Planner.h"

namespace ts::gui {

struct PlannerModelChoice {
  QString label;  // shown in the combo box
  QString id;     // "preset:<file id>" or "shape:<estimator preset name>"
  core::RunConfig base;
};
// Our built-in presets (resources/presets) first, then the estimator's model shapes
// (GPT-2 sizes, LLaMA-7B/13B/70B) with a typical fine-tuning setup around them.
std::vector<PlannerModelChoice> plannerModelChoices(const QString& presetDir = ":/presets");
// A model from a Hugging Face config.json (or the folder holding it), set up like the
// estimator's shapes; where the folder has its weights the setup fine-tunes them
// (finetune.base_checkpoint). nullopt with *error naming the file and field.
std::optional<PlannerModelChoice> plannerModelChoiceFromHf(const std::string& path,
                                                           QString* error = nullptr);

struct PlannerTechniques {
  std::string precision = "bf16";      // fp32 | bf16 | fp16 | fp8 | pure_bf16
  std::string checkpointing = "none";  // none | all | every_k
  bool flash = false;
  int zeroStage = 0;                      // 0..3
  std::string offloadOptimizer = "none";  // none | cpu | nvme
  std::string offloadParams = "none";     // none | cpu | nvme
  int loraRank = 0;                       // 0 = full training
  bool nf4Base = false;                   // 4-bit base weights (QLoRA; needs LoRA)
  bool optimizer8bit = false;
  int microBatch = 1;
  int seqLen = 0;  // 0 = the model's
};
// The techniques a config already uses (to initialise the form from a preset or a plan).
PlannerTechniques techniquesOf(const core::RunConfig& config);
// base with the techniques and the rank count applied.
core::RunConfig applyTechniques(core::RunConfig base, const PlannerTechniques& t, int ranks);

struct PlannerInput {
  core::RunConfig config;    // the setup being looked at (techniques applied, device.backend)
  int64_t deviceMemory = 0;  // bytes per device
  int ranks = 1;
  core::PlanGoal goal = core::PlanGoal::Fit;
  size_t maxPlans = 10;
  // The engine's `capabilities --json` (null: unknown, every plan counts as runnable); each
  // plan's limitations come from it for config.device.backend.
  nlohmann::json capabilities;
  bool runnableOnly = true;  // suggestions: "fits and runs here" (else "all that fit")
};
struct PlannerOutput {
  core::MemoryEstimate estimate;  // of the setup itself
  core::PlanResult plans;         // the planner's suggestions
  QStringList limitations;        // why this engine cannot run the setup itself (empty: it can)
  QString error;                  // set when the config does not validate
};
PlannerOutput evaluatePlanner(const PlannerInput& input);

enum class PlannerExport { RunConfig, DeepSpeed, HuggingFace };
// The file content for an export (pretty JSON) and the suggested file name.
std::string exportPlannerConfig(const core::RunConfig& config, PlannerExport kind);
QString suggestedExportName(PlannerExport kind);

// Runs evaluatePlanner on a worker thread. Requests made while one is running collapse into
// the latest, so dragging a spin box never queues work.
class PlannerController : public QObject {
  Q_OBJECT
 public:
  explicit PlannerController(QObject* parent = nullptr);
  void request(PlannerInput input);
  bool busy() const { return busy_; }

 signals:
  void finished(const ts::gui::PlannerInput& input, const ts::gui::PlannerOutput& output);

 private:
  void startNext();
  std::optional<PlannerInput> pending_;
  bool busy_ = false;
};

// The ranked suggestions, one row per plan, in the planner's order.
class PlanTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    Rank,
    Class,
    Techniques,
    Batch,
    PeakDevice,
    Host,
    StepTime,  // relative to the setup as configured (1.00x); the basis is in the tooltip
    RunsHere,  // whether this engine can run it on the chosen backend; reasons in the tooltip
    ColumnCount
  };
  // Qt::UserRole: the raw value (bytes, relative time, runs here) for sorting and tests.
  explicit PlanTableModel(QObject* parent = nullptr);
  // basis: the configured setup the step times are relative to (for the tooltip).
  void setPlans(std::vector<core::Plan> plans, QString basis = {});
  const core::Plan* plan(int row) const;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  std::vector<core::Plan> plans_;
  QString basis_;
};

}  // namespace ts::gui
