#pragma once
// The run wizard: pages of options over one ConfigDocument, a memory side panel that follows
// every change, inline validation from the engine's validator, and Launch.
#include <functional>
#include <vector>

#include <QWidget>

#include "trainscope/gui/Capabilities.h"
#include "trainscope/gui/ConfigDocument.h"
#include "trainscope/gui/HfFolderInfo.h"
#include "trainscope/gui/PresetLibrary.h"

class QLabel;
class QListWidget;
class QPushButton;
class QStackedWidget;
class QPlainTextEdit;
class QComboBox;
class QVBoxLayout;

namespace ts::gui {

class ChartView;
class ConfigBinder;
class MemoryBars;
class RunRepository;

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
  QListWidget* presetList() const { return presets_; }
  QListWidget* pastRunList() const { return pastRuns_; }
  // Reasons Launch is disabled (empty when it is enabled).
  QStringList launchBlockers() const;
  // Validation issues plus what the engine says it cannot do yet.
  std::vector<core::ConfigIssue> allIssues() const;

  void setCapabilities(const CapabilitySummary& caps);
  void applyPreset(int index);
  // Loads a config or DeepSpeed file; returns the error text (empty on success).
  QString importFile(const QString& path);
  void refreshPastRuns();
  // The model page's "Hugging Face folder…": model.* from the folder's config.json and
  // finetune.base_checkpoint = the folder. Returns the error text (empty on success; the
  // document is untouched on error).
  QString openHfFolder(const QString& path);

 signals:
  void launchRequested();

 private:
  QWidget* page(const QString& title, const QString& hint, QVBoxLayout** body);
  QWidget* buildStartPage();
  QWidget* buildModelPage();
  QWidget* buildPrecisionPage();
  QWidget* buildMemoryPage();
  QWidget* buildParallelPage();
  QWidget* buildOptimizerPage();
  QWidget* buildFinetunePage();
  QWidget* buildProfilingPage();
  QWidget* buildReviewPage();
  QWidget* buildSidePanel();
  void addPage(const QString& nav, QWidget* w, QStringList sections);
  QLabel* issueLabel(QStringList sections);
  void onDocumentChanged();
  void updateDataPreview();
  void updateSchedulePreview();
  int64_t capacity() const;

  ConfigDocument* doc_;
  const RunRepository* repo_;
  ConfigBinder* binder_;
  CapabilitySummary caps_;
  std::vector<Preset> presetData_;
  QListWidget* nav_;
  QStackedWidget* stack_;
  QPushButton *back_, *next_, *launch_;
  QLabel* blockers_;
  QListWidget* presets_ = nullptr;
  QListWidget* pastRuns_ = nullptr;
  QLabel* startStatus_ = nullptr;
  QLabel* paramCount_ = nullptr;
  QLabel* hfInfo_ = nullptr;
  HfFolderCache hfFolders_;
  QPlainTextEdit* dataPreview_ = nullptr;
  QLabel* effBatch_ = nullptr;
  ChartView* lrChart_ = nullptr;
  int lrSeries_ = -1, curriculumSeries_ = -1;
  ChartView* curriculumChart_ = nullptr;
  QPlainTextEdit* reviewJson_ = nullptr;
  QLabel* reviewIssues_ = nullptr;
  QLabel* reviewWarnings_ = nullptr;
  QLabel* reviewEstimate_ = nullptr;
  QComboBox* teacherPick_ = nullptr;
  MemoryBars* bars_ = nullptr;
  QLabel* memSummary_ = nullptr;
  QComboBox* capacityPick_ = nullptr;
  std::vector<std::pair<QLabel*, QStringList>> issueLabels_;
  std::vector<std::function<void()>> onChange_;
};

}  // namespace ts::gui
