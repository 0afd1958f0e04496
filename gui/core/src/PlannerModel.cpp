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

QString durationText(double s) {
  if (s < 10) return QString::number(s, 'f', s < 1 ? 2 : 1) + " s";
  if (s < 120) return QString::number(s, 'f', 0) + " s";
  if (s < 2 * 3600) return QString::number(s / 60, 'f', 0) + " min";
  if (s < 48 * 3600) return QString::number(s / 3600, 'f', 1) + " h";
  if (s < 60 * 86400) return QString::number(s / 86400, 'f', 1) + " days";
  if (s < 2 * 365 * 86400) return QString::number(s / (30 * 86400), 'f', 0) + " months";
  return QString::number(s / (365 * 86400), 'f', 0) + " years";
}

QString StepTimeEstimate::stepText() const {
  return QStringLiteral("≥ %1").arg(durationText(seconds));
}

QString StepTimeEstimate::sentence() const {
  const QString tps =
      tokensPerS >= 100 ? QString::number(tokensPerS, 'f', 0) : QString::number(tokensPerS, 'g', 2);
  return QStringLiteral("at least %1 per step (%2 tokens/s); %3 M tokens would take %4")
      .arg(durationText(seconds), tps)
      .arg(kSmallRunTokens / 1e6, 0, 'f', 0)
      .arg(durationText(kSmallRunTokens / tokensPerS));
}

GemmRate cpuGemmRate(const nlohmann::json& caps, const core::RunConfig& c) {
  GemmRate r;
  std::string backend = c.device.backend;
  if (backend == "auto") backend = summarizeCapabilities(caps).cudaAvailable ? "cuda" : "cpu";
  if (backend != "cpu" || !caps.is_object()) return r;
  const auto obj = [](const nlohmann::json& j, const char* k) {
    return j.is_object() && j.contains(k) && j[k].is_object() ? j[k] : nlohmann::json::object();
  };
  const auto bf16 = obj(obj(caps, "precisions"), "bf16");
  const auto cal = obj(bf16, "gemm_calibration");
  // 16-bit policies multiply in bf16 only where "auto" picked the native bf16 kernel.
  const bool bf16Gemm = (c.precision.policy == "bf16" || c.precision.policy == "pure_bf16") &&
                        c.precision.gemm != "fp32" &&
                        (c.precision.gemm == "bf16" || bf16.value("auto_gemm", "") == "bf16");
  const double gflops = cal.value(bf16Gemm ? "bf16_gflops" : "fp32_gflops", 0.0);
  if (gflops > 0) {
    r.flopsPerS = gflops * 1e9;
    r.measured = true;
    r.basis = QStringLiteral("the %1 GFLOP/s the engine measured for its GEMMs here")
                  .arg(gflops, 0, 'f', 0);
    return r;
  }
  // No measurement: vector lanes x 2 (an FMA is two FLOPs) x 2 FMA units per cycle, at
  // 2.5 GHz, half of it reached: a guess, and the page says it is one.
  const auto cpu = obj(caps, "cpu");
  const int threads = cpu.value("threads", 0);
  if (threads <= 0) return r;
  const bool avx512 = cpu.value("avx512f", false);
  const bool avx2 = cpu.value("avx2", false) && cpu.value("fma", false);
  const double perCycle = avx512 ? 64 : avx2 ? 32 : 8;
  const double perThread = perCycle * 2.5e9 * 0.5;
  r.flopsPerS = threads * perThread;
  r.basis = QStringLiteral(
                "an assumed %1 GFLOP/s (%2 threads × %3 GFLOP/s: half the %4 peak at 2.5 GHz; "
                "the engine measured no GEMM rate on this CPU)")
                .arg(r.flopsPerS / 1e9, 0, 'f', 0)
                .arg(threads)
                .arg(perThread / 1e9, 0, 'f', 0)
                .arg(avx512 ? "AVX-512 FMA"
                     : avx2 ? "AVX2 FMA"
                            : "scalar");
  return r;
}

std::optional<StepTimeEstimate> estimateStepTime(const core::MemoryEstimate& e, double flops) {
  if (flops <= 0 || e.flops_per_step <= 0 || e.tokens_per_step <= 0) return std::nullopt;
  StepTimeEstimate t;
  t.flopsPerS = flops;
  // Every rank of a cpu run shares this machine's cores: the whole step's FLOPs at its rate.
  t.seconds = e.flops_per_step / flops;
  t.tokensPerS = double(e.tokens_per_step) / t.seconds;
  t.impractical = kSmallRunTokens / t.tokensPerS > 7 * 86400.0;
  return t;
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
  out.gemm = cpuGemmRate(in.capabilities, *parsed.config);
  out.stepTime = estimateStepTime(out.estimate, out.gemm.flopsPerS);
  core::PlanRequest req;
  req.base = *parsed.config;
  req.device_memory = in.deviceMemory;
  req.ranks = std::max(1, in.ranks);
  req.goal = in.goal;
  req.max_plans = in.maxPlans;
  req.best_of_each_kind_first = true;
  std::string machine;  // the device.backend limitation: the same for every plan
  if (!in.capabilities.is_null()) {
    const nlohmann::json caps = in.capabilities;
    // What the engine cannot do filters the plans; what this machine lacks does not: planning
    // for a GPU elsewhere is what the page is for.
    auto why = [caps](const core::RunConfig& c) {
      std::vector<std::string> out;
      for (const auto& i : engineLimitations(caps, c))
        if (i.path != "device.backend") out.push_back(i.path + ": " + i.message);
      return out;
    };
    req.limitations = why;
    req.runnable_only = in.runnableOnly;
    for (const auto& l : why(*parsed.config)) out.limitations << QString::fromStdString(l);
    for (const auto& i : engineLimitations(caps, *parsed.config))
      if (i.path == "device.backend") machine = i.path + ": " + i.message;
  }
  if (!machine.empty()) out.machine = QString::fromStdString(machine.substr(machine.find(':') + 2));
  if (in.deviceMemory > 0) {
    out.plans = core::planTraining(req);
    if (!machine.empty())
      for (auto& p : out.plans.plans) p.limitations.push_back(machine);
  } else {
    out.plans.message = "Set the device memory to get suggestions.";
  }
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

void PlanTableModel::setPlans(std::vector<core::Plan> plans, QString basis, GemmRate gemm) {
  beginResetModel();
  plans_ = std::move(plans);
  basis_ = std::move(basis);
  times_.clear();
  gemm_ = std::move(gemm);
  for (const auto& p : plans_) times_.push_back(estimateStepTime(p.estimate, gemm_.flopsPerS));
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
    const auto& time = times_[size_t(index.row())];
    if (index.column() == TimeHere) {
      if (!time)
        return QStringLiteral(
            "No time estimate: nothing here measures this backend's compute rate "
            "(the relative step time compares the setups).");
      return QStringLiteral(
                 "This machine: %1.\n%2 FLOPs per step at %3; attention, element-wise work "
                 "and the optimizer come on top.")
          .arg(time->sentence())
          .arg(e.flops_per_step, 0, 'g', 3)
          .arg(gemm_.basis);
    }
    if (index.column() == RunsHere) {
      if (p.limitations.empty())
        return time && time->impractical
                   ? QStringLiteral(
                         "This engine can run this setup here, but impractically "
                         "slowly: %1.")
                         .arg(time->sentence())
                   : QStringLiteral("This engine can run this setup here.");
      QStringList l;
      bool machineOnly = true;  // the engine runs it, where the device is
      for (const auto& w : p.limitations) {
        const std::string machine = "device.backend: ";
        const bool isMachine = w.rfind(machine, 0) == 0;
        machineOnly = machineOnly && isMachine;
        l << QString::fromStdString(isMachine ? w.substr(machine.size()) : w);
      }
      return (machineOnly ? QStringLiteral("This engine runs this setup, but not here:\n")
                          : QStringLiteral("This engine cannot run this setup here:\n")) +
             l.join("\n");
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
    case Class:  // the kind says LoRA or QLoRA, ZeRO or offload, where the class does not
      return QString::fromStdString(p.kind.empty() ? p.plan_class : p.kind);
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
    case TimeHere: {
      const auto& time = times_[size_t(index.row())];
      if (raw) return time ? QVariant(time->seconds) : QVariant();
      return time ? time->stepText() : QStringLiteral("–");
    }
    case RunsHere: {
      if (raw) return p.limitations.empty();
      if (p.limitations.empty()) {
        const auto& time = times_[size_t(index.row())];
        return time && time->impractical ? QStringLiteral("yes, impractically slow")
                                         : QStringLiteral("yes");
      }
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
          w = p.config.device.backend == "cuda"
                  ? QStringLiteral("no CUDA device here")
                  : QStringLiteral("no %1 here")
                        .arg(QString::fromStdString(p.config.device.backend));
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
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == PeakDevice)
    return QStringLiteral("Peak device memory of one rank (rank 0)");
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == TimeHere)
    return QStringLiteral(
        "At least this long per optimizer step on this machine: the step's FLOPs at this CPU's "
        "GEMM rate (the engine's measurement, else assumed from its threads)");
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == StepTime)
    return QStringLiteral("Relative to the setup as configured (1.00×)%1")
        .arg(basis_.isEmpty() ? QString() : QStringLiteral(": ") + basis_);
  if (o != Qt::Horizontal || role != Qt::DisplayRole)
    return QAbstractTableModel::headerData(section, o, role);
  switch (section) {
    case Rank:
      return "#";
    case Class:
      return "Kind";
    case Techniques:
      return "Techniques";
    case Batch:
      return "Micro × accum";
    case PeakDevice:
      return "Device / rank";  // the peak: the tooltip and the memory box say so
    case Host:
      return "Host / NVMe";
    case StepTime:
      return "Step time";  // relative (the values read 0.80×; the tooltip says to what)
    case TimeHere:
      return "Time / step";
    case RunsHere:
      return "Runs here";
  }
  return {};
}

}  // namespace ts::gui
