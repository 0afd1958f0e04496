#include "MainWindow.h"

#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDir>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QStackedWidget>
#include <QStandardPaths>
#include <QStatusBar>
#include <QStyle>
#include <QTabWidget>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "ComparePage.h"
#include "PlannerPage.h"
#include "RunDashboard.h"
#include "RunWizard.h"
#include "RunsPage.h"
#include "TimelinePage.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/gui/PresetLibrary.h"

namespace ts::gui {

static QString resolveDb(const QString& given) {
  if (!given.isEmpty()) return given;
  return QString::fromStdString(core::defaultDatabasePath());  // honours $TRAINSCOPE_DB
}

MainWindow::MainWindow(Options options, QWidget* parent)
    : QMainWindow(parent),
      options_(std::move(options)),
      dbPath_(resolveDb(options_.dbPath)),
      repo_(dbPath_.toStdString()),
      doc_(new ConfigDocument(this)) {
  setWindowTitle("Trainscope");
  setWindowIcon(QIcon(":/icons/trainscope.png"));
  resize(1440, 900);
  loadStartingPreset();

  wizard_ = new RunWizard(doc_, &repo_);
  QWidget* livePage = buildLivePage();
  pages_ = new QStackedWidget;
  pages_->addWidget(wizard_);
  pages_->addWidget(livePage);
  pages_->addWidget(buildRunsPage());
  planner_ = new PlannerPage;
  pages_->addWidget(planner_);
  compare_ = new ComparePage(repo_);
  pages_->addWidget(compare_);
  timeline_ = new TimelinePage(repo_);
  pages_->addWidget(timeline_);
  connect(compare_, &ComparePage::message, this, &MainWindow::showStatusMessage);
  connect(timeline_, &TimelinePage::message, this, &MainWindow::showStatusMessage);

  buildSideBar();
  auto* central = new QWidget;
  auto* h = new QHBoxLayout(central);
  h->setContentsMargins(0, 0, 0, 0);
  h->setSpacing(0);
  h->addWidget(side_);
  h->addWidget(pages_, 1);
  setCentralWidget(central);
  side_->setCurrentRow(0);
  buildStatusBar();

  connect(wizard_, &RunWizard::launchRequested, this, [this] { launch(); });
  startCapabilityProbe();
  if (options_.reattach) reattachRunning();
}

// Start from the preset given on the command line, else the built-in default.
void MainWindow::loadStartingPreset() {
  bool loaded = false;
  if (!options_.presetFile.isEmpty()) {
    QString err;
    if (auto p = PresetLibrary::load(options_.presetFile, &err)) {
      doc_->reset(p->doc);
      loaded = true;
    } else {
      lastError_ = err;
    }
  }
  if (!loaded) {
    auto presets = PresetLibrary::builtIn();
    if (!presets.empty()) doc_->reset(presets.front().doc);
  }
}

// The dashboards' tabs, with a note in their place while none is open.
QWidget* MainWindow::buildLivePage() {
  live_ = new QTabWidget;
  live_->setTabsClosable(true);
  live_->setDocumentMode(true);
  connect(live_, &QTabWidget::tabCloseRequested, this, &MainWindow::closeDashboard);
  auto* liveEmpty = new QLabel("No run is live. Start one from New run.");
  liveEmpty->setAlignment(Qt::AlignCenter);
  liveEmpty->setObjectName("Muted");
  auto* livePage = new QStackedWidget;
  livePage->addWidget(liveEmpty);
  livePage->addWidget(live_);
  connect(live_, &QTabWidget::currentChanged, livePage,
          [this, livePage] { livePage->setCurrentIndex(live_->count() > 0 ? 1 : 0); });
  return livePage;
}

// Closing a training run's tab asks first; the run then finishes in the background.
void MainWindow::closeDashboard(int i) {
  auto* d = dashboard(i);
  if (d && d->run()->isActive() && d->client() && d->client()->isRunning()) {
    const auto b = QMessageBox::question(
        this, "Close the dashboard",
        "This run is still training. Close its tab and let it finish in the background?\n\n"
        "It keeps recording to the database and can be followed again from Runs.",
        QMessageBox::Yes | QMessageBox::Cancel, QMessageBox::Cancel);
    if (b != QMessageBox::Yes) return;
    d->client()->detach();
  }
  QWidget* w = live_->widget(i);
  live_->removeTab(i);
  w->deleteLater();
}

void MainWindow::buildSideBar() {
  side_ = new QListWidget;
  side_->setObjectName("SideBar");
  side_->setFixedWidth(150);
  side_->setIconSize(QSize(18, 18));
  side_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_FileDialogNewFolder), "New run"));
  side_->addItem(new QListWidgetItem(style()->standardIcon(QStyle::SP_MediaPlay), "Live"));
  side_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_FileDialogDetailedView), "Runs"));
  side_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_FileDialogInfoView), "Planner"));
  side_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_FileDialogContentsView), "Compare"));
  side_->addItem(
      new QListWidgetItem(style()->standardIcon(QStyle::SP_MediaSeekForward), "Timeline"));
  connect(side_, &QListWidget::currentRowChanged, pages_, &QStackedWidget::setCurrentIndex);
  connect(side_, &QListWidget::currentRowChanged, this, [this](int r) {
    if (r == Runs) refreshRuns();
    if (r == Timeline) timeline_->reloadRuns();
  });
}

void MainWindow::buildStatusBar() {
  dbLabel_ = new QLabel("Database: " + QDir::toNativeSeparators(dbPath_));
  dbLabel_->setToolTip("Set $TRAINSCOPE_DB to use another file");
  dbLabel_->setMinimumWidth(120);  // the path may shrink; the backends line stays whole
  capsLabel_ = new QLabel("Backends: probing…");
  statusBar()->addWidget(dbLabel_, 1);
  statusBar()->addPermanentWidget(capsLabel_);
}

// What the engine can do, asked once in the background; the wizard and planner follow.
void MainWindow::startCapabilityProbe() {
  probe_ = new CapabilityProbe(this);
  connect(probe_, &CapabilityProbe::ready, this, [this](const CapabilitySummary& s) {
    caps_ = s;
    capsLabel_->setText("Backends: " + s.text);
    wizard_->setCapabilities(s);
    planner_->setCapabilities(s.raw);
  });
  probe_->start(options_.enginePath.isEmpty() ? EngineLocator::findEngine() : options_.enginePath);
}

MainWindow::~MainWindow() = default;

RunDashboard* MainWindow::dashboard(int i) const {
  return qobject_cast<RunDashboard*>(live_->widget(i));
}

void MainWindow::showSection(int i) {
  side_->setCurrentRow(i);
}

RunDashboard* MainWindow::addDashboard(LiveRun* run, EngineClient* client) {
  auto* d = new RunDashboard(run, client);
  connect(d, &RunDashboard::message, this, &MainWindow::showStatusMessage);
  connect(d, &RunDashboard::timelineRequested, this, [this](int64_t runId, int64_t step) {
    timeline_->showRun(runId, step);
    showSection(Timeline);
  });
  run->setParent(d);
  if (client) client->setParent(d);
  d->setDeviceCapacity(caps_.deviceMemory > 0 ? caps_.deviceMemory : hostMemoryBytes());
  const int i = live_->addTab(d, run->name());
  live_->setCurrentIndex(i);
  connect(run, &LiveRun::stateChanged, this, [this, d, run](RunState s) {
    const int idx = live_->indexOf(d);
    if (idx < 0) return;
    live_->setTabText(idx, run->isActive() ? run->name() : run->name() + " (" + toString(s) + ")");
  });
  return d;
}

RunDashboard* MainWindow::launch(const QStringList& extraArgs) {
  lastError_.clear();
  const auto blockers = wizard_->launchBlockers();
  if (!blockers.isEmpty()) {
    lastError_ = "The configuration has problems:\n" + blockers.join('\n');
    if (showDialogs_) QMessageBox::warning(this, "Cannot launch", lastError_);
    return nullptr;
  }
  // What Review shows: without the model keys the chosen family does not read.
  const nlohmann::json cfg = doc_->resolvedForFamily();
  QString name = QString::fromStdString(cfg.value("name", std::string("run")));
  auto* run = new LiveRun(name);
  auto* client = new EngineClient(run);
  if (cfg.contains("train")) run->setTotalSteps(cfg["train"].value("steps", int64_t{0}));
  if (auto est = doc_->estimate()) run->setPredicted(est->report);
  LaunchOptions lo;
  lo.enginePath = options_.enginePath;
  lo.dbPath = dbPath_;
  lo.extraArgs = extraArgs;
  const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss");
  lo.runDir = QDir(QFileInfo(dbPath_).absolutePath())
                  .filePath(QStringLiteral("runs/%1-%2-%3").arg(stamp, name).arg(++runCounter_));
  if (!client->start(cfg, lo)) {
    lastError_ = client->error();
    if (showDialogs_) QMessageBox::critical(this, "Cannot start the run", lastError_);
    delete client;
    delete run;
    return nullptr;
  }
  auto* d = addDashboard(run, client);
  connect(client, &EngineClient::startFailed, this, [this](const QString& msg) {
    lastError_ = msg;
    if (showDialogs_) QMessageBox::critical(this, "The run did not start", msg);
  });
  showSection(1);
  return d;
}

QWidget* MainWindow::buildRunsPage() {
  runsPage_ = new RunsPage(repo_);
  connect(runsPage_, &RunsPage::message, this,
          [this](const QString& m) { statusBar()->showMessage(m, 8000); });
  connect(runsPage_->browser(), &RunsBrowser::loaded, wizard_, &RunWizard::refreshPastRuns);
  connect(runsPage_, &RunsPage::cloneRequested, this, [this](int64_t id) {
    withRun(id, [this](const std::optional<core::RunDetail>& run, const QString& err) {
      if (!run || run->config.is_null()) {
        if (showDialogs_)
          QMessageBox::information(this, "Clone",
                                   err.isEmpty() ? "That run has no recorded config." : err);
        return;
      }
      auto cfg = run->config;
      cfg["name"] = run->name + "-clone";
      doc_->reset(cfg);
      wizard_->goToPage(0);
      showSection(0);
    });
  });
  connect(runsPage_, &RunsPage::resumeRequested, this,
          [this](int64_t id, const QString& checkpoint) {
            withRun(id, [this, id, checkpoint](const std::optional<core::RunDetail>& run,
                                               const QString& err) {
              resumeFrom(run, err, id, checkpoint);
            });
          });
  connect(runsPage_, &RunsPage::compareRequested, this, [this](const QList<qint64>& ids) {
    compare_->compareRuns(ids);
    showSection(Compare);
  });
  connect(runsPage_, &RunsPage::followRequested, this, [this](int64_t id) {
    for (int i = 0; i < live_->count(); ++i)
      if (dashboard(i)->run()->runId() == id) {
        live_->setCurrentIndex(i);
        showSection(1);
        return;
      }
    // The follower reads the name and folder from the database (off this thread).
    const auto* row = runsPage_->runRow(id);
    followRun(id, row ? QString::fromStdString(row->name) : QStringLiteral("run #%1").arg(id),
              row ? QString::fromStdString(row->runDir) : QString());
    showSection(1);
  });
  return runsPage_;
}

RunDashboard* MainWindow::resumeRun(int64_t runId, const QString& checkpointPath) {
  QString err;
  const auto run = repo_.getRun(runId, &err);
  return resumeFrom(run, err, runId, checkpointPath);
}

RunDashboard* MainWindow::resumeFrom(const std::optional<core::RunDetail>& run, const QString& err,
                                     int64_t runId, const QString& checkpointPath) {
  if (!run || run->config.is_null()) {
    lastError_ = err.isEmpty()
                     ? QStringLiteral("Run #%1 has no recorded config to resume with.").arg(runId)
                     : err;
    if (showDialogs_) QMessageBox::warning(this, "Cannot resume", lastError_);
    return nullptr;
  }
  // The recorded config goes through the wizard's document, so the same validation applies.
  doc_->reset(run->config);
  return launch({"--resume", checkpointPath});
}

// One run's record, read on a worker thread (a busy database may hold a query for seconds),
// handed to `then` on this thread.
void MainWindow::withRun(
    int64_t id, std::function<void(const std::optional<core::RunDetail>&, const QString&)> then) {
  using Result = std::pair<std::optional<core::RunDetail>, QString>;
  auto* watcher = new QFutureWatcher<Result>(this);
  connect(watcher, &QFutureWatcher<Result>::finished, this, [watcher, then = std::move(then)] {
    watcher->deleteLater();
    const Result r = watcher->result();
    then(r.first, r.second);
  });
  const RunRepository repo = repo_;
  watcher->setFuture(QtConcurrent::run([repo, id] {
    QString err;
    auto run = repo.getRun(id, &err);
    return Result{std::move(run), err};
  }));
}

void MainWindow::setShowDialogs(bool v) {
  showDialogs_ = v;
  if (timeline_) timeline_->setShowDialogs(v);
  if (runsPage_) runsPage_->setShowDialogs(v);  // a failed reload must not block a test on a box
}

void MainWindow::showStatusMessage(const QString& text) {
  statusBar()->showMessage(text, 8000);
}

void MainWindow::refreshRuns() {
  if (!runsPage_) return;
  runsPage_->setShowDialogs(showDialogs_);
  runsPage_->reload();  // on a worker thread; the wizard's past runs follow when it lands
}

// Runs still recording (kept running when the app last closed, or started elsewhere) get
// their dashboards back, with their history, controllable through their control sockets. The
// database is read on a worker thread; the window opens on Live when there are any.
void MainWindow::reattachRunning() {
  auto* watcher = new QFutureWatcher<std::vector<core::RunSummary>>(this);
  const RunRepository repo = repo_;
  connect(watcher, &QFutureWatcher<std::vector<core::RunSummary>>::finished, this, [this, watcher] {
    watcher->deleteLater();
    int attached = 0;
    for (const auto& r : watcher->result()) {
      if (r.status != "running") continue;
      bool open = false;
      for (int i = 0; i < live_->count(); ++i) open |= dashboard(i)->run()->runId() == r.id;
      if (open) continue;
      followRun(r.id, QString::fromStdString(r.name), QString::fromStdString(r.runDir));
      dashboard(live_->count() - 1)
          ->run()
          ->addLog("info", QStringLiteral("Re-attached to run #%1 (pid %2).").arg(r.id).arg(r.pid));
      ++attached;
    }
    if (attached > 0) showSection(Live);
    emit reattached(attached);
  });
  watcher->setFuture(QtConcurrent::run([repo] { return repo.listRuns(); }));
}

RunDashboard* MainWindow::followRun(int64_t id, const QString& name, const QString& runDir) {
  auto* run = new LiveRun(name);
  run->setRunDir(runDir);
  new DatabaseFollower(repo_, id, run, run);
  return addDashboard(run, nullptr);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  QList<RunDashboard*> running;
  for (int i = 0; i < live_->count(); ++i)
    if (auto* d = dashboard(i); d && d->client() && d->client()->isRunning()) running << d;
  if (closingAfterStop_) {
    // Closed again while the stops land: they finish on their own (the command was sent).
    for (auto* d : running) d->client()->detach();
    e->accept();
    return;
  }
  if (running.isEmpty() || !options_.askOnClose) {
    for (auto* d : running) d->client()->detach();  // default: keep running
    e->accept();
    return;
  }
  QMessageBox box(QMessageBox::Question, "Runs are still training",
                  QStringLiteral("%1 run%2 still training. Keep %3 running in the background?\n\n"
                                 "They keep recording to the database; Trainscope re-attaches "
                                 "to them on its next start.")
                      .arg(running.size())
                      .arg(running.size() == 1 ? " is" : "s are")
                      .arg(running.size() == 1 ? "it" : "them"),
                  QMessageBox::NoButton, this);
  auto* keep = box.addButton("Keep running", QMessageBox::AcceptRole);
  auto* stop = box.addButton("Stop runs", QMessageBox::DestructiveRole);
  box.addButton(QMessageBox::Cancel);
  box.setDefaultButton(keep);
  box.exec();
  if (box.clickedButton() == keep) {
    for (auto* d : running) d->client()->detach();
    e->accept();
  } else if (box.clickedButton() == stop) {
    e->ignore();
    stopRunsAndClose();
  } else {
    e->ignore();
  }
}

// "Stop runs": each engine gets the stop command and the window stays until every one has
// written its final checkpoint and exited; nothing is killed. Closing again leaves them
// finishing their stop in the background.
void MainWindow::stopRunsAndClose() {
  QList<RunDashboard*> running;
  for (int i = 0; i < live_->count(); ++i)
    if (auto* d = dashboard(i); d && d->client() && d->client()->isRunning()) running << d;
  if (running.isEmpty()) {
    close();
    return;
  }
  closingAfterStop_ = true;
  for (auto* d : running) {
    d->client()->send(core::CommandType::Stop);
    d->run()->addLog("info", "stop requested: the app closes when the final checkpoint is written");
    connect(d->client(), &EngineClient::exited, this, [this] {
      for (int i = 0; i < live_->count(); ++i)
        if (auto* o = dashboard(i); o && o->client() && o->client()->isRunning()) {
          statusBar()->showMessage(
              QStringLiteral("Stopping runs: waiting for their final "
                             "checkpoints…"));
          return;
        }
      close();
    });
  }
  showSection(Live);
  statusBar()->showMessage(QStringLiteral("Stopping %1 run%2: waiting for the final checkpoint…")
                               .arg(running.size())
                               .arg(running.size() == 1 ? "" : "s"));
}

}  // namespace ts::gui
