#include "wizard/StartPage.h"

#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QStyledItemDelegate>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <optional>
#include <utility>

#include "ConfigBinder.h"
#include "trainscope/gui/RunRepository.h"

namespace ts::gui {

namespace {
// The preset rows draw their text through a rich-text label (the item widget); the item keeps
// its plain text for tests and accessibility but must not paint it as well: a selected row
// paints text in the highlight colour whatever its foreground, a second copy under the label.
class NoTextDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;

 protected:
  void initStyleOption(QStyleOptionViewItem* o, const QModelIndex& index) const override {
    QStyledItemDelegate::initStyleOption(o, index);
    o->text.clear();
  }
};
}  // namespace

StartPage::StartPage(ConfigBinder* binder, const RunRepository* repo)
    : WizardPage(binder, "Start a run",
                 "Begin from a built-in preset, clone a run from the database, or import a "
                 "config file. Every later page edits the same configuration."),
      repo_(repo) {
  addNameGroup();
  addPresetGroup();
  addCloneGroup();
  addImportGroup();
  startStatus_ = new QLabel;
  startStatus_->setObjectName("Muted");
  body()->addWidget(startStatus_);
  body()->addWidget(issueLabel({"name", "tags", "notes"}));
  body()->addStretch(1);
  refreshPastRuns();
}

void StartPage::addNameGroup() {
  QFormLayout* f;
  auto* nameBox = formGroup("Run", &f);
  f->addRow("Name",
            binder()->text("name", "run name", "Shown in the run list and the dashboard tab"));
  body()->addWidget(nameBox);
}

void StartPage::addPresetGroup() {
  auto* pg = new QGroupBox("Built-in presets");
  auto* pl = new QVBoxLayout(pg);
  presets_ = new QListWidget;
  presets_->setObjectName("Presets");
  presets_->setWordWrap(true);
  presets_->setItemDelegate(new NoTextDelegate(presets_));
  presetData_ = PresetLibrary::builtIn();
  for (const auto& p : presetData_) {
    // Plain text first line = the title (tests and accessibility read it); shown as rich text.
    auto* item = new QListWidgetItem(QStringLiteral("%1\n%2").arg(p.title, p.summary));
    item->setToolTip(p.summary);
    presets_->addItem(item);
    auto* label = new QLabel(QStringLiteral("<b>%1</b><br><span style='color:#52606d'>%2</span>")
                                 .arg(p.title.toHtmlEscaped(), p.summary.toHtmlEscaped()));
    label->setWordWrap(true);
    label->setContentsMargins(6, 5, 6, 5);
    label->setAttribute(Qt::WA_TransparentForMouseEvents);
    item->setSizeHint(QSize(10, label->heightForWidth(560) + 12));
    presets_->setItemWidget(item, label);
  }
  if (presetData_.empty()) presets_->addItem("(no presets were built into this binary)");
  presets_->setMinimumHeight(220);
  presets_->setSpacing(2);
  pl->addWidget(presets_);
  body()->addWidget(pg);
  connect(presets_, &QListWidget::currentRowChanged, this, &StartPage::applyPreset);
}

void StartPage::addCloneGroup() {
  auto* rg = new QGroupBox("Clone a past run");
  auto* rl = new QVBoxLayout(rg);
  pastRuns_ = new QListWidget;
  pastRuns_->setMinimumHeight(90);
  pastRuns_->setMaximumHeight(150);
  rl->addWidget(pastRuns_);
  refresh_ = new QPushButton("Refresh");
  auto* rh = new QHBoxLayout;
  rh->addWidget(hintLabel("Takes the resolved config of the selected run."), 1);
  rh->addWidget(refresh_);
  rl->addLayout(rh);
  body()->addWidget(rg);
  connect(pastRuns_, &QListWidget::itemActivated, this,
          [this](QListWidgetItem* it) { clonePastRun(it); });
}

void StartPage::addImportGroup() {
  auto* ig = new QGroupBox("Import a config file");
  auto* il = new QHBoxLayout(ig);
  il->addWidget(hintLabel("A Trainscope run config (JSON), or a DeepSpeed JSON: batch sizes, "
                          "precision, ZeRO stage, offload, optimizer and scheduler are mapped."),
                1);
  auto* imp = new QPushButton("Import…");
  il->addWidget(imp);
  body()->addWidget(ig);
  connect(imp, &QPushButton::clicked, this, [this] { chooseImportFile(); });
}

// The run's record is read on a worker thread (a busy database may hold a query for seconds).
void StartPage::clonePastRun(QListWidgetItem* it) {
  if (!repo_) return;
  const int64_t id = it->data(Qt::UserRole).toLongLong();
  using Result = std::pair<std::optional<core::RunDetail>, QString>;
  auto* watcher = new QFutureWatcher<Result>(this);
  connect(watcher, &QFutureWatcher<Result>::finished, this, [this, watcher] {
    watcher->deleteLater();
    const auto& [run, err] = watcher->result();
    if (!run || run->config.is_null()) {
      startStatus_->setText(err.isEmpty() ? "That run has no recorded config." : err);
      return;
    }
    auto cfg = run->config;
    cfg["name"] = run->name + "-clone";
    doc()->reset(cfg);
    startStatus_->setText(
        QStringLiteral("Cloned run #%1 (%2).").arg(run->id).arg(QString::fromStdString(run->name)));
  });
  const RunRepository repo = *repo_;
  watcher->setFuture(QtConcurrent::run([repo, id] {
    QString err;
    auto run = repo.getRun(id, &err);
    return Result{std::move(run), err};
  }));
}

void StartPage::chooseImportFile() {
  const QString f = QFileDialog::getOpenFileName(this, "Import a run config", QString(),
                                                 "JSON files (*.json);;All files (*)");
  if (f.isEmpty()) return;
  const QString err = importFile(f);
  if (!err.isEmpty()) QMessageBox::warning(this, "Import failed", err);
}

void StartPage::applyPreset(int index) {
  if (index < 0 || index >= static_cast<int>(presetData_.size())) return;
  doc()->reset(presetData_[index].doc);
  if (startStatus_)
    startStatus_->setText(QStringLiteral("Preset “%1” loaded.").arg(presetData_[index].title));
}

QString StartPage::importFile(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly))
    return QStringLiteral("Cannot open %1: %2").arg(path, f.errorString());
  const std::string err = doc()->importText(f.readAll().toStdString());
  if (!err.empty()) return QStringLiteral("%1: %2").arg(path, QString::fromStdString(err));
  if (startStatus_) startStatus_->setText("Imported " + QFileInfo(path).fileName() + ".");
  return {};
}

void StartPage::showEvent(QShowEvent* e) {
  WizardPage::showEvent(e);
  refreshPastRuns();
}

// The list is read on a worker thread and filled when it lands (the newest read wins).
void StartPage::refreshPastRuns() {
  if (!pastRuns_ || !repo_) {
    if (pastRuns_) pastRuns_->clear();
    return;
  }
  using Result = std::pair<std::vector<core::RunSummary>, QString>;
  const int generation = ++pastRunsGeneration_;
  auto* watcher = new QFutureWatcher<Result>(this);
  connect(watcher, &QFutureWatcher<Result>::finished, this, [this, watcher, generation] {
    watcher->deleteLater();
    if (generation != pastRunsGeneration_) return;
    const auto& [runs, err] = watcher->result();
    pastRuns_->clear();
    for (const auto& r : runs) {
      auto* it = new QListWidgetItem(
          QStringLiteral("#%1  %2  ·  %3  ·  %4 steps")
              .arg(r.id)
              .arg(QString::fromStdString(r.name), QString::fromStdString(r.status))
              .arg(r.steps));
      it->setData(Qt::UserRole, QVariant::fromValue<qlonglong>(r.id));
      pastRuns_->addItem(it);
    }
    if (runs.empty())
      pastRuns_->addItem(err.isEmpty() ? "No runs in the database yet." : "Database: " + err);
  });
  const RunRepository repo = *repo_;
  watcher->setFuture(QtConcurrent::run([repo] {
    QString err;
    auto runs = repo.listRuns(&err);
    return Result{std::move(runs), err};
  }));
}

}  // namespace ts::gui
