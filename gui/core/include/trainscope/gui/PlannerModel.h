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
  size_t maxPlans = 12;
  // The engine's `capabilities --json` (null: unknown, every plan counts as runnable); each
  // plan's limitations come from it for config.device.backend.
  nlohmann::json capabilities;
  bool runnableOnly = true;  // suggestions: "fits and runs here" (else "all that fit")
};
// How long a step would take on this machine: a floor from the step's FLOPs (the estimator's)
// at the CPU's GEMM rate (cpuGemmRate). Real steps add attention, element-wise work and the
// optimizer, so this is "at least".
struct StepTimeEstimate {
  double seconds = 0;        // per optimizer step, at least
  double tokensPerS = 0;     // at most
  double flopsPerS = 0;      // the GEMM rate it is computed at
  bool impractical = false;  // a small fine-tune (kSmallRunTokens) would take over a week
  QString stepText() const;  // "≥ 27 min" (per step)
  QString sentence() const;  // "at least 27 min per step (1.3 tokens/s), 10 M tokens in 3 months"
};
inline constexpr double kSmallRunTokens = 10e6;
// "0.40 s", "12 s", "27 min", "5.2 h", "3.1 days", "3 months"
QString durationText(double seconds);
// This machine's GEMM rate for a cpu-backend config. Measured: the engine's GEMM calibration
// (precisions.bf16.gemm_calibration; bf16 where "auto" picks bf16 GEMMs, else fp32), which
// it takes only where the CPU has a native bf16 kernel. Else assumed from its threads and
// vector units (capabilities.cpu): half the FMA peak at 2.5 GHz per thread, and said so.
// flopsPerS 0: no estimate (another backend: nothing here measures a GPU; or nothing known).
struct GemmRate {
  double flopsPerS = 0;
  bool measured = false;
  QString basis;  // "the 52 GFLOP/s the engine measured for its GEMMs here", "an assumed ..."
};
GemmRate cpuGemmRate(const nlohmann::json& caps, const core::RunConfig& config);
std::optional<StepTimeEstimate> estimateStepTime(const core::MemoryEstimate& e, double flopsPerS);

struct PlannerOutput {
  core::MemoryEstimate estimate;  // of the setup itself
  core::PlanResult plans;         // the planner's suggestions
  // Why this engine cannot run the setup itself (empty: it can); what this machine lacks is
  // `machine`, not here.
  QStringList limitations;
  // Set when this machine has no usable device for the backend ("no usable CUDA device on
  // this machine (...)"): the estimate and the plans are for such a device elsewhere, every
  // plan is listed (each says it does not run here) instead of none.
  QString machine;
  std::optional<StepTimeEstimate> stepTime;  // of the setup, on this machine (cpu backend)
  GemmRate gemm;                             // what the times are computed at
  QString error;                             // set when the config does not validate
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
    TimeHere,  // at least this long per step on this machine (its GEMM rate), else "–"
    RunsHere,  // whether this engine can run it on the chosen backend; reasons in the tooltip
    ColumnCount
  };
  // Qt::UserRole: the raw value (bytes, relative time, seconds here, runs here) for sorting
  // and tests.
  explicit PlanTableModel(QObject* parent = nullptr);
  // basis: the configured setup the step times are relative to (for the tooltip); gemm: this
  // machine's rate for the time each plan takes here (flopsPerS 0: unknown, "–").
  void setPlans(std::vector<core::Plan> plans, QString basis = {}, GemmRate gemm = {});
  const core::Plan* plan(int row) const;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  std::vector<core::Plan> plans_;
  std::vector<std::optional<StepTimeEstimate>> times_;
  GemmRate gemm_;
  QString basis_;
};

}  // namespace ts::gui
