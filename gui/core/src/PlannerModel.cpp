#include "trainscope/gui/PlannerModel.h"

#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/config/ConfigExport.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/gui/Capabilities.h"
#include "trainscope/gui/HfFolderInfo.h"
#include "trainscope/gui/PresetLibrary.h"

namespace ts::gui {

std::vector<PlannerModelChoice> plannerModelChoices(const QString& presetDir) {
  std::vector<PlannerModelChoice> out;
  for (const auto& p : PresetLibrary::builtIn(presetDir)) {
    auto parsed = core::parseConfigJson(p.doc);
    if (!parsed.ok()) continue;  // a broken preset is reported by the wizard, not here
    out.push_back({QStringLiteral("%1 (preset)").arg(p.title), "preset:" + p.id, *parsed.config});
  }
  for (const auto& name : core::modelPresetNames()) {
    auto model = core::modelPreset(name);
    if (!model) continue;
    core::RunConfig c;
    c.name = name;
    c.model = *model;
    c.train.micro_batch = 1;
    c.precision.policy = "bf16";
    c.optimizer.lr = 3e-4;
    out.push_back({QString::fromStdString(name), QString::fromStdString("shape:" + name), c});
  }
  return out;
}

std::optional<PlannerModelChoice> plannerModelChoiceFromHf(const std::string& path,
                                                           QString* error) {
  core::HfModelInfo info;
  try {
    info = core::readHfConfig(path);
  } catch (const core::HfConfigError& e) {
    if (error) *error = QString::fromStdString(e.what());
    return std::nullopt;
  }
  core::RunConfig c = core::hfRunConfig(info.dir, info.model);
  // Only the shape matters to the estimate; a config.json without its weights still plans.
  const HfFolderInfo weights = inspectHfFolder(info.dir);
  if (!weights.ok()) c.finetune.base_checkpoint.clear();
  c.train.micro_batch = 1;
  c.precision.policy = "bf16";
  c.optimizer.lr = 3e-4;
  return PlannerModelChoice{
      QStringLiteral("%1 (%2)").arg(QString::fromStdString(c.name),
                                    QString::fromStdString(info.architecture)),
      QString::fromStdString("hf:" + info.configPath), c};
}

PlannerTechniques techniquesOf(const core::RunConfig& c) {
  PlannerTechniques t;
  t.precision = c.precision.policy;
  t.checkpointing = c.memory.checkpointing;
  t.flash = c.attention.impl == "flash";
  t.zeroStage = c.parallel.zero_stage;
  t.offloadOptimizer = c.parallel.offload_optimizer;
  t.offloadParams = c.parallel.offload_params;
  t.loraRank = c.finetune.lora.r;
  t.nf4Base = c.finetune.base_quant == "nf4";
  t.optimizer8bit = c.optimizer.state_bits == 8;
  t.microBatch = c.train.micro_batch;
  t.seqLen = c.model.seq_len;
  return t;
}

core::RunConfig applyTechniques(core::RunConfig c, const PlannerTechniques& t, int ranks) {
  c.precision.policy = t.precision;
  c.memory.checkpointing = t.checkpointing;
  c.attention.impl = t.flash ? "flash" : "naive";
  c.parallel.ranks = std::max(1, ranks);
  c.parallel.zero_stage = t.zeroStage;
  c.parallel.offload_optimizer = t.offloadOptimizer;
  c.parallel.offload_params = t.offloadParams;
  c.finetune.lora.r = t.loraRank;
  // NF4 quantizes frozen base weights: only meaningful with adapters on top.
  c.finetune.base_quant = (t.nf4Base && t.loraRank > 0) ? "nf4" : "none";
  c.optimizer.state_bits = t.optimizer8bit ? 8 : 32;
  c.train.micro_batch = std::max(1, t.microBatch);
  if (t.seqLen > 0) c.model.seq_len = t.seqLen;
  return c;
}

PlannerOutput evaluatePlanner(const PlannerInput& in) {
  PlannerOutput out;
  // Validate through the same path a run takes, so the page never shows an estimate for a
  // config the engine would refuse.
  auto parsed = core::parseConfigJson(core::toJson(in.config));
  if (!parsed.ok()) {
    QStringList lines;
    for (const auto& i : parsed.issues) lines << QString::fromStdString(i.toString());
    out.error = lines.join("\n");
    return out;
  }
  core::EstimateOptions eo;
  eo.device_memory = in.deviceMemory;
  out.estimate = core::estimateMemory(*parsed.config, eo);
  core::PlanRequest req;
  req.base = *parsed.config;
  req.device_memory = in.deviceMemory;
  req.ranks = std::max(1, in.ranks);
  req.goal = in.goal;
  req.max_plans = in.maxPlans;
  if (!in.capabilities.is_null()) {
    const nlohmann::json caps = in.capabilities;
    auto why = [caps](const core::RunConfig& c) {
      std::vector<std::string> out;
      for (const auto& i : engineLimitations(caps, c)) out.push_back(i.path + ": " + i.message);
      return out;
    };
    req.limitations = why;
    req.runnable_only = in.runnableOnly;
    for (const auto& l : why(*parsed.config)) out.limitations << QString::fromStdString(l);
  }
  if (in.deviceMemory > 0)
    out.plans = core::planTraining(req);
  else
    out.plans.message = "Set the device memory to get suggestions.";
  return out;
}

std::string exportPlannerConfig(const core::RunConfig& config, PlannerExport kind) {
  switch (kind) {
    case PlannerExport::RunConfig:
      return core::toJson(config).dump(2) + "\n";
    case PlannerExport::DeepSpeed:
      return core::toDeepSpeedConfig(config).dump(2) + "\n";
    case PlannerExport::HuggingFace:
      return core::toJson(core::toHuggingFace(config, "ds_config.json")).dump(2) + "\n";
  }
  return {};
}

QString suggestedExportName(PlannerExport kind) {
  switch (kind) {
    case PlannerExport::RunConfig:
      return "run_config.json";
    case PlannerExport::DeepSpeed:
      return "ds_config.json";
    case PlannerExport::HuggingFace:
      return "hf_trainer_args.json";
  }
  return {};
}

PlannerController::PlannerController(QObject* parent) : QObject(parent) {}

void PlannerController::request(PlannerInput input) {
  pending_ = std::move(input);
  if (!busy_) startNext();
}

void PlannerController::startNext() {
  if (!pending_) return;
  PlannerInput in = std::move(*pending_);
  pending_.reset();
  busy_ = true;
  auto* watcher = new QFutureWatcher<PlannerOutput>(this);
  connect(watcher, &QFutureWatcher<PlannerOutput>::finished, this, [this, watcher, in] {
    const PlannerOutput out = watcher->result();
    watcher->deleteLater();
    busy_ = false;
    // A newer request supersedes this result: show only the latest.
    if (pending_) {
      startNext();
      return;
    }
    emit finished(in, out);
  });
  watcher->setFuture(QtConcurrent::run([in] { return evaluatePlanner(in); }));
}

PlanTableModel::PlanTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void PlanTableModel::setPlans(std::vector<core::Plan> plans, QString basis) {
  beginResetModel();
  plans_ = std::move(plans);
  basis_ = std::move(basis);
  endResetModel();
}

const core::Plan* PlanTableModel::plan(int row) const {
  return row >= 0 && row < static_cast<int>(plans_.size()) ? &plans_[row] : nullptr;
}

int PlanTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(plans_.size());
}
int PlanTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : ColumnCount;
}

static QString bytesText(double b) {
  return QString::fromStdString(core::formatBytes(b));
}

QVariant PlanTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const core::Plan& p = plans_[index.row()];
  const auto& e = p.estimate;
  if (role == Qt::ToolTipRole) {
    if (index.column() == StepTime)
      return QStringLiteral(
                 "Modeled step time relative to the setup as configured (1.00×)%1.\n"
                 "Below 1: faster than what you have; above 1: slower.")
          .arg(basis_.isEmpty() ? QString() : QStringLiteral(":\n") + basis_);
    if (index.column() == RunsHere) {
      if (p.limitations.empty()) return QStringLiteral("This engine can run this setup here.");
      QStringList l;
      for (const auto& w : p.limitations) l << QString::fromStdString(w);
      return QStringLiteral("This engine cannot run this setup here:\n") + l.join("\n");
    }
    return QString::fromStdString(p.summary);
  }
  if (role == Qt::TextAlignmentRole) {
    if (index.column() == Techniques || index.column() == Class || index.column() == RunsHere)
      return int(Qt::AlignLeft | Qt::AlignVCenter);
    return int(Qt::AlignRight | Qt::AlignVCenter);
  }
  if (role != Qt::DisplayRole && role != Qt::UserRole) return {};
  const bool raw = role == Qt::UserRole;
  switch (index.column()) {
    case Rank:
      return index.row() + 1;
    case Class:
      return QString::fromStdString(p.plan_class);
    case Techniques: {
      QStringList l;
      for (const auto& t : p.techniques) l << QString::fromStdString(t);
      return l.join(", ");
    }
    case Batch:
      if (raw) return qlonglong(p.config.train.micro_batch) * p.config.train.grad_accum;
      return QStringLiteral("%1 × %2")
          .arg(p.config.train.micro_batch)
          .arg(p.config.train.grad_accum);
    case PeakDevice:
      return raw ? QVariant(qlonglong(e.peak_device)) : bytesText(e.peak_device);
    case Host:
      if (raw) return qlonglong(e.peak_host + e.peak_nvme);
      if (e.peak_host + e.peak_nvme == 0) return QStringLiteral("–");
      return e.peak_nvme > 0 ? bytesText(e.peak_host) + " + " + bytesText(e.peak_nvme) + " NVMe"
                             : bytesText(e.peak_host);
    case StepTime:
      return raw ? QVariant(p.cost.relative)
                 : QVariant(QStringLiteral("%1×").arg(p.cost.relative, 0, 'f', 2));
    case RunsHere: {
      if (raw) return p.limitations.empty();
      if (p.limitations.empty()) return QStringLiteral("yes");
      // Short: what stands in the way ("no: bf16, LoRA, no GPU"); the tooltip says why.
      QStringList what;
      for (const auto& l : p.limitations) {
        const std::string path = l.substr(0, l.find(':'));
        QString w;
        if (path == "precision.policy")
          w = QString::fromStdString(p.config.precision.policy);
        else if (path == "finetune.lora.r")
          w = "LoRA";
        else if (path == "finetune.base_quant")
          w = "NF4 base";
        else if (path == "optimizer.state_bits")
          w = "8-bit state";
        else if (path == "parallel.zero_stage")
          w = "ZeRO";
        else if (path.rfind("parallel.offload", 0) == 0)
          w = "offload";
        else if (path == "memory.activation_compression")
          w = "compression";
        else if (path == "device.backend")
          w = QStringLiteral("no %1 here").arg(QString::fromStdString(p.config.device.backend));
        else
          w = QString::fromStdString(path);
        if (!what.contains(w)) what << w;
      }
      return QStringLiteral("no: %1").arg(what.join(", "));
    }
  }
  return {};
}

QVariant PlanTableModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == StepTime)
    return QStringLiteral("Relative to the setup as configured (1.00×)%1")
        .arg(basis_.isEmpty() ? QString() : QStringLiteral(": ") + basis_);
  if (o != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, o, role);
  switch (section) {
    case Rank:
      return "#";
    case Class:
      return "Class";
    case Techniques:
      return "Techniques";
    case Batch:
      return "Micro × accum";
    case PeakDevice:
      return "Device peak / rank";
    case Host:
      return "Host / NVMe";
    case StepTime:
      return "Step time (rel.)";
    case RunsHere:
      return "Runs here";
  }
  return {};
}

}  // namespace ts::gui
