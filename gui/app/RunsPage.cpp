#include "RunsPage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTableView>
#include <QVBoxLayout>

namespace ts::gui {

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
      "Every run recorded in the database. Click a header to sort; double-click a run to clone "
      "its configuration into the wizard; running runs can be followed live.");
  hint->setObjectName("PageHint");
  hint->setWordWrap(true);
  v->addWidget(hint);

  auto* filters = new QHBoxLayout;
  search_ = new QLineEdit;
  search_->setPlaceholderText("Search names, tags and notes");
  search_->setClearButtonEnabled(true);
  status_ = new QComboBox;
  status_->addItem("All statuses", QString());
  for (const char* s : {"running", "completed", "stopped", "failed", "crashed"})
    status_->addItem(s, QString(s));
  count_ = new QLabel;
  count_->setObjectName("Muted");
  auto* refresh = new QPushButton("Refresh");
  filters->addWidget(search_, 1);
  filters->addWidget(status_);
  filters->addWidget(count_);
  filters->addWidget(refresh);
  v->addLayout(filters);

  view_ = new QTableView;
  view_->setModel(model_);
  view_->setSortingEnabled(true);
  view_->horizontalHeader()->setSortIndicator(RunsTableModel::Started, Qt::DescendingOrder);
  view_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  view_->horizontalHeader()->setSectionResizeMode(RunsTableModel::Name, QHeaderView::Stretch);
  view_->verticalHeader()->setVisible(false);
  view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  view_->setSelectionMode(QAbstractItemView::SingleSelection);
  view_->setAlternatingRowColors(true);
  view_->setWordWrap(false);
  v->addWidget(view_, 1);

  auto* row = new QHBoxLayout;
  edit_ = new QPushButton("Edit…");
  edit_->setToolTip("Rename, tag or annotate the selected run");
  delete_ = new QPushButton("Delete…");
  csv_ = new QPushButton("Export CSV…");
  json_ = new QPushButton("Export JSON…");
  follow_ = new QPushButton("Follow live");
  follow_->setToolTip("Open a dashboard for a run that is still running (read from the database)");
  clone_ = new QPushButton("Clone into wizard");
  for (auto* b : {edit_, delete_, csv_, json_}) row->addWidget(b);
  row->addStretch(1);
  row->addWidget(follow_);
  row->addWidget(clone_);
  v->addLayout(row);

  connect(refresh, &QPushButton::clicked, this, &RunsPage::reload);
  connect(search_, &QLineEdit::textChanged, model_, &RunsTableModel::setSearchText);
  connect(status_, &QComboBox::currentIndexChanged, this,
          [this] { model_->setStatusFilter(status_->currentData().toString()); });
  connect(model_, &QAbstractItemModel::modelReset, this, [this] {
    count_->setText(
        QStringLiteral("%1 of %2 runs").arg(model_->rowCount()).arg(model_->totalRuns()));
    updateButtons();
  });
  connect(view_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &RunsPage::updateButtons);
  connect(browser_, &RunsBrowser::done, this, [this](bool ok, const QString& m) {
    emit message(m);
    if (!ok && showDialogs_) QMessageBox::warning(this, "Runs", m);
  });
  connect(edit_, &QPushButton::clicked, this, &RunsPage::editSelected);
  connect(delete_, &QPushButton::clicked, this, &RunsPage::deleteSelected);
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
  updateButtons();
}

int64_t RunsPage::selectedRunId() const {
  const auto rows = view_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return 0;
  const auto* r = model_->run(rows.first().row());
  return r ? r->id : 0;
}

void RunsPage::selectRun(int64_t id) {
  const int r = model_->rowOfRun(id);
  if (r >= 0) view_->selectRow(r);
}

void RunsPage::reload() {
  browser_->reload();
}

void RunsPage::updateButtons() {
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  for (auto* b : {edit_, delete_, csv_, json_, clone_}) b->setEnabled(r != nullptr);
  follow_->setEnabled(r && r->status == "running");
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

void RunsPage::deleteSelected() {
  const auto* r = model_->run(model_->rowOfRun(selectedRunId()));
  if (!r) return;
  const int64_t id = r->id;
  bool files = true;
  if (showDialogs_) {
    QMessageBox box(QMessageBox::Warning, "Delete run",
                    QStringLiteral("Delete run %1 “%2” from the database?")
                        .arg(id)
                        .arg(QString::fromStdString(r->name)),
                    QMessageBox::Cancel, this);
    auto* del = box.addButton("Delete", QMessageBox::DestructiveRole);
    auto* withFiles = new QCheckBox("Also delete its files (events, checkpoints, traces)");
    withFiles->setChecked(true);
    box.setCheckBox(withFiles);
    box.exec();
    if (box.clickedButton() != del) return;
    files = withFiles->isChecked();
  }
  browser_->deleteRun(id, files);
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
