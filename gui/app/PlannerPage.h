#pragma once
// The memory planner page: the estimator as a what-if tool. Pick a model, device memory and
// ranks, toggle techniques, see the per-rank breakdown and the planner's ranked suggestions,
// export the chosen setup. Logic lives in PlannerModel (gui core); this only lays out and paints.
#include <optional>
#include <vector>

#include <QWidget>

#include "trainscope/gui/PlannerModel.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QGroupBox;
class QLabel;
class QLayout;
class QPushButton;
class QSpinBox;
class QTableView;
class QTimer;

namespace ts::gui {

class MemoryBars;

class PlannerPage : public QWidget {
  Q_OBJECT
 public:
  explicit PlannerPage(QWidget* parent = nullptr);

  // For tests and screenshots.
  void selectModel(const QString& id);
  // "config.json…": a Hugging Face model's config (or its folder) as the model; added to the
  // model list and selected. Returns the error text (empty on success).
  QString addHfModel(const QString& path);
  QString modelNote() const;  // what the page says about the chosen model
  void setDeviceMemoryGiB(double gib);
  void setRanks(int ranks);
  void setTechniques(const PlannerTechniques& t);
  // The engine's capabilities: suggestions say whether it can run them on the chosen backend,
  // and the backend defaults to cuda where the engine found a GPU.
  void setCapabilities(const nlohmann::json& caps);
  void setBackend(const QString& backend);  // "cpu" | "cuda"
  void setRunnableOnly(bool v);             // the suggestions filter: fits and runs here
  QString setupNote() const;                // the text under the setup's verdict
  QString planMessage() const;              // the line above the suggestions
  void recompute();                         // schedules a computation now
  bool computing() const { return controller_->busy() || pendingTimer(); }
  PlanTableModel* planModel() const { return plans_; }
  QTableView* planView() const { return table_; }
  // The setup an export writes: the selected suggestion, else the form's setup.
  core::RunConfig chosenConfig() const;
  const std::optional<PlannerOutput>& lastOutput() const { return output_; }
  bool exportTo(PlannerExport kind, const QString& path, QString* error = nullptr) const;

 signals:
  void updated();

 private:
  QWidget* buildSetupForm();
  QGroupBox* buildMachineBox();
  QGroupBox* buildTechniquesBox();
  QLayout* buildResults();
  QGroupBox* buildMemoryBox();
  QGroupBox* buildPlanBox();
  void buildPlanTable();
  QLayout* buildExportRow();
  void connectForm();
  bool pendingTimer() const;
  void scheduleUpdate();
  void loadChoice(int index);
  PlannerTechniques formTechniques() const;
  void showOutput(const PlannerInput& in, const PlannerOutput& out);
  void applySelectedPlan();
  void exportDialog(PlannerExport kind);
  void updateExportLabel();

  std::vector<PlannerModelChoice> choices_;
  PlannerController* controller_;
  PlanTableModel* plans_;
  QTimer* debounce_;
  bool loading_ = false;
  std::optional<PlannerInput> input_;
  std::optional<PlannerOutput> output_;

  QComboBox* model_;
  QLabel* modelNote_;
  QSpinBox* seqLen_;
  QDoubleSpinBox* deviceGiB_;
  QSpinBox* ranks_;
  QComboBox* goal_;
  QComboBox* backend_;
  QComboBox* filter_;
  nlohmann::json caps_;
  QComboBox* precision_;
  QComboBox* checkpointing_;
  QCheckBox* flash_;
  QComboBox* zero_;
  QComboBox* offloadOpt_;
  QComboBox* offloadParams_;
  QSpinBox* lora_;
  QCheckBox* nf4_;
  QCheckBox* adam8_;
  QSpinBox* micro_;
  QLabel* verdict_;
  QLabel* details_;
  MemoryBars* bars_;
  QTableView* table_;
  QLabel* planMessage_;
  QLabel* exportLabel_;
  QPushButton* applyPlan_;
};

}  // namespace ts::gui
