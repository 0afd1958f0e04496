// The step loop: control at each boundary, then a step (the batch, forward and backward over
// the micro-batches, the gradients' rounding, scaling and clipping, the optimizer), its event,
// evaluation and periodic checkpoints.
#include <chrono>
#include <cmath>
#include <thread>

#include "TrainingSession.h"
#include "trainscope/core/config/Schedule.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {
namespace {

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void TrainingSession::loop() {
  profile_.emplace(config_.profile.enabled
                       ? profiler::ProfileSchedule(config_.profile.wait, config_.profile.warmup,
                                                   config_.profile.active, config_.profile.repeat)
                       : profiler::ProfileSchedule());
  perMicro_ = static_cast<int64_t>(B_) * T_;
  inputs_.assign(static_cast<size_t>(perMicro_ * accum_), 0);
  targets_.assign(inputs_.size(), 0);
  firstStep_ = step_;

  while (step_ < config_.train.steps) {
    drainCommands();
    syncControl();
    while (paused_ && !stopNow()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      drainCommands();
      syncControl();
      // "Checkpoint now" on a paused run writes it now, not after the resume.
      if (ckptRequested_) {
        saveCheckpoint("requested");
        ckptRequested_ = false;
      }
    }
    if (stopNow()) break;

    profile_->beginStep(step_);
    profiler::Tracer::instance().setStep(step_);
    const auto t0 = Clock::now();
    const float lossScale = scaler_ ? scaler_->scale() : 1.f;
    double difficulty = 1.0;
    MicroBatchSums sums;
    {
      profiler::ScopedRange sr("step", profiler::SpanCategory::Step);
      difficulty = readBatch();
      sums = forwardBackward(lossScale);
    }
    if (ranks_ > 1) {  // the global batch's loss
      sums.lossSum = comm_->allReduceSum(sums.lossSum);
      sums.count = static_cast<int64_t>(comm_->allReduceSum(static_cast<double>(sums.count)));
      sums.distill.ce = comm_->allReduceSum(sums.distill.ce);
      sums.distill.kl = comm_->allReduceSum(sums.distill.kl);
    }
    const double loss = sums.count > 0 ? sums.lossSum / static_cast<double>(sums.count) : 0.0;
    if (!std::isfinite(loss)) {
      failOnNonFiniteLoss(loss);
      break;
    }
    const Update update = applyGradients(lossScale);
    const double stepMs = msSince(t0);
    ++step_;
    tokens_ += perMicro_ * accum_ * ranks_;
    tokensHere_ += perMicro_ * accum_ * ranks_;
    sumStepMs_ += stepMs;
    result_.finalLoss = loss;
    stepEvent(sums, loss, update, stepMs, lossScale, difficulty);
    afterStep();
  }
}

// This step's rows of every micro-batch, at the curriculum's difficulty (returned).
double TrainingSession::readBatch() {
  profiler::ScopedRange r("data", profiler::SpanCategory::Data);
  const double difficulty = core::curriculumFraction(config_, step_);
  data_->setDifficulty(difficulty);
  if (ranks_ == 1) {
    for (int a = 0; a < accum_; ++a)
      data_->nextTrainBatch(inputs_.data() + a * perMicro_, targets_.data() + a * perMicro_, B_,
                            T_);
  } else {
    // The global micro-batch is ranks * B rows (what one rank with micro_batch ranks * B would
    // see); this rank reads rows [rank * B, (rank + 1) * B) of it.
    for (int a = 0; a < accum_; ++a)
      data_->nextTrainRows(inputs_.data() + a * perMicro_, targets_.data() + a * perMicro_,
                           B_ * ranks_, T_, rank_ * B_, B_);
  }
  return difficulty;
}

TrainingSession::MicroBatchSums TrainingSession::forwardBackward(float lossScale) {
  MicroBatchSums sums;
  int64_t total = 0;
  for (int32_t t : targets_) total += t >= 0 ? 1 : 0;
  // The loss is normalized by the global batch's target tokens.
  if (ranks_ > 1) total = static_cast<int64_t>(comm_->allReduceSum(static_cast<double>(total)));
  // Gradient accumulation: every token loss is divided by the total number of target tokens of
  // the whole step, not by each micro-batch's own count.
  // fp16: the loss (hence every gradient) is multiplied by the loss scale before backward.
  const float dloss = total > 0 ? lossScale / static_cast<float>(total) : 0.f;
  if (dp_) {
    dp_->beginStep();
    dp_->zeroGrad();
  } else {
    model_->zeroGrad();
  }
  const auto& dc = config_.distill;
  for (int a = 0; a < accum_; ++a) {
    int64_t c = 0;
    if (dp_) dp_->beginMicroBatch(a == accum_ - 1);
    // Dropout masks keyed by the global micro-step: a resumed run draws the same ones.
    model_->setDropoutKey(static_cast<uint64_t>(step_) * accum_ + a);
    const int32_t* in = inputs_.data() + a * perMicro_;
    const int32_t* tg = targets_.data() + a * perMicro_;
    if (teacher_) {
      teacher_->forward(in, nullptr, B_, T_, 0.f);
      model_->forward(in, nullptr, B_, T_, 0.f);
      // The per-row KL goes to the teacher's loss buffer (unused by its forward).
      const auto s = distillLoss_->forwardBackward(
          model_->logits(), teacher_->logits(), model_->targetsBuffer(), model_->lossesBuffer(),
          teacher_->lossesBuffer(), tg, B_ * T_, vocab_, dloss);
      model_->lossGradientWritten();
      sums.lossSum += s.objective(dc.temperature, dc.alpha);
      sums.distill.ce += s.ce;
      sums.distill.kl += s.kl;
      c = s.count;
    } else {
      sums.lossSum += model_->forward(in, tg, B_, T_, dloss, &c);
    }
    // fp8: every rank keeps the amax histories of the whole batch.
    auto maxOverRanks = [&](std::vector<double>& v) { comm_->allReduceMax(v); };
    if (ranks_ > 1 && model_->fp8()) model_->reduceFp8Amaxes(false, maxOverRanks);
    sums.count += c;
    compStats_ = model_->compressionStats();
    if (dp_) dp_->beginBackward();
    model_->backward();
    if (ranks_ > 1 && model_->fp8()) model_->reduceFp8Amaxes(true, maxOverRanks);
    if (dp_) dp_->endMicroBatch();
  }
  return sums;
}

void TrainingSession::failOnNonFiniteLoss(double loss) {
  profile_->endStep(step_);
  failed_ = true;
  const std::string where = result_.lastCheckpoint.empty()
                                ? "no checkpoint was written before it"
                                : "last good checkpoint kept: " + result_.lastCheckpoint;
  emit(core::EventType::Error,
       {{"message", "loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") + " at step " +
                        std::to_string(step_ + 1) + "; training stopped (" + where +
                        "). Lower optimizer.lr or enable train.grad_clip."},
        {"step", step_ + 1},
        {"fatal", true}});
  result_.reason = "loss became non-finite at step " + std::to_string(step_ + 1);
}

// 16-bit gradients; fp16: unscale in fp32, skip the step on inf/NaN (GradScaler). Then the
// clipped optimizer step at this step's learning rate.
TrainingSession::Update TrainingSession::applyGradients(float lossScale) {
  dp_ ? dp_->roundGrads() : model_->roundGrads();
  Update u;
  if (scaler_) {
    ParamArena& pa = model_->arena();
    if (dp_) {
      dp_->scaleGrads(1.f / lossScale);
      u.skipped = !scaler_->update(dp_->countNonFinite() > 0);
    } else {
      pa.scaleGrads(1.f / lossScale);
      u.skipped = !scaler_->update(pa.gradNonFinite() > 0);
    }
  }
  // The norm is not computed for a skipped step (its gradients hold inf/NaN).
  u.lr = core::learningRate(config_, step_);
  if (!u.skipped) {
    if (dp_) {
      u.gradNorm = dp_->clipGradNorm(config_.train.grad_clip);
      dp_->optimizerStep(*opt_, static_cast<float>(u.lr));
    } else {
      u.gradNorm = clipGradNorm(model_->arena(), backend_, config_.train.grad_clip);
      opt_->step(static_cast<float>(u.lr));
    }
  }
  if (dp_) dp_->endStep();
  return u;
}

void TrainingSession::stepEvent(const MicroBatchSums& sums, double loss, const Update& update,
                                double stepMs, float lossScale, double difficulty) {
  core::StepEvent se;
  se.step = step_;
  se.loss = loss;
  se.lr = update.lr;
  se.grad_norm = update.gradNorm;
  se.tokens = tokens_;
  se.step_ms = stepMs;
  se.tokens_per_s = stepMs > 0 ? perMicro_ * accum_ * ranks_ / (stepMs / 1000.0) : 0;
  se.loss_scale = lossScale;  // the scale this step's backward used
  se.skipped = update.skipped;
  nlohmann::json sf = core::toJson(se);
  sf["total_steps"] = config_.train.steps;
  sf["target_tokens"] = sums.count;
  if (ranks_ > 1) {
    sf["ranks"] = ranks_;
    sf["comm_bytes"] = comm_->takeBytesSent();  // this rank's, as a ring sends them
  }
  nlohmann::json optStats = opt_->takeStepStats();
  if (dp_) optStats.update(dp_->takeStepStats());
  for (auto it = optStats.begin(); it != optStats.end(); ++it) sf[it.key()] = it.value();
  // Curriculum: the fraction of the data's difficulty (or length) range this batch drew from.
  if (config_.curriculum.type != "none") sf["difficulty"] = difficulty;
  if (teacher_ && sums.count > 0) {  // both terms, per token: alpha T^2 kl + (1 - alpha) ce
    sf["distill_ce"] = sums.distill.ce / double(sums.count);
    sf["distill_kl"] = sums.distill.kl / double(sums.count);
  }
  emit(core::EventType::Step, sf);
}

// After a step's event: its profiled window, the first memory event, evaluation, commands and
// a periodic or requested checkpoint.
void TrainingSession::afterStep() {
  if (auto w = profile_->endStep(step_ - 1)) emitWindow(*w);
  for (auto& w : profile_->takeWarnings()) warn(w);

  if (step_ == firstStep_ + 1) memoryEvent();
  const bool last = step_ >= config_.train.steps;
  if ((config_.train.eval_every > 0 && step_ % config_.train.eval_every == 0) || last) evaluate();
  drainCommands();
  syncControl();
  if (!last &&
      ((config_.train.checkpoint_every > 0 && step_ % config_.train.checkpoint_every == 0) ||
       ckptRequested_)) {
    saveCheckpoint(ckptRequested_ ? "requested" : "periodic");
    ckptRequested_ = false;
  }
}

}  // namespace ts::engine
