#include "TimelinePage.h"

#include <algorithm>

#include <QComboBox>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QStyle>
#include <QTableView>
#include <QTextDocument>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "TimelineView.h"
#include "trainscope/profiler/ChromeTrace.h"

namespace ts::gui {

namespace {
QString bytesText(int64_t b) {
  if (b <= 0) return QStringLiteral("—");
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return QString::number(v, 'f', u ? 1 : 0) + " " + units[u];
}
QString flopsText(double f) {
  if (f <= 0) return QStringLiteral("—");
  if (f >= 1e9) return QString::number(f / 1e9, 'f', 2) + " GFLOP";
  if (f >= 1e6) return QString::number(f / 1e6, 'f', 2) + " MFLOP";
  return QString::number(f / 1e3, 'f', 1) + " kFLOP";
}
QString rangeText(const TimelineData& d, int32_t id) {
  const auto& s = d.span(id);
  return QStringLiteral("%1 <span style='color:#7b8794'>(%2, at %3, %4)</span>")
      .arg(QString::fromStdString(d.spanName(id)).toHtmlEscaped())
      .arg(d.lanes()[static_cast<size_t>(d.laneOfTrack(s.track))].name)
      .arg(formatDurationNs(static_cast<double>(s.start)))
      .arg(formatDurationNs(static_cast<double>(s.duration())));
}
}  // namespace

TimelinePage::TimelinePage(RunRepository repo, QWidget* parent)
    : QWidget(parent),
      repo_(std::move(repo)),
      model_(new TimelineModel(this)),
      view_(new TimelineView(model_)),
      range_(new TimelineRangeModel(this)) {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(16, 12, 16, 12);
  auto* title = new QLabel("Kernel timeline");
  title->setObjectName("PageTitle");
  outer->addWidget(title);
  auto* hint = new QLabel(
      "Profiled steps of a run, per rank and host thread or GPU stream. Wheel: zoom, drag: pan, "
      "shift-drag or right-drag: select a range to aggregate it, click: span details.");
  hint->setObjectName("PageHint");
  hint->setWordWrap(true);
  outer->addWidget(hint);
  outer->addLayout(buildToolbar());
  status_ = new QLabel;
  status_->setObjectName("Muted");
  status_->setWordWrap(true);
  outer->addWidget(status_);

  // ---- the timeline over the range table and the details
  auto* split = new QSplitter(Qt::Vertical);
  split->setChildrenCollapsible(false);
  split->addWidget(view_);
  auto* bottom = new QSplitter(Qt::Horizontal);
  bottom->setChildrenCollapsible(false);
  bottom->addWidget(buildRangeBox());
  bottom->addWidget(buildDetailBox());
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  split->addWidget(bottom);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  outer->addWidget(split, 1);

  connectViews();
  export_->setEnabled(false);
  reloadRuns();
}

// ---- toolbar: run, window, fit, export
QLayout* TimelinePage::buildToolbar() {
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel("Run"));
  runs_ = new QComboBox;
  runs_->setMinimumContentsLength(28);
  runs_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  bar->addWidget(runs_, 2);
  bar->addSpacing(8);
  bar->addWidget(new QLabel("Window"));
  windows_ = new QComboBox;
  windows_->setMinimumContentsLength(22);
  windows_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  bar->addWidget(windows_, 1);
  fit_ = new QPushButton("Fit");
  fit_->setToolTip("Show the whole profile (F)");
  bar->addWidget(fit_);
  export_ = new QPushButton("Export Chrome trace…");
  export_->setToolTip("Write the profile as Chrome trace JSON (Perfetto, chrome://tracing)");
  bar->addWidget(export_);
  return bar;
}

// The selected range aggregated per span name, over the chosen lanes.
QGroupBox* TimelinePage::buildRangeBox() {
  auto* rangeBox = new QGroupBox("Selected range");
  auto* rv = new QVBoxLayout(rangeBox);
  auto* rangeBar = new QHBoxLayout;
  rangeLabel_ = new QLabel("Shift-drag or right-drag on the timeline to select a range.");
  rangeLabel_->setObjectName("Muted");
  rangeLabel_->setWordWrap(true);
  rangeBar->addWidget(rangeLabel_, 1);
  lanes_ = new QComboBox;
  lanes_->setToolTip("Lanes the aggregation includes");
  rangeBar->addWidget(lanes_);
  rv->addLayout(rangeBar);
  table_ = new QTableView;
  table_->setModel(range_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(TimelineRangeModel::Total, Qt::DescendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setAlternatingRowColors(true);
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setDefaultSectionSize(22);
  table_->horizontalHeader()->setSectionResizeMode(TimelineRangeModel::Name, QHeaderView::Stretch);
  for (int c = TimelineRangeModel::Category; c < TimelineRangeModel::ColumnCount; ++c)
    table_->horizontalHeader()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
  rv->addWidget(table_);
  return rangeBox;
}

// The clicked span's details, with a way to its launching host range.
QGroupBox* TimelinePage::buildDetailBox() {
  auto* detailBox = new QGroupBox("Span");
  auto* dv = new QVBoxLayout(detailBox);
  details_ = new QLabel("Click a span on the timeline.");
  details_->setObjectName("PageHint");
  details_->setWordWrap(true);
  details_->setTextFormat(Qt::RichText);
  details_->setAlignment(Qt::AlignTop | Qt::AlignLeft);
  details_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  details_->setMinimumWidth(300);
  dv->addWidget(details_, 1);
  gotoHost_ = new QPushButton("Go to launching host range");
  gotoHost_->setEnabled(false);
  dv->addWidget(gotoHost_, 0, Qt::AlignLeft);
  return detailBox;
}

void TimelinePage::connectViews() {
  connect(model_, &TimelineModel::changed, this, &TimelinePage::onLoaded);
  connect(model_, &TimelineModel::loadFailed, this, [this](const QString& e) {
    setStatus(e, true);
    view_->setStatusText(e);
    emit loaded(model_->runId());
  });
  connect(view_, &TimelineView::rangeSelected, this, &TimelinePage::onRangeSelected);
  connect(view_, &TimelineView::selectionCleared, this, [this] {
    range_->clear();
    rangeLabel_->setText("Shift-drag or right-drag on the timeline to select a range.");
  });
  connect(view_, &TimelineView::spanClicked, this, &TimelinePage::showSpan);
  connect(fit_, &QPushButton::clicked, view_, &TimelineView::zoomToFit);
  connect(export_, &QPushButton::clicked, this, &TimelinePage::exportDialog);
  connect(gotoHost_, &QPushButton::clicked, this, [this] {
    if (hostOfSelected_ >= 0) view_->selectSpan(hostOfSelected_, true);
  });
  connect(lanes_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          &TimelinePage::recomputeRange);
  connect(windows_, qOverload<int>(&QComboBox::activated), this, [this](int i) { showWindow(i); });
  connect(runs_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int i) {
    if (fillingRuns_ || i < 0) return;
    const qlonglong id = runs_->itemData(i).toLongLong();
    if (id > 0 && id != model_->runId()) showRun(id);
  });
}

// The window picker: 0 is the whole profile, i the i-th profiled window with a little margin.
void TimelinePage::showWindow(int i) {
  const TimelineData* d = model_->data();
  if (!d) return;
  if (i <= 0) {
    view_->zoomToFit();
    return;
  }
  const auto& w = d->windows()[static_cast<size_t>(i - 1)];
  const int64_t pad = std::max<int64_t>(1, (w.end - w.start) / 50);
  view_->setVisibleRange(w.start - pad, w.end + pad);
}

void TimelinePage::setStatus(const QString& text, bool error) {
  status_->setObjectName(error ? "Issue" : "Muted");
  status_->style()->unpolish(status_);  // re-polish for the new object name
  status_->style()->polish(status_);
  status_->setText(text);
}

QString TimelinePage::statusText() const {
  return status_->text();
}

QString TimelinePage::detailsText() const {
  QTextDocument doc;
  doc.setHtml(details_->text());
  return doc.toPlainText();
}

void TimelinePage::reloadRuns() {
  auto* watcher = new QFutureWatcher<std::vector<core::RunSummary>>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher] {
    watcher->deleteLater();
    const auto runs = watcher->result();
    fillingRuns_ = true;
    const qlonglong current = model_->runId();
    runs_->clear();
    if (runs.empty()) runs_->addItem("(no runs recorded yet)", 0);
    int newestProfiled = -1;  // runs come newest first
    for (const auto& r : runs) {
      if (r.profiled && newestProfiled < 0) newestProfiled = runs_->count();
      runs_->addItem(QStringLiteral("#%1  %2  (%3%4)")
                         .arg(r.id)
                         .arg(QString::fromStdString(r.name))
                         .arg(QString::fromStdString(r.status))
                         .arg(r.profiled ? QStringLiteral(", profiled") : QString()),
                     static_cast<qlonglong>(r.id));
    }
    const int i = runs_->findData(current);
    // Nothing loaded yet: open on the newest run that has a timeline to show.
    runs_->setCurrentIndex(i >= 0 ? i : (current > 0 ? -1 : std::max(0, newestProfiled)));
    fillingRuns_ = false;
    // The picker shows a run: show its profile too (the newest profiled run when none was
    // loaded), not "No profile loaded" until the user picks another run and back.
    const qlonglong shown = runs_->currentData().toLongLong();
    if (shown > 0 && shown != model_->runId()) showRun(shown);
  });
  RunRepository repo = repo_;
  watcher->setFuture(QtConcurrent::run([repo] { return repo.listRuns(); }));
}

void TimelinePage::showRun(int64_t runId, std::optional<int64_t> step) {
  pendingStep_ = step;
  fillingRuns_ = true;
  const int i = runs_->findData(static_cast<qlonglong>(runId));
  if (i >= 0) runs_->setCurrentIndex(i);
  fillingRuns_ = false;
  setStatus(QStringLiteral("Loading the profile of run %1…").arg(runId));
  view_->setStatusText({});
  range_->clear();
  model_->loadRun(repo_.path(), runId);
}

void TimelinePage::onLoaded() {
  const TimelineData* d = model_->data();
  export_->setEnabled(d && d->spanCount() > 0);
  showSpan(-1);
  range_->clear();
  rangeLabel_->setText("Shift-drag or right-drag on the timeline to select a range.");
  windows_->clear();
  lanes_->blockSignals(true);
  lanes_->clear();
  lanes_->addItem("All lanes", -1);
  if (!d) {
    lanes_->blockSignals(false);
    return;
  }
  for (size_t l = 0; l < d->lanes().size(); ++l)
    lanes_->addItem(d->lanes()[l].name, static_cast<int>(l));
  lanes_->blockSignals(false);
  windows_->addItem(QStringLiteral("All (%1 windows)").arg(d->windows().size()));
  for (const auto& w : d->windows())
    windows_->addItem(QStringLiteral("window %1 · steps %2–%3%4")
                          .arg(w.window)
                          .arg(w.firstStep)
                          .arg(w.lastStep)
                          .arg(w.rank ? QStringLiteral(" · rank %1").arg(w.rank) : QString()));

  QString text = QStringLiteral("Run %1: %2 spans on %3 lane(s), %4 step(s) profiled, %5.")
                     .arg(model_->runId())
                     .arg(d->spanCount())
                     .arg(d->lanes().size())
                     .arg(d->steps().size())
                     .arg(formatDurationNs(static_cast<double>(d->end() - d->begin())));
  if (!model_->warnings().isEmpty())
    text += QStringLiteral(" %1 batch(es) skipped: %2")
                .arg(model_->warnings().size())
                .arg(model_->warnings().front());
  if (pendingStep_) {
    const int64_t step = *pendingStep_;
    auto w = d->windowForStep(step);
    auto mark = d->stepMark(step);
    if (mark) {
      const int64_t pad = std::max<int64_t>(1, (mark->end - mark->start) / 20);
      view_->setVisibleRange(mark->start - pad, mark->end + pad);
      for (size_t k = 0; w && k < d->windows().size(); ++k)
        if (d->windows()[k].rank == w->rank && d->windows()[k].window == w->window)
          windows_->setCurrentIndex(static_cast<int>(k) + 1);
      text += QStringLiteral(" Showing step %1.").arg(step);
    } else {
      text += QStringLiteral(" Step %1 was not profiled; showing the whole profile.").arg(step);
    }
    pendingStep_.reset();
  }
  setStatus(text);
  emit loaded(model_->runId());
}

void TimelinePage::onRangeSelected(int64_t, int64_t) {
  recomputeRange();
}

void TimelinePage::recomputeRange() {
  const TimelineData* d = model_->data();
  const auto sel = view_->selection();
  if (!d || !sel) return;
  std::vector<int> lanes;
  const int lane = lanes_->currentData().toInt();
  if (lane >= 0) lanes.push_back(lane);
  auto rows = d->aggregate(sel->first, sel->second, lanes);
  int64_t spans = 0;
  for (const auto& r : rows) spans += r.count;
  rangeLabel_->setText(QStringLiteral("%1 – %2 (%3): %4 spans, %5 kernels/ops")
                           .arg(formatDurationNs(static_cast<double>(sel->first)))
                           .arg(formatDurationNs(static_cast<double>(sel->second)))
                           .arg(formatDurationNs(static_cast<double>(sel->second - sel->first)))
                           .arg(spans)
                           .arg(rows.size()));
  range_->setRows(std::move(rows), sel->first, sel->second);
  // Keep the user's sort.
  const int col = table_->horizontalHeader()->sortIndicatorSection();
  range_->sort(col, table_->horizontalHeader()->sortIndicatorOrder());
}

void TimelinePage::showSpan(int32_t id) {
  const TimelineData* d = model_->data();
  hostOfSelected_ = -1;
  if (!d || id < 0) {
    details_->setText("Click a span on the timeline.");
    gotoHost_->setEnabled(false);
    return;
  }
  const auto& s = d->span(id);
  QString html = QStringLiteral("<b style='font-size:11pt'>%1</b><table cellspacing='3'>")
                     .arg(QString::fromStdString(d->spanName(id)).toHtmlEscaped());
  auto row = [&](const QString& k, const QString& v) {
    html += QStringLiteral(
                "<tr><td style='color:#7b8794;padding-right:10px'>%1</td><td>%2</td>"
                "</tr>")
                .arg(k, v);
  };
  row("Category", QString::fromLatin1(profiler::toString(s.category)) +
                      (s.device ? QStringLiteral(" · GPU kernel") : QStringLiteral(" · host")));
  row("Lane", d->lanes()[static_cast<size_t>(d->laneOfTrack(s.track))].name +
                  QStringLiteral(" · depth %1").arg(s.depth));
  row("Duration", formatDurationNs(static_cast<double>(s.duration())));
  row("Start", formatDurationNs(static_cast<double>(s.start)));
  row("Step", s.step >= 0 ? QString::number(s.step) : QStringLiteral("—"));
  row("Bytes", bytesText(s.bytes));
  QString flops = flopsText(s.flops);
  if (s.flops > 0 && s.duration() > 0)
    flops +=
        QStringLiteral(" (%1 GFLOP/s)").arg(s.flops / static_cast<double>(s.duration()), 0, 'f', 2);
  row("FLOPs", flops);
  if (s.correlation) row("Correlation", QString::number(s.correlation));
  if (s.device) {
    hostOfSelected_ = d->launchingRange(id);
    row("Launched by", hostOfSelected_ >= 0 ? rangeText(*d, hostOfSelected_)
                                            : QStringLiteral("— (no host range recorded)"));
  } else {
    const auto launched = d->launchedSpans(id);
    if (!launched.empty()) {
      QStringList names;
      for (size_t k = 0; k < launched.size() && k < 3; ++k)
        names << QString::fromStdString(d->spanName(launched[k])).toHtmlEscaped();
      row("Launched", QStringLiteral("%1 kernel(s): %2%3")
                          .arg(launched.size())
                          .arg(names.join(", "))
                          .arg(launched.size() > 3 ? QStringLiteral(", …") : QString()));
    }
    if (int32_t p = d->parentRange(id); p >= 0) row("Inside", rangeText(*d, p));
  }
  html += "</table>";
  details_->setText(html);
  gotoHost_->setEnabled(hostOfSelected_ >= 0);
}

bool TimelinePage::exportChromeTrace(const QString& path, QString* error) const {
  const TimelineData* d = model_->data();
  if (!d || d->spanCount() == 0) {
    if (error) *error = QStringLiteral("No profile is loaded");
    return false;
  }
  profiler::ChromeTraceOptions opts;
  for (const auto& l : d->lanes())
    if (!l.device)
      opts.laneNames[{l.rank, l.id}] = QStringLiteral("thread %1").arg(l.id).toStdString();
  std::string err;
  if (!profiler::writeChromeTrace(path.toStdString(), d->toProfilerSpans(), {}, opts, &err)) {
    if (error) *error = QString::fromStdString(err);
    return false;
  }
  return true;
}

void TimelinePage::exportDialog() {
  QString path = showDialogs_ ? QFileDialog::getSaveFileName(
                                    this, "Export Chrome trace",
                                    QStringLiteral("run-%1-trace.json").arg(model_->runId()),
                                    "Chrome trace (*.json)")
                              : QString();
  if (path.isEmpty()) return;
  QString error;
  if (exportChromeTrace(path, &error)) {
    setStatus(QStringLiteral("Wrote %1 (open it in Perfetto or chrome://tracing)").arg(path));
    emit message(QStringLiteral("Wrote %1").arg(path));
  } else {
    setStatus(error, true);
  }
}

}  // namespace ts::gui
