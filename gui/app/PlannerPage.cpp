#include "PlannerPage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFormLayout>
#include <QFutureWatcher>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/model/ModelFamily.h"

#include "MemoryBars.h"
#include "trainscope/gui/Capabilities.h"
#include "trainscope/gui/HfFolderInfo.h"

namespace ts::gui {

namespace {
QComboBox* combo(const QStringList& items) {
  auto* c = new QComboBox;
  c->addItems(items);
  return c;
}
void setComboText(QComboBox* c, const std::string& s) {
  const int i = c->findText(QString::fromStdString(s));
  if (i >= 0) c->setCurrentIndex(i);
}
// 124.4 M, 6.74 B
QString countText(int64_t n) {
  return n >= 1000000000 ? QString::number(double(n) / 1e9, 'f', 2) + " B"
                         : QString::number(double(n) / 1e6, 'f', 1) + " M";
}
}  // namespace

PlannerPage::PlannerPage(QWidget* parent)
    : QWidget(parent),
      choices_(plannerModelChoices()),
      controller_(new PlannerController(this)),
      plans_(new PlanTableModel(this)),
      debounce_(new QTimer(this)) {
  debounce_->setSingleShot(true);
  debounce_->setInterval(120);
  connect(debounce_, &QTimer::timeout, this, &PlannerPage::recompute);
  connect(controller_, &PlannerController::finished, this, &PlannerPage::showOutput);

  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(16, 12, 16, 12);
  auto* title = new QLabel("Memory planner");
  title->setObjectName("PageTitle");
  outer->addWidget(title);
  auto* hint = new QLabel(
      "What-if: pick a model and a machine, toggle techniques and see the memory per rank. "
      "The planner ranks the setups that fit; select one to export it.");
  hint->setObjectName("PageHint");
  hint->setWordWrap(true);
  outer->addWidget(hint);

  auto* body = new QHBoxLayout;
  outer->addLayout(body, 1);
  body->addWidget(buildSetupForm());
  body->addLayout(buildResults(), 1);
  connectForm();

  loadChoice(model_->currentIndex());
  updateExportLabel();
}

// ---- left: the setup form
QWidget* PlannerPage::buildSetupForm() {
  auto* left = new QVBoxLayout;
  left->addWidget(buildMachineBox());
  left->addWidget(buildTechniquesBox());
  left->addStretch(1);
  auto* leftW = new QWidget;
  leftW->setLayout(left);
  // As wide as its widest row needs (the model names, the buttons' text in this font), never
  // narrower than the form was: a fixed width cut "default (preset)" to "default (p".
  leftW->setMinimumWidth(340);
  leftW->setSizePolicy(QSizePolicy::Fixed, QSizePolicy::Preferred);
  left->setContentsMargins(0, 0, 0, 0);
  return leftW;
}

QGroupBox* PlannerPage::buildMachineBox() {
  auto* machineBox = new QGroupBox("Model and machine");
  auto* mf = new QFormLayout(machineBox);
  model_ = new QComboBox;
  model_->setObjectName("PlannerModel");
  for (const auto& c : choices_) model_->addItem(c.label, c.id);
  // Wide enough for every name it holds (a long Hugging Face name widens the form, up to a
  // cap; the list and the tooltip show it whole).
  model_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  model_->setMaximumWidth(model_->fontMetrics().averageCharWidth() * 48);
  seqLen_ = new QSpinBox;
  seqLen_->setRange(8, 131072);
  seqLen_->setSuffix(" tokens");
  deviceGiB_ = new QDoubleSpinBox;
  deviceGiB_->setRange(0.5, 1024);
  deviceGiB_->setDecimals(1);
  deviceGiB_->setValue(24);
  deviceGiB_->setSuffix(" GiB");
  ranks_ = new QSpinBox;
  ranks_->setRange(1, 4096);
  goal_ = combo({"fit", "fastest", "largest_batch"});
  backend_ = combo({"cpu", "cuda"});
  backend_->setToolTip(
      "The engine backend the setup would run on: suggestions say whether this engine can run "
      "them there");
  // The button under the list, not beside it: side by side they needed more than the form's
  // column and Qt squeezed both ("default (p", "ɔnfig.json").
  auto* openHf = new QPushButton("Open config.json…");
  openHf->setObjectName("PlannerOpenHf");
  openHf->setMinimumWidth(openHf->sizeHint().width());  // its text whole, never squeezed
  QStringList hfClasses;
  for (const auto* f : ts::core::modelFamilies())
    for (const auto& a : f->hfArchitectures()) hfClasses << QString::fromStdString(a);
  openHf->setToolTip("A Hugging Face model's config.json (" + hfClasses.join(", ") +
                     "), or the folder holding it, as the model: every key of its shape");
  auto* hfRow = new QHBoxLayout;
  hfRow->addWidget(openHf);
  hfRow->addStretch(1);
  mf->addRow("Model", model_);
  mf->addRow("", hfRow);
  modelNote_ = new QLabel;
  modelNote_->setObjectName("PlannerModelNote");
  modelNote_->setWordWrap(true);
  mf->addRow("", modelNote_);
  connect(openHf, &QPushButton::clicked, this, [this] {
    const QString fn = QFileDialog::getOpenFileName(this, "Hugging Face model config", {},
                                                    "Model config (config.json *.json)");
    if (!fn.isEmpty()) addHfModel(fn);
  });
  connect(model_, &QComboBox::currentIndexChanged, this,
          [this] { model_->setToolTip(model_->currentText()); });
  model_->setToolTip(model_->currentText());
  mf->addRow("Sequence length", seqLen_);
  mf->addRow("Device memory", deviceGiB_);
  mf->addRow("Ranks (GPUs)", ranks_);
  mf->addRow("Backend", backend_);
  mf->addRow("Planner goal", goal_);
  return machineBox;
}

QGroupBox* PlannerPage::buildTechniquesBox() {
  auto* techBox = new QGroupBox("Techniques");
  auto* tf = new QFormLayout(techBox);
  precision_ = combo({"fp32", "bf16", "fp16", "fp8", "pure_bf16"});
  checkpointing_ = combo({"none", "every_k", "all"});
  flash_ = new QCheckBox("Flash attention");
  zero_ = combo({"0", "1", "2", "3"});
  offloadOpt_ = combo({"none", "cpu", "nvme"});
  offloadParams_ = combo({"none", "cpu", "nvme"});
  lora_ = new QSpinBox;
  lora_->setRange(0, 1024);
  lora_->setSpecialValueText("off");
  nf4_ = new QCheckBox("4-bit NF4 base");
  nf4_->setToolTip("QLoRA: frozen base weights stored in 4 bits (needs a LoRA rank)");
  adam8_ = new QCheckBox("8-bit optimizer state");
  micro_ = new QSpinBox;
  micro_->setRange(1, 4096);
  tf->addRow("Precision", precision_);
  tf->addRow("Checkpointing", checkpointing_);
  tf->addRow("", flash_);
  tf->addRow("ZeRO stage", zero_);
  tf->addRow("Offload optimizer", offloadOpt_);
  tf->addRow("Offload parameters", offloadParams_);
  tf->addRow("LoRA rank", lora_);
  tf->addRow("", nf4_);
  tf->addRow("", adam8_);
  tf->addRow("Micro-batch", micro_);
  return techBox;
}

// ---- right: the breakdown, the suggestions, the exports
QLayout* PlannerPage::buildResults() {
  auto* right = new QVBoxLayout;
  right->addWidget(buildMemoryBox());
  right->addWidget(buildPlanBox(), 1);
  right->addLayout(buildExportRow());
  return right;
}

QGroupBox* PlannerPage::buildMemoryBox() {
  auto* memBox = new QGroupBox("Memory per rank (this setup)");
  auto* mv = new QVBoxLayout(memBox);
  verdict_ = new QLabel;
  verdict_->setObjectName("BigNumber");
  details_ = new QLabel;
  details_->setObjectName("PageHint");
  details_->setWordWrap(true);
  bars_ = new MemoryBars;
  mv->addWidget(verdict_);
  mv->addWidget(details_);
  mv->addWidget(bars_);
  memBox->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Maximum);
  return memBox;
}

QGroupBox* PlannerPage::buildPlanBox() {
  auto* planBox = new QGroupBox("Suggestions that fit (best first)");
  auto* pv = new QVBoxLayout(planBox);
  planMessage_ = new QLabel;
  planMessage_->setObjectName("Muted");
  planMessage_->setWordWrap(true);
  filter_ = combo({"Fits and runs here", "All that fit"});
  filter_->setToolTip(
      "Fits and runs here: only setups this engine can run on the chosen backend (from its "
      "capabilities). All that fit: also those it cannot run yet, with the reason.");
  auto* planBar = new QHBoxLayout;
  planBar->addWidget(planMessage_, 1);
  planBar->addWidget(new QLabel("Show"));
  planBar->addWidget(filter_);
  buildPlanTable();
  pv->addLayout(planBar);
  pv->addWidget(table_, 1);
  return planBox;
}

void PlannerPage::buildPlanTable() {
  table_ = new QTableView;
  table_->setModel(plans_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->verticalHeader()->setVisible(false);
  table_->setAlternatingRowColors(true);
  table_->setWordWrap(false);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(PlanTableModel::Techniques,
                                                   QHeaderView::Stretch);
  // The verdict is elided (the tooltip has the reasons): the techniques get the room.
  table_->horizontalHeader()->setSectionResizeMode(PlanTableModel::RunsHere,
                                                   QHeaderView::Interactive);
  table_->setColumnWidth(PlanTableModel::RunsHere, 170);
  table_->setTextElideMode(Qt::ElideRight);
}

QLayout* PlannerPage::buildExportRow() {
  connect(table_->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          &PlannerPage::updateExportLabel);
  auto* exportRow = new QHBoxLayout;
  exportLabel_ = new QLabel;
  exportLabel_->setObjectName("Muted");
  applyPlan_ = new QPushButton("Apply to form");
  applyPlan_->setToolTip("Load the selected suggestion's techniques into the form");
  auto* runCfg = new QPushButton("Export run config…");
  auto* ds = new QPushButton("Export DeepSpeed JSON…");
  auto* hf = new QPushButton("Export HF Trainer args…");
  exportRow->addWidget(exportLabel_, 1);
  exportRow->addWidget(applyPlan_);
  exportRow->addWidget(runCfg);
  exportRow->addWidget(ds);
  exportRow->addWidget(hf);
  connect(applyPlan_, &QPushButton::clicked, this, &PlannerPage::applySelectedPlan);
  connect(runCfg, &QPushButton::clicked, this, [this] { exportDialog(PlannerExport::RunConfig); });
  connect(ds, &QPushButton::clicked, this, [this] { exportDialog(PlannerExport::DeepSpeed); });
  connect(hf, &QPushButton::clicked, this, [this] { exportDialog(PlannerExport::HuggingFace); });
  return exportRow;
}

// Every form change recomputes (debounced); a new model loads its defaults first.
void PlannerPage::connectForm() {
  connect(model_, &QComboBox::currentIndexChanged, this, &PlannerPage::loadChoice);
  for (auto* c :
       {goal_, backend_, filter_, precision_, checkpointing_, zero_, offloadOpt_, offloadParams_})
    connect(c, &QComboBox::currentIndexChanged, this, &PlannerPage::scheduleUpdate);
  for (auto* s : {seqLen_, ranks_, lora_, micro_})
    connect(s, &QSpinBox::valueChanged, this, &PlannerPage::scheduleUpdate);
  connect(deviceGiB_, &QDoubleSpinBox::valueChanged, this, &PlannerPage::scheduleUpdate);
  for (auto* b : {flash_, nf4_, adam8_})
    connect(b, &QCheckBox::toggled, this, &PlannerPage::scheduleUpdate);
  connect(lora_, &QSpinBox::valueChanged, this, [this](int r) { nf4_->setEnabled(r > 0); });
}

bool PlannerPage::pendingTimer() const {
  return debounce_->isActive();
}

void PlannerPage::scheduleUpdate() {
  if (!loading_) debounce_->start();
}

void PlannerPage::selectModel(const QString& id) {
  const int i = model_->findData(id);
  if (i >= 0) model_->setCurrentIndex(i);
}
QString PlannerPage::addHfModel(const QString& path) {
  QString error;
  auto choice = plannerModelChoiceFromHf(path.toStdString(), &error);
  if (!choice) {
    modelNote_->setText(error);
    return error;
  }
  int i = model_->findData(choice->id);
  if (i < 0) {
    choices_.push_back(*choice);
    model_->addItem(choice->label, choice->id);
    i = model_->count() - 1;
  } else {
    choices_[size_t(i)] = *choice;
  }
  if (model_->currentIndex() == i)
    loadChoice(i);
  else
    model_->setCurrentIndex(i);
  return {};
}

QString PlannerPage::modelNote() const {
  return modelNote_->text();
}

void PlannerPage::setDeviceMemoryGiB(double gib) {
  deviceGiB_->setValue(gib);
}
void PlannerPage::setRanks(int ranks) {
  ranks_->setValue(ranks);
}

void PlannerPage::setCapabilities(const nlohmann::json& caps) {
  caps_ = caps;
  const auto s = summarizeCapabilities(caps);
  loading_ = true;
  backend_->setCurrentIndex(s.cudaAvailable ? 1 : 0);
  loading_ = false;
  scheduleUpdate();
}
void PlannerPage::setBackend(const QString& backend) {
  setComboText(backend_, backend.toStdString());
}
void PlannerPage::setRunnableOnly(bool v) {
  filter_->setCurrentIndex(v ? 0 : 1);
}
QString PlannerPage::setupNote() const {
  return details_->text();
}
QString PlannerPage::planMessage() const {
  return planMessage_->text();
}

void PlannerPage::setTechniques(const PlannerTechniques& t) {
  loading_ = true;
  setComboText(precision_, t.precision);
  setComboText(checkpointing_, t.checkpointing);
  flash_->setChecked(t.flash);
  zero_->setCurrentIndex(std::clamp(t.zeroStage, 0, 3));
  setComboText(offloadOpt_, t.offloadOptimizer);
  setComboText(offloadParams_, t.offloadParams);
  lora_->setValue(t.loraRank);
  nf4_->setChecked(t.nf4Base);
  nf4_->setEnabled(t.loraRank > 0);
  adam8_->setChecked(t.optimizer8bit);
  micro_->setValue(t.microBatch);
  if (t.seqLen > 0) seqLen_->setValue(t.seqLen);
  loading_ = false;
  scheduleUpdate();
}

void PlannerPage::loadChoice(int index) {
  if (index < 0 || index >= static_cast<int>(choices_.size())) return;
  const auto& choice = choices_[index];
  const auto& base = choice.base;
  if (choice.id.startsWith("hf:")) {
    // The weights' headers are read on a worker (a sharded checkpoint on a slow disk takes a
    // while); the note follows when they land, if this model is still the chosen one.
    const QString id = choice.id, dir = choice.id.mid(3);
    modelNote_->setText("Reading the weights' headers in " + dir + "…");
    auto* watcher = new QFutureWatcher<HfFolderInfo>(this);
    connect(watcher, &QFutureWatcher<HfFolderInfo>::finished, this, [this, watcher, id, dir] {
      watcher->deleteLater();
      if (model_->currentData().toString() != id) return;
      const HfFolderInfo hf = watcher->result();
      modelNote_->setText(hf.ok() ? hf.summary()
                                  : "Shape from " + dir + " (no weights read: " + hf.error + ")");
    });
    watcher->setFuture(
        QtConcurrent::run([path = dir.toStdString()] { return inspectHfFolder(path); }));
  } else {
    modelNote_->clear();
  }
  setTechniques(techniquesOf(base));
  loading_ = true;
  ranks_->setValue(base.parallel.ranks);
  loading_ = false;
  scheduleUpdate();
}

PlannerTechniques PlannerPage::formTechniques() const {
  PlannerTechniques t;
  t.precision = precision_->currentText().toStdString();
  t.checkpointing = checkpointing_->currentText().toStdString();
  t.flash = flash_->isChecked();
  t.zeroStage = zero_->currentIndex();
  t.offloadOptimizer = offloadOpt_->currentText().toStdString();
  t.offloadParams = offloadParams_->currentText().toStdString();
  t.loraRank = lora_->value();
  t.nf4Base = nf4_->isChecked();
  t.optimizer8bit = adam8_->isChecked();
  t.microBatch = micro_->value();
  t.seqLen = seqLen_->value();
  return t;
}

void PlannerPage::recompute() {
  debounce_->stop();
  const int i = model_->currentIndex();
  if (i < 0 || i >= static_cast<int>(choices_.size())) return;
  PlannerInput in;
  in.ranks = ranks_->value();
  in.config = applyTechniques(choices_[i].base, formTechniques(), in.ranks);
  in.config.device.backend = backend_->currentText().toStdString();
  in.capabilities = caps_;
  in.runnableOnly = filter_->currentIndex() == 0;
  in.deviceMemory = static_cast<int64_t>(deviceGiB_->value() * double(1LL << 30));
  in.goal =
      core::planGoalFromString(goal_->currentText().toStdString()).value_or(core::PlanGoal::Fit);
  verdict_->setText(verdict_->text().isEmpty() ? "Estimating…" : verdict_->text());
  controller_->request(std::move(in));
}

void PlannerPage::showOutput(const PlannerInput& in, const PlannerOutput& out) {
  input_ = in;
  output_ = out;
  if (!out.error.isEmpty()) {
    verdict_->setObjectName("Issue");
    verdict_->setText("This setup is not valid");
    details_->setText(out.error);
    bars_->setReports(std::nullopt, std::nullopt, in.deviceMemory, true);
  } else {
    const auto& e = out.estimate;
    verdict_->setObjectName(e.fits ? "BigNumber" : "Issue");
    verdict_->setText(QStringLiteral("%1 peak on rank 0 of %2 — %3")
                          .arg(formatBytes(double(e.peak_device)))
                          .arg(formatBytes(double(in.deviceMemory)))
                          .arg(e.fits ? "fits" : "does not fit"));
    QString d = QStringLiteral(
                    "%1 parameters (%2 trainable) · %3 tokens per step · %4 B/param "
                    "for model states")
                    .arg(countText(e.params.total))
                    .arg(countText(e.params.trainable))
                    .arg(QLocale().toString(qlonglong(e.tokens_per_step)))
                    .arg(e.bytes_per_param, 0, 'f', 1);
    if (e.peak_host > 0) d += " · host " + formatBytes(double(e.peak_host));
    if (e.peak_nvme > 0) d += " · NVMe " + formatBytes(double(e.peak_nvme));
    // Said once here (not again above the suggestions): the rows say "no CUDA device here".
    if (!out.machine.isEmpty())
      d += QStringLiteral("\nRuns here: no — %1. The figures are for a %2 %3 device elsewhere.")
               .arg(out.machine, formatBytes(double(in.deviceMemory)),
                    in.config.device.backend == "cuda"
                        ? QStringLiteral("CUDA")
                        : QString::fromStdString(in.config.device.backend));
    if (!out.limitations.isEmpty())
      d += QStringLiteral("\nThis engine cannot run this setup on %1: %2")
               .arg(QString::fromStdString(in.config.device.backend), out.limitations.join("; "));
    if (out.stepTime)
      d += QStringLiteral("\nTime here: %1%2 (the step's FLOPs at %3)")
               .arg(out.stepTime->sentence(),
                    out.stepTime->impractical
                        ? QStringLiteral(": impractically slow on this machine")
                        : QString(),
                    out.gemm.basis);
    details_->setText(d);
    bars_->setReports(e.report, std::nullopt, in.deviceMemory, true);
  }
  verdict_->style()->unpolish(verdict_);
  verdict_->style()->polish(verdict_);
  plans_->setPlans(out.plans.plans, QString::fromStdString(out.plans.baseline_summary), out.gemm);
  // The time column only where there is a rate (the cpu backend).
  table_->setColumnHidden(PlanTableModel::TimeHere, out.gemm.flopsPerS <= 0);
  QStringList kinds;
  for (const auto& p : out.plans.plans)
    if (!kinds.contains(QString::fromStdString(p.kind))) kinds << QString::fromStdString(p.kind);
  QString msg =
      out.plans.plans.empty()
          ? QString::fromStdString(out.plans.message.empty() ? "No setup fits." : out.plans.message)
          : QStringLiteral(
                "The best %1 of %2 setups that fit, the best of each kind first (%3); step time "
                "relative to the setup as configured; hover a row for its summary.")
                .arg(out.plans.plans.size())
                .arg(out.plans.fitting)
                .arg(kinds.join(", "));
  if (!out.plans.plans.empty() && out.plans.not_runnable > 0)
    msg += QStringLiteral(" %1 more fit but need what this engine cannot run yet.")
               .arg(out.plans.not_runnable);
  if (caps_.is_null()) msg += " (Engine capabilities unknown: not checked whether it runs here.)";
  planMessage_->setText(msg);
  updateExportLabel();
  emit updated();
}

core::RunConfig PlannerPage::chosenConfig() const {
  const auto rows = table_->selectionModel()->selectedRows();
  if (!rows.isEmpty())
    if (const auto* p = plans_->plan(rows.first().row())) return p->config;
  if (input_) return input_->config;
  const int i = std::max(0, model_->currentIndex());
  return applyTechniques(choices_.at(i).base, formTechniques(), ranks_->value());
}

void PlannerPage::updateExportLabel() {
  const auto rows = table_->selectionModel()->selectedRows();
  applyPlan_->setEnabled(!rows.isEmpty());
  exportLabel_->setText(rows.isEmpty()
                            ? "Exports the setup in the form"
                            : QStringLiteral("Exports suggestion #%1").arg(rows.first().row() + 1));
}

void PlannerPage::applySelectedPlan() {
  const auto rows = table_->selectionModel()->selectedRows();
  if (rows.isEmpty()) return;
  const auto* p = plans_->plan(rows.first().row());
  if (!p) return;
  const core::Plan plan = *p;  // setTechniques triggers a recompute that replaces the rows
  setTechniques(techniquesOf(plan.config));
}

bool PlannerPage::exportTo(PlannerExport kind, const QString& path, QString* error) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) {
    if (error) *error = QStringLiteral("Cannot write %1: %2").arg(path, f.errorString());
    return false;
  }
  const std::string text = exportPlannerConfig(chosenConfig(), kind);
  if (f.write(text.data(), qint64(text.size())) != qint64(text.size())) {
    if (error) *error = QStringLiteral("Cannot write %1: %2").arg(path, f.errorString());
    return false;
  }
  return true;
}

void PlannerPage::exportDialog(PlannerExport kind) {
  const QString path = QFileDialog::getSaveFileName(this, "Export", suggestedExportName(kind),
                                                    "JSON files (*.json)");
  if (path.isEmpty()) return;
  QString err;
  if (!exportTo(kind, path, &err)) QMessageBox::warning(this, "Export failed", err);
}

}  // namespace ts::gui
