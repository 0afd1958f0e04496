#include "RunsPage.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHash>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPainter>
#include <QPainterPath>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <utility>

#include "trainscope/gui/RunControl.h"

namespace ts::gui {

namespace {

// Paints the Techniques column as compact rounded badges (one colour per family).
class BadgeDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;

  static QColor colorOf(const QString& b) {
    if (b.contains("bf16") || b == "fp16" || b == "fp8") return QColor("#2563eb");
    if (b.startsWith("ZeRO") || b == "offload") return QColor("#7c3aed");
    if (b == "ckpt" || b == "compress" || b == "accum" || b == "8-bit opt")
      return QColor("#0d9488");
    if (b.contains("LoRA") || b == "distill") return QColor("#c2410c");
    return QColor("#52606d");
  }

  void paint(QPainter* p, const QStyleOptionViewItem& option,
             const QModelIndex& index) const override {
    const QStringList badges = index.data(RunsTableModel::BadgesRole).toStringList();
    QStyleOptionViewItem o = option;
    initStyleOption(&o, index);
    o.text.clear();
    (o.widget ? o.widget->style() : QApplication::style())
        ->drawControl(QStyle::CE_ItemViewItem, &o, p, o.widget);
    if (badges.isEmpty()) return;
    const bool selected = option.state & QStyle::State_Selected;
    p->save();
    p->setRenderHint(QPainter::Antialiasing);
    QFont f = option.font;
    f.setPointSizeF(std::max(7.0, f.pointSizeF() * 0.85));
    p->setFont(f);
    const QFontMetrics fm(f);
    const int h = fm.height() + 2;
    int x = option.rect.left() + 4;
    const int y = option.rect.center().y() - h / 2;
    for (const QString& b : badges) {
      const int w = fm.horizontalAdvance(b) + 10;
      if (x + w > option.rect.right() - 2) break;  // the tooltip lists them all
      const QColor c = colorOf(b);
      // On a selected (dark) row the tinted chip would vanish: white chips there.
      QColor fill = selected ? QColor(255, 255, 255, 235) : c;
      if (!selected) fill.setAlpha(30);
      QPainterPath path;
      path.addRoundedRect(QRectF(x, y, w, h), 4, 4);
      p->fillPath(path, fill);
      p->setPen(c);
      p->drawText(QRect(x, y, w, h), Qt::AlignCenter, b);
      x += w + 4;
    }
    p->restore();
  }

  QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override {
    const QStringList badges = index.data(RunsTableModel::BadgesRole).toStringList();
    QFont f = option.font;
    f.setPointSizeF(std::max(7.0, f.pointSizeF() * 0.85));
    const QFontMetrics fm(f);
    int w = 8;
    for (const QString& b : badges) w += fm.horizontalAdvance(b) + 14;
    return {std::max(w, 90), fm.height() + 8};
  }
};

}  // namespace

RunsPage::RunsPage(RunRepository repo, QWidget* parent)
    : QWidget(parent),
      model_(new RunsTableModel(this)),
      browser_(new RunsBrowser(repo, model_, this)) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(16, 12, 16, 12);
  auto* t = new QLabel("Runs");
  t->setObjectName("PageTitle");
  v->addWidget(t);
  auto* hint = new QLabel(
      "Every run recorded in the database. Click a header to sort; search matches names, notes, "
      "tags, techniques and config values (e.g. \u201cbf16 zero\u201d or \u201c0.0003\u201d). "
      "Double-click a run to clone it into the wizard; select two or more (Ctrl/Shift-click) to "
      "compare them.");
  hint->setObjectName("PageHint");
  hint->setWordWrap(true);
  v->addWidget(hint);
  v->addLayout(buildFilters());
  buildTable();
  v->addWidget(view_, 1);
  v->addLayout(buildActions());
  connectModel();
  connectActions();
  updateButtons();
  // Running rows age while the page is open: re-read them (on the worker) now and then.
  runningTimer_ = new QTimer(this);
  runningTimer_->setInterval(2000);
  connect(runningTimer_, &QTimer::timeout, browser_, &RunsBrowser::refreshRunning);
}

void RunsPage::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  runningTimer_->start();
}

void RunsPage::hideEvent(QHideEvent* e) {
  QWidget::hideEvent(e);
  runningTimer_->stop();
}

// Search, status filter, the count and Refresh.
QLayout* RunsPage::buildFilters() {
  auto* filters = new QHBoxLayout;
  search_ = new QLineEdit;
  search_->setPlaceholderText("Search names, notes, tags, techniques and config values");
  search_->setClearButtonEnabled(true);
  status_ = new QComboBox;
  status_->addItem("All statuses", QString());
  for (const char* s : {"running", "completed", "stopped", "failed", "crashed"})
    status_->addItem(s, QString(s));
  count_ = new QLabel;
  count_->setObjectName("Muted");
  refresh_ = new QPushButton("Refresh");
  filters->addWidget(search_, 1);
  filters->addWidget(status_);
  filters->addWidget(count_);
  filters->addWidget(refresh_);
  return filters;
}

void RunsPage::buildTable() {
  view_ = new QTableView;
  view_->setModel(model_);
  view_->setSortingEnabled(true);
  view_->horizontalHeader()->setSortIndicator(RunsTableModel::Started, Qt::DescendingOrder);
  // Columns are sized from the first rows once per load (see reload), not on every filter
  // keystroke: re-measuring on each model reset is what made typing stall with 10,000 runs.
  view_->horizontalHeader()->setResizeContentsPrecision(64);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  // Name is sized to its contents like the others (a stretched Name was squeezed to "…" once
  // the columns outgrew the window); the last column takes what is left.
  view_->horizontalHeader()->setStretchLastSection(true);
  view_->setItemDelegateForColumn(RunsTableModel::Techniques, new BadgeDelegate(view_));
  view_->verticalHeader()->setVisible(false);
  // Fixed row heights: no per-row measuring when 10,000 rows come and go.
  view_->verticalHeader()->setSectionResizeMode(QHeaderView::Fixed);
  view_->verticalHeader()->setDefaultSectionSize(view_->fontMetrics().height() + 12);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  view_->setAlternatingRowColors(true);
  view_->setWordWrap(false);
}

// The actions on the selected run(s).
QLayout* RunsPage::buildActions() {
  auto* row = new QHBoxLayout;
  edit_ = new QPushButton("Edit…");
  edit_->setToolTip("Rename, tag or annotate the selected run");
  delete_ = new QPushButton("Delete…");
  csv_ = new QPushButton("Export CSV…");
  json_ = new QPushButton("Export JSON…");
  trace_ = new QPushButton("Export trace…");
  stop_ = new QPushButton("Stop");
  stop_->setObjectName("Danger");
  stop_->setToolTip(
      "Stop the selected running run after its current step (it writes a final "
      "checkpoint), whoever started it");
  follow_ = new QPushButton("Follow live");
  follow_->setToolTip("Open a dashboard for a run that is still running (read from the database)");
  resume_ = new QPushButton("Resume");
  clone_ = new QPushButton("Clone into wizard");
  compare_ = new QPushButton("Compare");
  compare_->setObjectName("Primary");
  for (auto* b : {edit_, delete_, csv_, json_, trace_}) row->addWidget(b);
  row->addStretch(1);
  row->addWidget(stop_);
  row->addWidget(follow_);
  row->addWidget(resume_);
  row->addWidget(clone_);
  row->addWidget(compare_);
  return row;
}

// Filters, the selection across model resets, the count, column widths, browser messages.
void RunsPage::connectModel() {
  connect(refresh_, &QPushButton::clicked, this, &RunsPage::reload);
  connect(search_, &QLineEdit::textChanged, model_, &RunsTableModel::setSearchText);
  connect(status_, &QComboBox::currentIndexChanged, this,
          [this] { model_->setStatusFilter(status_->currentData().toString()); });
  // The selection survives filtering and reloads (edits, the configs' second phase).
  connect(model_, &QAbstractItemModel::modelAboutToBeReset, this,
          [this] { keptSelection_ = selectedRunIds(); });
  connect(model_, &QAbstractItemModel::modelReset, this, [this] {
    if (!keptSelection_.isEmpty()) {
      const QList<qint64> ids = std::exchange(keptSelection_, {});
      selectRuns(ids, false);
    }
    count_->setText(
        QStringLiteral("%1 of %2 runs").arg(model_->rowCount()).arg(model_->totalRuns()));
    updateButtons();
  });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &RunsPage::updateButtons);
  auto fitColumns = [this] {
    for (int c = 0; c < RunsTableModel::ColumnCount; ++c) view_->resizeColumnToContents(c);
    view_->setColumnWidth(RunsTableModel::Name,
                          std::clamp(view_->columnWidth(RunsTableModel::Name), 120, 320));
  };
  connect(browser_, &RunsBrowser::loaded, this, fitColumns);
  connect(browser_, &RunsBrowser::detailsLoaded, this, fitColumns);
  connect(browser_, &RunsBrowser::done, this, [this](bool ok, const QString& m) {
    emit message(m);
    if (!ok && showDialogs_) QMessageBox::warning(this, "Runs", m);
  });
}

void RunsPage::connectActions() {
  connect(edit_, &QPushButton::clicked, this, &RunsPage::editSelected);
  connect(delete_, &QPushButton::clicked, this, &RunsPage::deleteSelected);
  connect(stop_, &QPushButton::clicked, this, &RunsPage::stopSelected);
  // Runs stopped for deletion are deleted once the database says they finished.
  pendingTimer_ = new QTimer(this);
  pendingTimer_->setInterval(1000);
  connect(pendingTimer_, &QTimer::timeout, browser_, &RunsBrowser::reload);
  connect(browser_, &RunsBrowser::loaded, this, &RunsPage::deletePendingStopped);
  connect(csv_, &QPushButton::clicked, this,
          [this] { exportSelected(RunsBrowser::ExportFormat::Csv); });
  connect(json_, &QPushButton::clicked, this,
          [this] { exportSelected(RunsBrowser::ExportFormat::Json); });
  connect(clone_, &QPushButton::clicked, this, [this] {
    if (selectedRunId() > 0) emit cloneRequested(selectedRunId());
  });
  connect(view_, &QTableView::doubleClicked, this, [this] {
    if (selectedRunId() > 0) emit cloneRequested(selectedRunId());
  });
  connect(follow_, &QPushButton::clicked, this, [this] {
    if (selectedRunId() > 0) emit followRequested(selectedRunId());
  });
  connect(trace_, &QPushButton::clicked, this, &RunsPage::exportTraceSelected);
  connect(resume_, &QPushButton::clicked, this, [this] {
    const int64_t id = selectedRunId();
    const auto x = browser_->extras(id);
    if (id > 0 && x && x->lastCheckpoint && x->checkpointExists)
      emit resumeRequested(id, QString::fromStdString(x->lastCheckpoint->path));
  });
  connect(compare_, &QPushButton::clicked, this, [this] {
    const auto ids = selectedRunIds();
    if (ids.size() >= 2) emit compareRequested(ids);
  });
  connect(browser_, &RunsBrowser::extrasReady, this, [this](qint64 id) {
    if (id == selectedRunId()) updateButtons();
  });
}

int64_t RunsPage::selectedRunId() const {
  const auto rows = view_->selectionModel()->selectedRows();
  if (rows.size() != 1) return 0;
  const auto* r = model_->run(rows.first().row());
  return r ? r->id : 0;
}

QList<qint64> RunsPage::selectedRunIds() const {
  auto rows = view_->selectionModel()->selectedRows();
  std::sort(rows.begin(), rows.end(),
            [](const QModelIndex& a, const QModelIndex& b) { return a.row() < b.row(); });
  QList<qint64> ids;
  for (const auto& i : rows)
    if (const auto* r = model_->run(i.row())) ids << r->id;
  return ids;
}

void RunsPage::selectRun(int64_t id) {
  selectRuns({id});
}

void RunsPage::selectRuns(const QList<qint64>& ids, bool scroll) {
  // id -> row once (rowOfRun is a scan) when many runs are selected.
  QHash<qint64, int> rowOf;
  if (ids.size() > 8)
    for (int r = 0; r < model_->rowCount(); ++r) rowOf.insert(model_->run(r)->id, r);
  QItemSelection sel;
  int first = -1;
  for (qint64 id : ids) {
    const int r = ids.size() > 8 ? rowOf.value(id, -1) : model_->rowOfRun(id);
    if (r < 0) continue;
    if (first < 0) first = r;
    sel.select(model_->index(r, 0), model_->index(r, RunsTableModel::ColumnCount - 1));
  }
  view_->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect);
  if (first >= 0) {
    view_->selectionModel()->setCurrentIndex(model_->index(first, 0),
                                             QItemSelectionModel::NoUpdate);
    if (scroll) view_->scrollTo(model_->index(first, 0));
  }
}

void RunsPage::reload() {
  browser_->reload();
}

void RunsPage::updateButtons() {
  const int selected = view_->selectionModel()->selectedRows().size();
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  for (auto* b : {edit_, delete_, csv_, json_, clone_}) b->setEnabled(r != nullptr);
  follow_->setEnabled(r && r->status == "running");
  stop_->setEnabled(r && r->status == "running" && !pendingDeletes_.contains(r->id));
  compare_->setEnabled(selected >= 2);
  compare_->setToolTip(selected >= 2
                           ? QStringLiteral("Overlay the %1 selected runs' curves, config "
                                            "differences, memory and summary")
                                 .arg(selected)
                           : QStringLiteral("Select two or more runs (Ctrl/Shift-click) to "
                                            "compare them"));
  // Resume and trace need the run's checkpoints and profile, looked up on the worker.
  const auto x = r ? browser_->extras(r->id) : std::nullopt;
  if (r && !x) browser_->fetchExtras(r->id);
  const QString pending = QStringLiteral("Looking up the run's checkpoints and profile…");
  if (!r) {
    resume_->setEnabled(false);
    resume_->setToolTip("Select one run to resume it from its last checkpoint");
  } else if (!x) {
    resume_->setEnabled(false);
    resume_->setToolTip(pending);
  } else if (r->status == "running") {
    resume_->setEnabled(false);
    resume_->setToolTip("The run is still running; follow it live instead");
  } else if (!x->lastCheckpoint) {
    resume_->setEnabled(false);
    resume_->setToolTip("This run saved no checkpoint, so it cannot be resumed; clone it instead");
  } else if (!x->checkpointExists) {
    resume_->setEnabled(false);
    resume_->setToolTip(QStringLiteral("The last checkpoint (step %1) is missing on disk: %2")
                            .arg(x->lastCheckpoint->step)
                            .arg(QString::fromStdString(x->lastCheckpoint->path)));
  } else {
    resume_->setEnabled(true);
    resume_->setToolTip(QStringLiteral("Continue training from the checkpoint of step %1 (%2)")
                            .arg(x->lastCheckpoint->step)
                            .arg(QString::fromStdString(x->lastCheckpoint->path)));
  }
  if (!r) {
    trace_->setEnabled(false);
    trace_->setToolTip("Select one run to export its kernel timeline");
  } else if (!x) {
    trace_->setEnabled(false);
    trace_->setToolTip(pending);
  } else if (!x->hasProfile) {
    trace_->setEnabled(false);
    trace_->setToolTip(
        "This run recorded no kernel timeline; turn on profiling in the wizard or press "
        "\u201cProfile now\u201d while a run trains");
  } else {
    trace_->setEnabled(true);
    trace_->setToolTip(
        "Save the kernel timeline as Chrome trace JSON (chrome://tracing, Perfetto)");
  }
}

void RunsPage::exportTraceSelected() {
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  if (!r) return;
  const QString path = QFileDialog::getSaveFileName(this, "Export trace",
                                                    QString::fromStdString(r->name) + "-trace.json",
                                                    "Chrome trace JSON (*.json)");
  if (path.isEmpty()) return;
  browser_->exportTrace(r->id, path);
}

void RunsPage::editSelected() {
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  if (!r) return;
  const core::RunSummary run = *r;
  QDialog d(this);
  d.setWindowTitle(QStringLiteral("Edit run %1").arg(run.id));
  auto* f = new QFormLayout(&d);
  auto* name = new QLineEdit(QString::fromStdString(run.name));
  QStringList tagList;
  for (const auto& t : run.tags) tagList << QString::fromStdString(t);
  auto* tags = new QLineEdit(tagList.join(", "));
  tags->setPlaceholderText("comma-separated, e.g. baseline, bf16");
  auto* notes = new QPlainTextEdit(QString::fromStdString(run.notes));
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Save | QDialogButtonBox::Cancel);
  f->addRow("Name", name);
  f->addRow("Tags", tags);
  f->addRow("Notes", notes);
  f->addRow(buttons);
  connect(buttons, &QDialogButtonBox::accepted, &d, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, &d, &QDialog::reject);
  d.resize(460, 300);
  if (d.exec() != QDialog::Accepted) return;
  if (name->text().trimmed() != QString::fromStdString(run.name))
    browser_->rename(run.id, name->text());
  if (tags->text().split(',', Qt::SkipEmptyParts).join(",").remove(' ') !=
      tagList.join(",").remove(' '))
    browser_->setTags(run.id, tags->text().split(',', Qt::SkipEmptyParts));
  if (notes->toPlainText() != QString::fromStdString(run.notes))
    browser_->setNotes(run.id, notes->toPlainText());
}

void RunsPage::stopSelected() {
  const auto* r = runRow(selectedRunId());
  if (!r || r->status != "running") return;
  const QString err = RunControl::send(QString::fromStdString(r->runDir), core::CommandType::Stop);
  if (!err.isEmpty()) {
    const QString m = QStringLiteral("Run %1 could not be stopped: %2").arg(r->id).arg(err);
    if (showDialogs_) QMessageBox::warning(this, "Stop", m);
    emit message(m);
    return;
  }
  emit message(QStringLiteral("Stop sent to run %1: it stops after its current step and writes "
                              "a final checkpoint")
                   .arg(r->id));
  pendingTimer_->start();  // its row follows the stop
}

void RunsPage::deleteSelected() {
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  if (!r) return;
  const int64_t id = r->id;
  // Deleting under a live engine would orphan it: it would train on and write its final
  // checkpoint into the folder deleted under it. A running run is stopped, then deleted.
  const bool running = r->status == "running";
  bool files = true;
  if (showDialogs_) {
    const QString name = QString::fromStdString(r->name);
    QMessageBox box(QMessageBox::Warning, running ? "Delete a running run" : "Delete run",
                    running
                        ? QStringLiteral("Run %1 “%2” is still training.\n\nStop it now and "
                                         "delete it once it has stopped?")
                              .arg(id)
                              .arg(name)
                        : QStringLiteral("Delete run %1 “%2” from the database?").arg(id).arg(name),
                    QMessageBox::Cancel, this);
    auto* del = box.addButton(running ? "Stop and delete" : "Delete", QMessageBox::DestructiveRole);
    auto* withFiles = new QCheckBox("Also delete its files (events, checkpoints, traces)");
    withFiles->setChecked(true);
    box.setCheckBox(withFiles);
    box.exec();
    if (box.clickedButton() != del) return;
    files = withFiles->isChecked();
  }
  if (!running) {
    browser_->deleteRun(id, files);
    return;
  }
  const QString err = RunControl::send(QString::fromStdString(r->runDir), core::CommandType::Stop);
  if (!err.isEmpty()) {
    const QString m =
        QStringLiteral("Run %1 is still running and could not be stopped (%2); it was not deleted")
            .arg(id)
            .arg(err);
    if (showDialogs_) QMessageBox::warning(this, "Delete run", m);
    emit message(m);
    return;
  }
  pendingDeletes_[id] = files;
  emit message(QStringLiteral("Stopping run %1; it is deleted once it has stopped").arg(id));
  pendingTimer_->start();
  updateButtons();
}

void RunsPage::deletePendingStopped() {
  if (pendingDeletes_.isEmpty()) {
    // A plain Stop: follow the rows until none is running.
    bool anyRunning = false;
    for (int i = 0; i < model_->rowCount(); ++i)
      if (const auto* r = model_->run(i); r && r->status == "running") anyRunning = true;
    if (!anyRunning) pendingTimer_->stop();
    return;
  }
  for (auto it = pendingDeletes_.begin(); it != pendingDeletes_.end();) {
    const auto* r = runRow(it.key());
    // Finished in the database is not enough: its engine may still be closing its files.
    if (r && (r->status == "running" || RunControl::engineAlive(r->pid, r->host))) {
      ++it;
      continue;
    }
    if (r) browser_->deleteRun(it.key(), it.value());
    it = pendingDeletes_.erase(it);
  }
  if (pendingDeletes_.isEmpty()) pendingTimer_->stop();
}

void RunsPage::exportSelected(RunsBrowser::ExportFormat format) {
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  if (!r) return;
  const bool csv = format == RunsBrowser::ExportFormat::Csv;
  const QString suggested =
      QString::fromStdString(r->name) + (csv ? "-metrics.csv" : "-metrics.json");
  const QString path = QFileDialog::getSaveFileName(
      this, "Export metrics", suggested, csv ? "CSV files (*.csv)" : "JSON files (*.json)");
  if (path.isEmpty()) return;
  browser_->exportMetrics(r->id, path, format);
}

}  // namespace ts::gui
