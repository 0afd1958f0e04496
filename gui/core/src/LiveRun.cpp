#include "trainscope/gui/LiveRun.h"

#include <algorithm>
#include <cmath>

namespace ts::gui {

QString toString(RunState s) {
  switch (s) {
    case RunState::Starting:
      return QStringLiteral("starting");
    case RunState::Running:
      return QStringLiteral("running");
    case RunState::Paused:
      return QStringLiteral("paused");
    case RunState::Completed:
      return QStringLiteral("completed");
    case RunState::Stopped:
      return QStringLiteral("stopped");
    case RunState::Failed:
      return QStringLiteral("failed");
    case RunState::Detached:
      return QStringLiteral("running (followed from the database)");
  }
  return {};
}

// 65,536 samples per curve: past that, neighbours merge (min/max kept), so a redraw scans a
// bounded number of samples and memory stays flat however long the run.
constexpr size_t kCurveCapacity = size_t{1} << 16;

LiveRun::LiveRun(QString name, QObject* parent)
    : QObject(parent),
      name_(std::move(name)),
      loss_(kCurveCapacity),
      lossEma_(kCurveCapacity),
      evalLoss_(kCurveCapacity),
      lr_(kCurveCapacity),
      tps_(kCurveCapacity),
      lossScale_(kCurveCapacity),
      distillCe_(kCurveCapacity),
      distillKl_(kCurveCapacity) {}

bool LiveRun::isActive() const {
  return state_ == RunState::Starting || state_ == RunState::Running ||
         state_ == RunState::Paused || state_ == RunState::Detached;
}

void LiveRun::setState(RunState s, const QString& reason) {
  if (s == state_ && reason.isEmpty()) return;
  state_ = s;
  if (!reason.isEmpty()) reason_ = reason;
  dirty_ = true;
  emit stateChanged(s);
}

void LiveRun::addLog(const QString& level, const QString& text, double time) {
  log_.push_back({time, level, text});
  ++logAppended_;
  if (log_.size() > kMaxLogLines) log_.pop_front();
  dirty_ = true;
}

void LiveRun::applyStep(const core::StepEvent& s, double time) {
  const double x = static_cast<double>(s.step);
  if (firstStep_ < 0) {
    firstStep_ = s.step;
    firstTime_ = time;
  } else if (s.step > lastStep_ && time > lastTime_ + 1e-6) {
    const double perStep = (time - lastTime_) / static_cast<double>(s.step - lastStep_);
    recentStepS_ = recentStepS_ == 0 ? perStep : 0.9 * recentStepS_ + 0.1 * perStep;
  }
  if (s.step_ms > 0 && recentStepS_ == 0) recentStepS_ = s.step_ms / 1000.0;
  lastTime_ = time;
  lastStep_ = s.step;
  tokens_ = s.tokens;
  lastTps_ = s.tokens_per_s;
  if (s.skipped) ++skipped_;
  if (std::isfinite(s.loss) && !s.skipped) {
    loss_.append(x, s.loss);
    lossEma_.append(x, ema_.push(s.loss));
  }
  lr_.append(x, s.lr);
  tps_.append(x, s.tokens_per_s);
  if (std::isfinite(s.tokens_per_s) && s.tokens_per_s > 0)
    tpsEma_.append(x, tpsSmoother_.push(s.tokens_per_s));
  lossScale_.append(x, s.loss_scale);
  if (s.loss_scale != 1.0) usesLossScale_ = true;
  if (state_ == RunState::Starting) setState(RunState::Running);
  dirty_ = true;
}

void LiveRun::apply(const core::Event& e) {
  using core::EventType;
  try {
    switch (e.type) {
      case EventType::Hello:
        applyHello(e.body);
        break;
      case EventType::Config:
        applyConfig(e.body);
        break;
      case EventType::MemoryPlan:
        predicted_ = core::memoryReportFromJson(e.body);
        alignPrediction();
        break;
      case EventType::Step:
        applyStep(core::stepEventFromJson(e.body), e.time);
        applyStepExtras(e.body);
        break;
      case EventType::Memory:
        applyMemory(e.body);
        break;
      case EventType::Eval:
        applyEval(e.body);
        break;
      case EventType::Checkpoint:
        addLog("info",
               QStringLiteral("checkpoint at step %1: %2")
                   .arg(e.body.value("step", int64_t{0}))
                   .arg(QString::fromStdString(e.body.value("path", std::string()))),
               e.time);
        break;
      case EventType::Log:
        addLog(QString::fromStdString(e.body.value("level", std::string("info"))),
               QString::fromStdString(e.body.value("message", e.body.value("text", std::string()))),
               e.time);
        applyLogFields(e.body);
        break;
      case EventType::Warning:
        addLog("warning", QString::fromStdString(e.body.value("message", e.body.dump())), e.time);
        break;
      case EventType::Error:
        addLog("error", QString::fromStdString(e.body.value("message", e.body.dump())), e.time);
        break;
      case EventType::Finished:
        applyFinished(e.body, e.time);
        break;
      case EventType::KernelSummary:
        applyKernelSummary(e.body);
        break;
      default:
        break;  // raw `kernels` spans: the timeline page reads them from the database
    }
  } catch (const std::exception& ex) {
    addLog("warning", QStringLiteral("ignored malformed %1 event: %2")
                          .arg(QString::fromStdString(e.typeName), ex.what()));
  }
  dirty_ = true;
}

// What the engine confirms in structured log fields: its pause state and its control socket.
void LiveRun::applyLogFields(const nlohmann::json& body) {
  if (auto it = body.find("state"); it != body.end() && it->is_string() && isActive()) {
    if (*it == "paused") setState(RunState::Paused);
    if (*it == "running") setState(RunState::Running);
  }
  if (auto it = body.find("control_socket"); it != body.end() && it->is_string())
    controlSocket_ = QString::fromStdString(it->get<std::string>());
  if (auto it = body.find("run_dir"); it != body.end() && it->is_string() && runDir_.isEmpty())
    runDir_ = QString::fromStdString(it->get<std::string>());
}

void LiveRun::applyHello(const nlohmann::json& body) {
  hello_ = body;
  if (body.contains("run_id") && body["run_id"].is_number_integer())
    runId_ = body["run_id"].get<int64_t>();
  if (state_ == RunState::Starting) setState(RunState::Running);
}

// The resolved config: the run's length and whether it scales the loss (fp16).
void LiveRun::applyConfig(const nlohmann::json& body) {
  const auto& c = body.contains("config") ? body["config"] : body;
  config_ = c;
  if (body.contains("run_id") && body["run_id"].is_number_integer())
    runId_ = body["run_id"].get<int64_t>();
  if (c.contains("train") && c["train"].contains("steps") &&
      c["train"]["steps"].is_number_integer())
    totalSteps_ = c["train"]["steps"].get<int64_t>();
  if (c.contains("precision") && c["precision"].value("policy", "") == "fp16")
    usesLossScale_ = true;
}

// What a step event carries beyond core::StepEvent: distillation terms, ranks, communication.
void LiveRun::applyStepExtras(const nlohmann::json& body) {
  const double x = static_cast<double>(lastStep_);
  if (body.contains("distill_ce") && body["distill_ce"].is_number())
    distillCe_.append(x, body["distill_ce"].get<double>());
  if (body.contains("distill_kl") && body["distill_kl"].is_number())
    distillKl_.append(x, body["distill_kl"].get<double>());
  if (auto it = body.find("ranks"); it != body.end() && it->is_number_integer())
    ranks_ = std::max(1, it->get<int>());
  if (auto it = body.find("comm_bytes"); it != body.end() && it->is_number())
    commBytes_ = std::max<int64_t>(0, it->get<int64_t>());
}

// A measurement: the table, the parameter counts, and each rank's device total over time.
void LiveRun::applyMemory(const nlohmann::json& body) {
  measured_ = core::memoryReportFromJson(body);
  alignPrediction();
  if (body.contains("params") && body["params"].is_object()) params_ = body["params"];
  auto objectOrNull = [&](const char* k) {
    auto it = body.find(k);
    return it != body.end() && it->is_object() ? *it : nlohmann::json();
  };
  process_ = objectOrNull("process");
  deviceCount_ = objectOrNull("device_memory");
  if (memTime_.size() < measured_->ranks.size())
    memTime_.resize(measured_->ranks.size(), SeriesBuffer(1 << 16));
  for (size_t r = 0; r < measured_->ranks.size(); ++r) {
    int64_t total = 0;
    for (const auto& entry : measured_->ranks[r].tiers[0]) total += entry.current;
    const double x = body.contains("step") && body["step"].is_number()
                         ? body["step"].get<double>()
                         : static_cast<double>(lastStep_);
    memTime_[r].append(x, static_cast<double>(total));
  }
}

void LiveRun::applyEval(const nlohmann::json& body) {
  const double step = body.contains("step") && body["step"].is_number()
                          ? body["step"].get<double>()
                          : static_cast<double>(lastStep_);
  if (auto it = body.find("accuracy"); it != body.end() && it->is_number())
    accuracy_ = it->get<double>();
  for (const char* k : {"loss", "val_loss", "eval_loss"}) {
    if (body.contains(k) && body[k].is_number()) {
      evalLoss_.append(step, body[k].get<double>());
      break;
    }
  }
}

void LiveRun::applyFinished(const nlohmann::json& body, double time) {
  const std::string st = body.value("status", std::string("completed"));
  const QString reason = QString::fromStdString(body.value("reason", std::string()));
  setState(st == "completed" ? RunState::Completed
           : st == "stopped" ? RunState::Stopped
                             : RunState::Failed,
           reason);
  addLog(st == "failed" ? "error" : "info",
         QStringLiteral("finished: %1%2")
             .arg(QString::fromStdString(st), reason.isEmpty() ? "" : " (" + reason + ")"),
         time);
}

// Rank 0's profiled windows (first and last step), for "open the timeline of this step".
void LiveRun::applyKernelSummary(const nlohmann::json& body) {
  const int64_t a = body.value("first_step", int64_t{-1});
  const int64_t b = body.value("last_step", a);
  if (a >= 0 && b >= a && body.value("rank", 0) == 0) profiled_.emplace_back(a, b);
}

core::MemoryReport predictionPerRank(const core::MemoryReport& measured,
                                     const core::MemoryReport& plan) {
  core::MemoryReport out;
  if (plan.ranks.empty()) return out;
  auto find = [&plan](int rank) -> const core::RankMemory* {
    for (const auto& r : plan.ranks)
      if (r.rank == rank) return &r;
    return nullptr;
  };
  const core::RankMemory* fallback = find(0);
  if (!fallback) fallback = &plan.ranks.front();
  out.ranks.reserve(measured.ranks.size());
  for (const auto& m : measured.ranks) {
    const core::RankMemory* p = find(m.rank);
    core::RankMemory r = p ? *p : *fallback;
    r.rank = m.rank;
    out.ranks.push_back(r);
  }
  return out;
}

void LiveRun::alignPrediction() {
  if (measured_ && predicted_)
    predictedPerRank_ = predictionPerRank(*measured_, *predicted_);
  else
    predictedPerRank_.reset();
}

void LiveRun::applyBatch(const std::vector<core::Event>& events) {
  for (const auto& e : events) apply(e);
}

void LiveRun::setSmoothing(double weight) {
  ema_.reset(weight);
  lossEma_.clear();
  // Recompute over the stored curve (full resolution unless the run outgrew the buffer).
  for (size_t i = 0; i < loss_.size(); ++i) lossEma_.append(loss_.x(i), ema_.push(loss_.mean(i)));
  dirty_ = true;
}

std::optional<double> LiveRun::etaSeconds() const {
  // A paused run has no pace: any time left would be a guess about when it resumes.
  if (state_ == RunState::Paused) return std::nullopt;
  if (totalSteps_ <= 0 || recentStepS_ <= 0 || lastStep_ <= 0) return std::nullopt;
  return std::max<double>(0.0, static_cast<double>(totalSteps_ - lastStep_) * recentStepS_);
}

std::optional<int64_t> LiveRun::profiledStepNear(int64_t step, int64_t slack) const {
  std::optional<int64_t> best;
  int64_t bestDist = slack + 1;
  for (const auto& [a, b] : profiled_) {
    const int64_t s = std::clamp(step, a, b);
    const int64_t d = s > step ? s - step : step - s;
    if (d < bestDist) {
      bestDist = d;
      best = s;
    }
  }
  return best;
}

double LiveRun::progress() const {
  if (totalSteps_ <= 0) return 0.0;
  return std::clamp(static_cast<double>(lastStep_) / static_cast<double>(totalSteps_), 0.0, 1.0);
}

size_t LiveRun::bytes() const {
  size_t b = loss_.bytes() + lossEma_.bytes() + evalLoss_.bytes() + lr_.bytes() + tps_.bytes() +
             lossScale_.bytes();
  for (const auto& m : memTime_) b += m.bytes();
  for (const auto& l : log_) b += sizeof(LogLine) + static_cast<size_t>(l.text.size()) * 2;
  return b;
}

}  // namespace ts::gui
