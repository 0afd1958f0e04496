#pragma once
// The wizard's first page: the run's name, the built-in presets, a past run to clone and a
// config file to import; each replaces the whole document.
#include <vector>

#include "trainscope/gui/PresetLibrary.h"
#include "wizard/WizardPage.h"

class QLabel;
class QListWidget;
class QListWidgetItem;
class QPushButton;

namespace ts::gui {

class RunRepository;

class StartPage : public WizardPage {
 public:
  StartPage(ConfigBinder* binder, const RunRepository* repo);

  QListWidget* presetList() const { return presets_; }
  QListWidget* pastRunList() const { return pastRuns_; }
  // "Refresh" under the past runs; the wizard wires it (the teacher list follows the runs too).
  QPushButton* refreshButton() const { return refresh_; }
  void applyPreset(int index);
  // Loads a config or DeepSpeed file; returns the error text (empty on success).
  QString importFile(const QString& path);
  // Re-reads the past runs from the database (on a worker thread; the list fills when it lands).
  void refreshPastRuns();

 protected:
  // The list follows the database: a run started (or resumed) since is there when the page
  // is shown again.
  void showEvent(QShowEvent* e) override;

 private:
  void addNameGroup();
  void addPresetGroup();
  void addCloneGroup();
  void addImportGroup();
  void clonePastRun(QListWidgetItem* item);
  void chooseImportFile();

  const RunRepository* repo_;
  std::vector<Preset> presetData_;
  QListWidget* presets_ = nullptr;
  QListWidget* pastRuns_ = nullptr;
  QPushButton* refresh_ = nullptr;
  QLabel* startStatus_ = nullptr;
  int pastRunsGeneration_ = 0;  // only the newest read fills the list
};

}  // namespace ts::gui
