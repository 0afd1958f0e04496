#include "RunWizard.h"

#include <algorithm>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QScrollArea>
#include <QStackedWidget>
#include <QVBoxLayout>

#include "ConfigBinder.h"
#include "MemoryBars.h"
#include "trainscope/gui/HfFolderInfo.h"
#include "wizard/FinetunePage.h"
#include "wizard/MemoryPage.h"
#include "wizard/ModelPage.h"
#include "wizard/OptimizerPage.h"
#include "wizard/ParallelPage.h"
#include "wizard/PrecisionPage.h"
#include "wizard/ProfilingPage.h"
#include "wizard/ReviewPage.h"
#include "wizard/StartPage.h"

namespace ts::gui {
namespace {

// The side panel's verdict: fits or not, the peaks per tier, what the model states cost.
QString memorySummary(const core::MemoryEstimate& est, int64_t cap) {
  const bool fits = cap <= 0 || est.peak_device <= cap;
  QString s = QStringLiteral("<b style='color:%1'>%2</b> — peak %3 on rank 0")
                  .arg(fits ? "#0f7b3f" : "#b42318", fits ? "Fits" : "Does not fit",
                       formatBytes(static_cast<double>(est.peak_device)));
  if (est.peak_host > 0)
    s += QStringLiteral(", host %1").arg(formatBytes(static_cast<double>(est.peak_host)));
  if (est.peak_nvme > 0)
    s += QStringLiteral(", NVMe %1").arg(formatBytes(static_cast<double>(est.peak_nvme)));
  s += QStringLiteral(
           "<br><span style='color:#52606d'>%1 parameters (%2 trainable) · %3 bytes/param for "
           "model states · effective batch %4</span>")
           .arg(humanCount(static_cast<double>(est.params.total)),
                humanCount(static_cast<double>(est.params.trainable)))
           .arg(est.bytes_per_param, 0, 'f', 1)
           .arg(est.effective_batch);
  return s;
}

}  // namespace

RunWizard::RunWizard(ConfigDocument* doc, const RunRepository* repo, QWidget* parent)
    : QWidget(parent), doc_(doc), repo_(repo), binder_(new ConfigBinder(doc, this)) {
  caps_.deviceMemory = hostMemoryBytes();
  caps_.text = "CPU";
  nav_ = new QListWidget;
  nav_->setObjectName("WizardSteps");
  nav_->setFixedWidth(200);
  nav_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  stack_ = new QStackedWidget;
  addPages();
  QLayout* buttons = buildButtons();

  auto* center = new QVBoxLayout;
  center->addWidget(stack_, 1);
  center->addLayout(buttons);

  auto* lay = new QHBoxLayout(this);
  lay->setContentsMargins(12, 12, 12, 12);
  lay->setSpacing(14);
  lay->addWidget(nav_);
  lay->addLayout(center, 1);
  lay->addWidget(buildSidePanel());

  connect(nav_, &QListWidget::currentRowChanged, this, &RunWizard::goToPage);
  connect(back_, &QPushButton::clicked, this, [this] { goToPage(currentPage() - 1); });
  connect(next_, &QPushButton::clicked, this, [this] { goToPage(currentPage() + 1); });
  connect(launch_, &QPushButton::clicked, this, [this] {
    if (launchBlockers().isEmpty()) emit launchRequested();
  });
  connect(doc_, &ConfigDocument::changed, this, &RunWizard::onDocumentChanged);
  goToPage(0);
  onDocumentChanged();
}

void RunWizard::addPages() {
  start_ = new StartPage(binder_, repo_);
  addPage("Start", start_);
  model_ = new ModelPage(binder_);
  addPage("Model & data", model_);
  addPage("Precision", new PrecisionPage(binder_));
  addPage("Memory", new MemoryPage(binder_));
  addPage("Parallelism", new ParallelPage(binder_));
  addPage("Optimizer & schedule", new OptimizerPage(binder_));
  finetune_ = new FinetunePage(binder_);
  addPage("Fine-tuning", finetune_);
  addPage("Profiling", new ProfilingPage(binder_));
  review_ = new ReviewPage(binder_);
  addPage("Review", review_);
  for (int i = 0; i < stack_->count(); ++i) {
    nav_->item(i)->setText(QStringLiteral("%1.  %2").arg(i + 1).arg(nav_->item(i)->text()));
  }
  connect(start_->refreshButton(), &QPushButton::clicked, this, &RunWizard::refreshPastRuns);
}

void RunWizard::addPage(const QString& nav, WizardPage* page) {
  auto* scroll = new QScrollArea;
  scroll->setWidget(page);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  stack_->addWidget(scroll);
  nav_->addItem(nav);
  pages_.push_back(page);
}

QLayout* RunWizard::buildButtons() {
  back_ = new QPushButton("Back");
  next_ = new QPushButton("Next");
  next_->setObjectName("Primary");
  launch_ = new QPushButton("Launch run");
  launch_->setObjectName("Primary");
  launch_->setToolTip("Start trainscope-engine with this configuration");
  blockers_ = new QLabel;
  blockers_->setObjectName("Issue");
  blockers_->setWordWrap(true);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(blockers_, 1);
  buttons->addWidget(back_);
  buttons->addWidget(next_);
  buttons->addWidget(launch_);
  return buttons;
}

int RunWizard::pageCount() const {
  return stack_->count();
}
int RunWizard::currentPage() const {
  return stack_->currentIndex();
}
QString RunWizard::pageTitle(int i) const {
  return i >= 0 && i < nav_->count() ? nav_->item(i)->text() : QString();
}

QListWidget* RunWizard::presetList() const {
  return start_->presetList();
}
QListWidget* RunWizard::pastRunList() const {
  return start_->pastRunList();
}

void RunWizard::goToPage(int i) {
  i = std::clamp(i, 0, stack_->count() - 1);
  stack_->setCurrentIndex(i);
  {
    QSignalBlocker b(nav_);
    nav_->setCurrentRow(i);
  }
  back_->setEnabled(i > 0);
  next_->setVisible(i < stack_->count() - 1);
  if (i == stack_->count() - 1) onDocumentChanged();  // review shows the latest document
}

int64_t RunWizard::capacity() const {
  if (!capacityPick_) return caps_.deviceMemory;
  const qlonglong v = capacityPick_->currentData().toLongLong();
  return v > 0 ? v : caps_.deviceMemory;
}

void RunWizard::setCapabilities(const CapabilitySummary& caps) {
  caps_ = caps;
  doc_->setNativeBf16Gemm(caps.nativeBf16Gemm);
  if (capacityPick_) {
    capacityPick_->setItemText(0, QStringLiteral("This machine (%1)")
                                      .arg(formatBytes(static_cast<double>(caps_.deviceMemory))));
    capacityPick_->setItemData(0, QVariant::fromValue<qlonglong>(caps_.deviceMemory));
  }
  onDocumentChanged();
}

void RunWizard::applyPreset(int index) {
  start_->applyPreset(index);
}

QString RunWizard::importFile(const QString& path) {
  return start_->importFile(path);
}

void RunWizard::refreshPastRuns() {
  start_->refreshPastRuns();
  finetune_->refreshTeachers(repo_);
}

QString RunWizard::openHfFolder(const QString& path) {
  return model_->openHfFolder(path);
}

QWidget* RunWizard::buildSidePanel() {
  auto* panel = new QFrame;
  panel->setObjectName("Card");
  panel->setFixedWidth(340);
  auto* v = new QVBoxLayout(panel);
  auto* t = new QLabel("Estimated memory per rank");
  t->setObjectName("SectionTitle");
  v->addWidget(t);
  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel("Device"));
  capacityPick_ = new QComboBox;
  capacityPick_->setToolTip("The device capacity the bars are compared with");
  capacityPick_->addItem(
      QStringLiteral("This machine (%1)").arg(formatBytes(static_cast<double>(caps_.deviceMemory))),
      QVariant::fromValue<qlonglong>(caps_.deviceMemory));
  for (int g : {8, 16, 24, 40, 80, 141})
    capacityPick_->addItem(QStringLiteral("%1 GiB GPU").arg(g),
                           QVariant::fromValue<qlonglong>(static_cast<qlonglong>(g) << 30));
  row->addWidget(capacityPick_, 1);
  v->addLayout(row);
  connect(capacityPick_, &QComboBox::currentIndexChanged, this, [this] { onDocumentChanged(); });
  bars_ = new MemoryBars;
  v->addWidget(bars_);
  memSummary_ = new QLabel;
  memSummary_->setWordWrap(true);
  memSummary_->setTextFormat(Qt::RichText);
  v->addWidget(memSummary_);
  v->addStretch(1);
  return panel;
}

std::vector<core::ConfigIssue> RunWizard::allIssues() const {
  std::vector<core::ConfigIssue> all = doc_->issues();
  if (doc_->config() && caps_.known)
    for (auto& i : engineLimitations(caps_.raw, *doc_->config())) all.push_back(std::move(i));
  return all;
}

QStringList RunWizard::launchBlockers() const {
  QStringList out;
  for (const auto& i : allIssues())
    out << QStringLiteral("%1: %2").arg(issuePath(i), QString::fromStdString(i.message));
  return out;
}

void RunWizard::onDocumentChanged() {
  for (auto* p : pages_) p->refresh();
  const auto issues = allIssues();
  for (auto* p : pages_) p->showIssues(issues);  // inline, on the page that owns the key
  const QStringList blockers = launchBlockers();
  updateLaunch(blockers);
  const int64_t cap = capacity();
  updateMemoryPanel(cap);
  review_->showReview(blockers, cap, stack_->currentIndex() == stack_->count() - 1);
}

void RunWizard::updateLaunch(const QStringList& blockers) {
  launch_->setEnabled(blockers.isEmpty());
  launch_->setToolTip(blockers.isEmpty() ? "Start trainscope-engine with this configuration"
                                         : "Fix first:\n" + blockers.join('\n'));
  blockers_->setText(blockers.isEmpty() ? QString()
                                        : QStringLiteral("Launch is disabled: %1 problem%2 — %3")
                                              .arg(blockers.size())
                                              .arg(blockers.size() == 1 ? "" : "s")
                                              .arg(blockers.first()));
}

void RunWizard::updateMemoryPanel(int64_t cap) {
  const auto& est = doc_->estimate();
  bars_->setReports(est ? std::optional(est->report) : std::nullopt, std::nullopt, cap, true);
  memSummary_->setText(est ? memorySummary(*est, cap)
                           : QStringLiteral("<span style='color:#b42318'>No estimate while the "
                                            "configuration has problems.</span>"));
}

}  // namespace ts::gui
