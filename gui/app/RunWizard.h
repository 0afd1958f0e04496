#pragma once
// The run wizard: pages of options over one ConfigDocument (one widget per page, in wizard/),
// a memory side panel that follows every change, inline validation from the engine's
// validator, and Launch. This class holds the navigation, the side panel and the wiring.
#include <vector>

#include <QWidget>

#include "trainscope/gui/Capabilities.h"
#include "trainscope/gui/ConfigDocument.h"

class QComboBox;
class QLabel;
class QListWidget;
class QPushButton;
class QStackedWidget;

namespace ts::gui {

class ConfigBinder;
class FinetunePage;
class MemoryBars;
class ModelPage;
class ReviewPage;
class RunRepository;
class StartPage;
class WizardPage;

class RunWizard : public QWidget {
  Q_OBJECT
 public:
  RunWizard(ConfigDocument* doc, const RunRepository* repo, QWidget* parent = nullptr);

  ConfigDocument* document() const { return doc_; }
  int pageCount() const;
  int currentPage() const;
  QString pageTitle(int i) const;
  void goToPage(int i);
  QPushButton* nextButton() const { return next_; }
  QPushButton* backButton() const { return back_; }
  QPushButton* launchButton() const { return launch_; }
  QListWidget* presetList() const;
  QListWidget* pastRunList() const;
  // Reasons Launch is disabled (empty when it is enabled).
  QStringList launchBlockers() const;
  // Validation issues plus what the engine says it cannot do yet.
  std::vector<core::ConfigIssue> allIssues() const;

  void setCapabilities(const CapabilitySummary& caps);
  void applyPreset(int index);
  // Loads a config or DeepSpeed file; returns the error text (empty on success).
  QString importFile(const QString& path);
  // The start page's past runs and the fine-tuning page's teachers (their checkpoints).
  void refreshPastRuns();
  // The model page's "Hugging Face folder…": model.* from the folder's config.json,
  // finetune.base_checkpoint = the folder, and a name, notes and tags describing the run as
  // its fine-tune. Returns the error text (empty on success; the document is untouched on
  // error).
  QString openHfFolder(const QString& path);

 signals:
  void launchRequested();

 private:
  void addPages();
  void addPage(const QString& nav, WizardPage* page);
  QLayout* buildButtons();
  QWidget* buildSidePanel();
  void onDocumentChanged();
  void updateLaunch(const QStringList& blockers);
  void updateMemoryPanel(int64_t capacity);
  int64_t capacity() const;

  ConfigDocument* doc_;
  const RunRepository* repo_;
  ConfigBinder* binder_;
  CapabilitySummary caps_;
  QListWidget* nav_;
  QStackedWidget* stack_;
  QPushButton *back_, *next_, *launch_;
  QLabel* blockers_;
  std::vector<WizardPage*> pages_;
  StartPage* start_ = nullptr;
  ModelPage* model_ = nullptr;
  FinetunePage* finetune_ = nullptr;
  ReviewPage* review_ = nullptr;
  MemoryBars* bars_ = nullptr;
  QLabel* memSummary_ = nullptr;
  QComboBox* capacityPick_ = nullptr;
};

}  // namespace ts::gui
