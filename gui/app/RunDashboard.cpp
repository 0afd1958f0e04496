#include "RunDashboard.h"

#include <algorithm>
#include <cmath>

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QScrollBar>
#include <QSlider>
#include <QSpinBox>
#include <QTimer>
#include <QVBoxLayout>

#include "ChartView.h"
#include "MemoryBars.h"
#include "trainscope/gui/ChartReduction.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/NumberFormat.h"
#include "trainscope/gui/RunControl.h"

namespace ts::gui {
namespace {

QString duration(double s) {
  const qint64 t = static_cast<qint64>(s + 0.5);
  if (t >= 3600) return QStringLiteral("%1 h %2 min").arg(t / 3600).arg((t % 3600) / 60);
  if (t >= 60) return QStringLiteral("%1 min %2 s").arg(t / 60).arg(t % 60);
  return QStringLiteral("%1 s").arg(t);
}

QString rate(double v) {
  if (v >= 1e6) return QString::number(v / 1e6, 'f', 2) + " M tokens/s";
  if (v >= 1e3) return QString::number(v / 1e3, 'f', 1) + " K tokens/s";
  return QString::number(v, 'f', 0) + " tokens/s";
}

// "parameters: 1.2M trainable (10.00%) · 11M frozen (NF4, 5.2 MiB) · teacher 124M"
QString paramCounts(const nlohmann::json& pc) {
  auto count = [](double n) {
    return n >= 1e9   ? QString::number(n / 1e9, 'f', 2) + "B"
           : n >= 1e6 ? QString::number(n / 1e6, 'f', 2) + "M"
           : n >= 1e3 ? QString::number(n / 1e3, 'f', 1) + "K"
                      : QString::number(n, 'f', 0);
  };
  const double total = pc.value("total", 0.0), trainable = pc.value("trainable", 0.0);
  QString t = QStringLiteral("parameters: %1 trainable (%2%) · %3 frozen")
                  .arg(count(trainable))
                  .arg(total > 0 ? 100.0 * trainable / total : 0.0, 0, 'f', 2)
                  .arg(count(pc.value("frozen", 0.0)));
  if (const double b = pc.value("nf4_bytes", 0.0); b > 0)
    t += b >= 1048576.0 ? QStringLiteral(" (NF4, %1 MiB)").arg(b / 1048576.0, 0, 'f', 1)
                        : QStringLiteral(" (NF4, %1 KiB)").arg(b / 1024.0, 0, 'f', 1);
  if (pc.value("teacher", 0.0) > 0)
    t += QStringLiteral(" · teacher %1").arg(count(pc.value("teacher", 0.0)));
  return t;
}

}  // namespace

RunDashboard::RunDashboard(LiveRun* run, EngineClient* client, QWidget* parent)
    : QWidget(parent), run_(run), client_(client) {
  QLayout* head = buildHeader();
  buildCharts();
  QWidget* lossBox = buildLossBox();
  QWidget* memBox = buildMemoryBox();
  log_ = new QPlainTextEdit;
  log_->setObjectName("Log");
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  log_->setMinimumHeight(90);
  QLayout* grid = buildGrid(lossBox, memBox);

  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(12, 12, 12, 12);
  lay->addLayout(head);
  lay->addLayout(grid, 1);
  connectControls();

  timer_ = new QTimer(this);
  timer_->setInterval(100);  // 10 Hz: smooth to the eye, bounded cost whatever the event rate
  connect(timer_, &QTimer::timeout, this, &RunDashboard::refresh);
  timer_->start();
  updateControls();
  refresh();
}

// Header: state, progress, ETA and controls.
QLayout* RunDashboard::buildHeader() {
  state_ = new QLabel;
  state_->setObjectName("SectionTitle");
  stats_ = new QLabel;
  stats_->setObjectName("Muted");
  params_ = new QLabel;
  params_->setObjectName("ParamCounts");
  params_->setToolTip(
      "Trainable parameters get gradients and optimizer state; frozen ones "
      "(a LoRA base, an NF4 base, a distillation teacher) only their weights");
  eta_ = new QLabel;
  eta_->setObjectName("Muted");
  eta_->setMinimumWidth(140);
  eta_->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  progress_->setTextVisible(true);
  pause_ = new QPushButton("Pause");
  pause_->setToolTip("Finish the current step, then wait (memory stays allocated)");
  resume_ = new QPushButton("Resume");
  stop_ = new QPushButton("Stop");
  stop_->setObjectName("Danger");
  stop_->setToolTip("Stop after the current step, save a checkpoint and finish the run record");
  checkpoint_ = new QPushButton("Checkpoint now");
  checkpoint_->setToolTip("Save a checkpoint after the current step");
  profile_ = new QPushButton("Profile now");
  profile_->setToolTip("Record a kernel timeline of the next steps");
  profileSteps_ = new QSpinBox;
  profileSteps_->setRange(1, 100);
  profileSteps_->setValue(3);
  profileSteps_->setSuffix(" steps");
  profileSteps_->setToolTip("How many steps to profile");

  for (QPushButton* b : {pause_, resume_, stop_, checkpoint_, profile_})
    b->setProperty("normalTip", b->toolTip());
  auto* controls = new QHBoxLayout;
  controls->addWidget(pause_);
  controls->addWidget(resume_);
  controls->addWidget(stop_);
  controls->addSpacing(12);
  controls->addWidget(checkpoint_);
  controls->addWidget(profile_);
  controls->addWidget(profileSteps_);
  controls->addStretch(1);
  controls->addWidget(eta_);

  auto* head = new QVBoxLayout;
  // Title and figures on their own lines: long run names or reasons never clip the numbers.
  state_->setWordWrap(true);
  head->addWidget(state_);
  head->addWidget(stats_);
  head->addWidget(params_);
  head->addWidget(progress_);
  head->addLayout(controls);
  return head;
}

void RunDashboard::buildCharts() {
  loss_ = new ChartView("Loss");
  loss_->setAxisTitles("step", "loss");
  lossRaw_ = loss_->addSeries("train (raw)", QColor("#2563eb"), ChartView::Style::FaintLine);
  lossSmooth_ = loss_->addSeries("train (smoothed)", QColor("#2563eb"));
  lossEval_ = loss_->addSeries("eval", QColor("#ea580c"), ChartView::Style::Points);
  lr_ = new ChartView("Learning rate");
  lr_->setAxisTitles("step", "learning rate");
  lr_->setYLabelFormat("%.1e");
  lr_->setLegendVisible(false);
  lr_->setYFloor(0);
  lrS_ = lr_->addSeries("lr", QColor("#0d9488"));
  tps_ = new ChartView("Throughput");
  tps_->setAxisTitles("step", "tokens/s");
  tps_->setYLabelFormat("%.0f");
  tps_->setYFloor(0);
  tpsS_ = tps_->addSeries("tokens/s (raw)", QColor("#7c3aed"), ChartView::Style::FaintLine);
  tpsSmooth_ = tps_->addSeries("tokens/s (smoothed)", QColor("#7c3aed"));
  tps_->setToolTip("Click a profiled step to open its kernel timeline");
  connect(tps_, &ChartView::clicked, this, [this](double x) { openProfiledStep(x); });
  scale_ = new ChartView("Loss scale (fp16)");
  scale_->setAxisTitles("step", "scale");
  scale_->setYLabelFormat("%.0f");
  scale_->setLegendVisible(false);
  scaleS_ = scale_->addSeries("loss scale", QColor("#db2777"));
  scale_->setVisible(false);
  memTime_ = new ChartView("Device memory over time");
  memTime_->setAxisTitles("step", "MiB");
  memTime_->setYLabelFormat("%.1f");
  memTime_->setYFloor(0);
}

// A click on the throughput chart at step x: that step's timeline when it was profiled.
void RunDashboard::openProfiledStep(double x) {
  const auto step = static_cast<int64_t>(std::llround(x));
  // A few pixels of slack: profiled windows are short and hard to hit exactly.
  const auto slack =
      std::max<int64_t>(1, static_cast<int64_t>(std::max<int64_t>(run_->lastStep(), 1) * 4 /
                                                std::max(1, tps_->plotPixels())));
  if (auto s = run_->profiledStepNear(step, slack); s && run_->runId() > 0) {
    emit timelineRequested(run_->runId(), *s);
  } else {
    emit message(QStringLiteral("Step %1 was not profiled: use Profile now, or a profiling "
                                "schedule in the config, to record a kernel timeline")
                     .arg(step));
  }
}

// The loss chart with its smoothing slider under it.
QWidget* RunDashboard::buildLossBox() {
  smoothing_ = new QSlider(Qt::Horizontal);
  smoothing_->setRange(0, 99);
  smoothing_->setValue(static_cast<int>(run_->smoothing() * 100 + 0.5));
  smoothing_->setToolTip(
      "Debiased exponential moving average of the training loss; the raw "
      "curve stays faint behind it");
  smoothingValue_ = new QLabel;
  smoothingValue_->setObjectName("Muted");
  smoothingValue_->setText(QString::number(smoothing_->value() / 100.0, 'f', 2));
  connect(smoothing_, &QSlider::valueChanged, this, [this](int v) {
    run_->setSmoothing(v / 100.0);
    smoothingValue_->setText(QString::number(v / 100.0, 'f', 2));
    refresh();
  });
  auto* lossBox = new QWidget;
  auto* lb = new QVBoxLayout(lossBox);
  lb->setContentsMargins(0, 0, 0, 0);
  lb->addWidget(loss_, 1);
  auto* sm = new QHBoxLayout;
  sm->addWidget(new QLabel("Smoothing"));
  sm->addWidget(smoothing_, 1);
  sm->addWidget(smoothingValue_);
  lb->addLayout(sm);
  return lossBox;
}

QWidget* RunDashboard::buildMemoryBox() {
  bars_ = new MemoryBars;
  auto* memBox = new QFrame;
  memBox->setObjectName("Card");
  auto* mb = new QVBoxLayout(memBox);
  auto* mt = new QLabel("Memory per rank");
  mt->setObjectName("SectionTitle");
  mb->addWidget(mt);
  mb->addWidget(bars_, 1);
  return memBox;
}

QLayout* RunDashboard::buildGrid(QWidget* lossBox, QWidget* memBox) {
  auto* grid = new QGridLayout;
  grid->setSpacing(10);
  grid->addWidget(lossBox, 0, 0);
  grid->addWidget(lr_, 0, 1);
  grid->addWidget(memBox, 0, 2, 2, 1);
  grid->addWidget(tps_, 1, 0);
  grid->addWidget(memTime_, 1, 1);
  auto* bottom = new QHBoxLayout;  // loss scale only appears for fp16; the log takes the rest
  bottom->addWidget(scale_, 1);
  bottom->addWidget(log_, 2);
  grid->addLayout(bottom, 2, 0, 1, 3);
  grid->setColumnStretch(0, 3);
  grid->setColumnStretch(1, 3);
  grid->setColumnStretch(2, 2);
  grid->setRowStretch(0, 3);
  grid->setRowStretch(1, 3);
  grid->setRowStretch(2, 2);
  return grid;
}

void RunDashboard::connectControls() {
  // Through the engine's stdin when this app started it, else through the control socket in
  // its run folder (a run re-attached after a restart, or followed from Runs).
  auto send = [this](core::CommandType t, int steps = 0) {
    if (client_ && client_->isRunning()) {
      client_->send(t, steps);
    } else if (const QString err = RunControl::send(run_->runDir(), t, steps); !err.isEmpty()) {
      run_->addLog("error", "command not delivered: " + err);
      emit message("Command not delivered: " + err);
      run_->setControllable(false);
    } else if (t == core::CommandType::Pause) {
      run_->setState(RunState::Paused);  // the engine's `paused` log confirms it
    } else if (t == core::CommandType::Resume) {
      run_->setState(RunState::Running);
    }
    updateControls();
  };
  connect(pause_, &QPushButton::clicked, this, [send] { send(core::CommandType::Pause); });
  connect(resume_, &QPushButton::clicked, this, [send] { send(core::CommandType::Resume); });
  connect(stop_, &QPushButton::clicked, this, [this, send] {
    send(core::CommandType::Stop);
    run_->addLog("info", "stop requested");
  });
  connect(checkpoint_, &QPushButton::clicked, this, [this, send] {
    send(core::CommandType::Checkpoint);
    run_->addLog("info", "checkpoint requested");
  });
  connect(profile_, &QPushButton::clicked, this, [this, send] {
    send(core::CommandType::Profile, profileSteps_->value());
    run_->addLog("info",
                 QStringLiteral("profiling of %1 steps requested").arg(profileSteps_->value()));
  });
  connect(run_, &LiveRun::stateChanged, this, [this] { updateControls(); });
}

// Controls follow what the engine can still act on: none once the run finished (a stop or a
// checkpoint would go nowhere), and for a run this app did not start, only while its engine
// answers on the control socket.
void RunDashboard::updateControls() {
  const RunState s = run_->state();
  const bool reachable = (client_ && client_->isRunning()) || (!client_ && run_->controllable());
  const bool live = reachable && run_->isActive() && s != RunState::Detached;
  pause_->setEnabled(live && s == RunState::Running);
  resume_->setEnabled(live && s == RunState::Paused);
  stop_->setEnabled(live);
  checkpoint_->setEnabled(live && s != RunState::Starting);
  profile_->setEnabled(live && s != RunState::Starting);
  profileSteps_->setEnabled(profile_->isEnabled());
  const QString why =
      s == RunState::Detached
          ? QStringLiteral(
                "This run is followed from the database: its engine does not answer "
                "on %1 (another machine, or an engine without a control socket)")
                .arg(run_->runDir().isEmpty() ? QStringLiteral("its control socket")
                                              : run_->runDir() + "/control.sock")
      : !run_->isActive() ? QStringLiteral("The run has ended")
                          : QString();
  for (QWidget* w :
       {static_cast<QWidget*>(pause_), static_cast<QWidget*>(resume_), static_cast<QWidget*>(stop_),
        static_cast<QWidget*>(checkpoint_), static_cast<QWidget*>(profile_)})
    w->setToolTip(why.isEmpty() ? w->property("normalTip").toString() : why);
}

void RunDashboard::refresh() {
  if (!run_->dirty() && !force_) return;
  run_->clearDirty();
  force_ = false;
  ++redraws_;
  refreshHeader();
  // Charts: x spans the whole run when known, so the curve grows into its frame.
  const double x0 = 0;
  const double x1 = std::max<double>(
      {1.0, static_cast<double>(run_->totalSteps()), static_cast<double>(run_->lastStep())});
  for (ChartView* c : {loss_, lr_, tps_, scale_, memTime_}) c->setXRange(x0, x1);
  refreshLossChart(x0, x1);
  if (const auto& pc = run_->parameterCounts(); pc.is_object()) params_->setText(paramCounts(pc));
  refreshRateCharts(x0, x1);
  refreshMemory(x0, x1);
  appendNewLog();
  updateControls();
}

// Title, figures line, progress and ETA.
void RunDashboard::refreshHeader() {
  const RunState s = run_->state();
  QString st = QStringLiteral("%1 — %2").arg(run_->name(), toString(s));
  if (!run_->finishReason().isEmpty() && !run_->isActive())
    st += ": " + run_->finishReason().left(160);
  state_->setText(st);
  const QString backend =
      run_->hello().is_object()
          ? QString::fromStdString(run_->hello().value("backend", std::string()))
          : QString();
  // Several ranks: what rank 0 sent in collectives in the last step.
  const QString comm = run_->lastCommBytes() >= 0
                           ? QStringLiteral(" · %1 ranks, comm %2/step")
                                 .arg(run_->ranks())
                                 .arg(formatBytes(static_cast<double>(run_->lastCommBytes())))
                           : QString();
  stats_->setText(
      QStringLiteral("step %1%2 · loss %3%8 · %4%5%6%7")
          .arg(run_->lastStep())
          .arg(run_->totalSteps() > 0 ? QStringLiteral(" / %1").arg(run_->totalSteps()) : QString())
          .arg(formatSignificant(run_->lastLoss()))
          .arg(rate(run_->lastTokensPerS()))
          .arg(comm)
          .arg(run_->skippedSteps() > 0 ? QStringLiteral(" · %1 skipped").arg(run_->skippedSteps())
                                        : QString())
          .arg(backend.isEmpty() ? QString() : " · " + backend)
          .arg(run_->accuracy() ? " · accuracy " + formatAccuracy(*run_->accuracy()) : QString()));
  progress_->setValue(static_cast<int>(run_->progress() * 1000));
  progress_->setFormat(QStringLiteral("%1%").arg(run_->progress() * 100, 0, 'f', 1));
  if (s == RunState::Paused) {
    eta_->setText(toString(s));  // no pace while paused, so no ETA
  } else if (run_->isActive()) {
    const auto eta = run_->etaSeconds();
    eta_->setText(eta ? "ETA " + duration(*eta) : QStringLiteral("ETA —"));
  } else {
    eta_->setText(toString(s));
  }
}

// Raw, smoothed and eval loss; a distillation run's two terms once it reports them.
void RunDashboard::refreshLossChart(double x0, double x1) {
  const int px = loss_->plotPixels();
  loss_->setPoints(lossRaw_, minMaxEnvelope(run_->loss(), x0, x1, px));
  loss_->setPoints(lossSmooth_, minMaxEnvelope(run_->lossSmoothed(), x0, x1, px));
  loss_->setPoints(lossEval_, minMaxEnvelope(run_->evalLoss(), x0, x1, px));
  if (!run_->distillCe().empty()) {  // distillation: both terms of the objective
    if (distillCeS_ < 0) {
      distillCeS_ = loss_->addSeries("hard CE", QColor("#16a34a"));
      distillKlS_ = loss_->addSeries("KL to teacher", QColor("#9333ea"));
    }
    loss_->setPoints(distillCeS_, minMaxEnvelope(run_->distillCe(), x0, x1, px));
    loss_->setPoints(distillKlS_, minMaxEnvelope(run_->distillKl(), x0, x1, px));
  }
}

// Learning rate, throughput and (fp16) the loss scale.
void RunDashboard::refreshRateCharts(double x0, double x1) {
  lr_->setPoints(lrS_, minMaxEnvelope(run_->lr(), x0, x1, lr_->plotPixels()));
  tps_->setPoints(tpsS_, minMaxEnvelope(run_->tokensPerS(), x0, x1, tps_->plotPixels()));
  tps_->setPoints(tpsSmooth_,
                  minMaxEnvelope(run_->tokensPerSSmoothed(), x0, x1, tps_->plotPixels()));
  if (run_->usesLossScale()) {
    scale_->setVisible(true);
    scale_->setPoints(scaleS_, minMaxEnvelope(run_->lossScale(), x0, x1, scale_->plotPixels()));
  }
}

// Device memory over time (a series per rank) and the bars: measured when there is a
// measurement (each rank's prediction marked), else the plan.
void RunDashboard::refreshMemory(double x0, double x1) {
  const auto& mem = run_->memoryOverTime();
  while (memTimeS_.size() < mem.size()) {
    const int r = static_cast<int>(memTimeS_.size());
    memTimeS_.push_back(
        memTime_->addSeries(QStringLiteral("rank %1").arg(r), categoryColor(r % 5)));
  }
  memTime_->setLegendVisible(mem.size() > 1);
  for (size_t r = 0; r < mem.size(); ++r) {
    auto pts = minMaxEnvelope(mem[r], x0, x1, memTime_->plotPixels());
    for (auto& p : pts) p.setY(p.y() / (1024.0 * 1024.0));
    memTime_->setPoints(memTimeS_[r], pts);
  }
  bars_->setMeasuredTotals(run_->processMemory(), run_->deviceMemoryCount());
  if (run_->measured())
    bars_->setReports(run_->measured(), run_->predictedPerRank(), capacity_, false);
  else
    bars_->setReports(run_->predicted(), std::nullopt, capacity_, true);
}

// Log: only lines not shown yet.
void RunDashboard::appendNewLog() {
  const auto& log = run_->log();
  const uint64_t total = run_->logAppended();
  uint64_t fresh = total - logShown_;
  if (fresh > log.size()) fresh = log.size();
  for (size_t i = log.size() - fresh; i < log.size(); ++i) {
    const auto& l = log[i];
    const QString color = l.level == "error"     ? "#b42318"
                          : l.level == "warning" ? "#9a6700"
                                                 : "#323f4b";
    log_->appendHtml(
        QStringLiteral("<span style='color:%1'>%2</span>").arg(color, l.text.toHtmlEscaped()));
  }
  logShown_ = total;
}

}  // namespace ts::gui
