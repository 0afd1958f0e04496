#pragma once
// The main window: side bar (New run, Live, Runs, Planner, Compare, Timeline), status bar
// (database, backends found).
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include <QMainWindow>

#include "trainscope/gui/Capabilities.h"
#include "trainscope/gui/ConfigDocument.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/RunRepository.h"

class QLabel;
class QListWidget;
class QStackedWidget;
class QTabWidget;
class QTableWidget;

namespace ts::gui {

class RunWizard;
class RunDashboard;
class PlannerPage;
class RunsPage;
class ComparePage;
class TimelinePage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  struct Options {
    QString presetFile;    // --preset
    QString dbPath;        // empty = $TRAINSCOPE_DB / default location
    QString enginePath;    // empty = EngineLocator
    bool reattach = true;  // follow runs still `running` in the database
    bool askOnClose = true;
  };
  explicit MainWindow(Options options, QWidget* parent = nullptr);
  ~MainWindow() override;

  RunWizard* wizard() const { return wizard_; }
  ConfigDocument* document() const { return doc_; }
  QTabWidget* liveTabs() const { return live_; }
  RunDashboard* dashboard(int i) const;
  enum Section { NewRun = 0, Live, Runs, Planner, Compare, Timeline };
  void showSection(int i);  // a Section
  PlannerPage* planner() const { return planner_; }
  RunsPage* runsPage() const { return runsPage_; }
  ComparePage* comparePage() const { return compare_; }
  TimelinePage* timelinePage() const { return timeline_; }
  // Starts the run again from a checkpoint with its recorded config (what the Runs page's
  // Resume does, there with the record read off the GUI thread; this one reads it in place).
  RunDashboard* resumeRun(int64_t runId, const QString& checkpointPath);
  // Starts a run of the current document (what Launch does). Returns the dashboard, or null
  // after a clear dialog when it could not start.
  RunDashboard* launch(const QStringList& extraArgs = {});
  const QString& databasePath() const { return dbPath_; }
  const Options& options() const { return options_; }
  const CapabilitySummary& capabilities() const { return caps_; }  // known once probed
  void setShowDialogs(bool v);
  QString lastError() const { return lastError_; }
  // Opens a dashboard tab for a run (takes ownership of both).
  RunDashboard* addDashboard(LiveRun* run, EngineClient* client);
  // Opens a dashboard that follows a recorded run from the database, controlled through the
  // control socket in runDir.
  RunDashboard* followRun(int64_t id, const QString& name, const QString& runDir);
  // What "Stop runs" in the close dialog does: sends each run this app started the stop command
  // and closes the window once every engine has written its final checkpoint and exited.
  void stopRunsAndClose();

 signals:
  // The start-up re-attach finished: how many running runs got a dashboard.
  void reattached(int count);

 public slots:
  void showStatusMessage(const QString& text);

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  void loadStartingPreset();
  QWidget* buildLivePage();
  void closeDashboard(int index);
  void buildSideBar();
  void buildStatusBar();
  void startCapabilityProbe();
  QWidget* buildRunsPage();
  void refreshRuns();
  void reattachRunning();
  RunDashboard* resumeFrom(const std::optional<core::RunDetail>& run, const QString& err,
                           int64_t runId, const QString& checkpointPath);
  void withRun(int64_t id,
               std::function<void(const std::optional<core::RunDetail>&, const QString&)> then);

  Options options_;
  QString dbPath_;
  RunRepository repo_;
  ConfigDocument* doc_;
  RunWizard* wizard_;
  QListWidget* side_;
  QStackedWidget* pages_;
  QTabWidget* live_;
  RunsPage* runsPage_ = nullptr;
  PlannerPage* planner_ = nullptr;
  ComparePage* compare_ = nullptr;
  TimelinePage* timeline_ = nullptr;
  QLabel* dbLabel_;
  QLabel* capsLabel_;
  CapabilityProbe* probe_;
  CapabilitySummary caps_;
  bool showDialogs_ = true;
  QString lastError_;
  int runCounter_ = 0;
  bool closingAfterStop_ = false;
};

}  // namespace ts::gui
