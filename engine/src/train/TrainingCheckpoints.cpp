// A run's checkpoints: resuming from one (weights, optimizer, data position, loss scaler, fp8
// scales, checked against the fine-tuning base) and writing one (ZeRO: gathered on rank 0).
#include <cmath>

#include "TrainingSession.h"
#include "trainscope/engine/io/Checkpoint.h"

namespace ts::engine {
namespace {

// A ZeRO optimizer's state gathered on rank 0, as the checkpoint writer reads an optimizer.
class GatheredOptimizer final : public Optimizer {
 public:
  GatheredOptimizer(Optimizer& of, std::vector<std::pair<std::string, Tensor>>& state)
      : of_(of), state_(state) {}
  void step(float) override { throw std::logic_error("a gathered optimizer state only saves"); }
  int64_t stepCount() const override { return of_.stepCount(); }
  void setStepCount(int64_t) override {}
  std::vector<std::pair<std::string, Tensor*>> state() override {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (auto& [n, t] : state_) out.emplace_back(n, &t);
    return out;
  }
  std::string name() const override { return of_.name(); }

 private:
  Optimizer& of_;
  std::vector<std::pair<std::string, Tensor>>& state_;
};

}  // namespace

void TrainingSession::resume() {
  if (options_.resumePath.empty()) return;
  try {
    auto loaded = loadCheckpoint(options_.resumePath, model_->arena(), opt_.get(),
                                 dp_ ? dp_->optimizerShard() : OptimizerShard{});
    const nlohmann::json& extra = loaded.state.extra;
    if (extra.contains("base_checkpoint")) {
      const auto& b = extra["base_checkpoint"];
      if (b.value("checksum", "") != baseChecksum_)
        throw CheckpointError(
            "the checkpoint's adapters were trained on the base " + b.value("path", "?") +
            " (checksum " + b.value("checksum", "?") + "), but finetune.base_checkpoint is " +
            (config_.finetune.base_checkpoint.empty()
                 ? std::string("not set")
                 : config_.finetune.base_checkpoint + " (checksum " + baseChecksum_ + ")"));
    }
    data_->restore(loaded.state.data);
    step_ = loaded.state.step;
    tokens_ = loaded.state.tokens;
    if (extra.contains("best_val_loss") && extra["best_val_loss"].is_number())
      bestVal_ = extra["best_val_loss"].get<double>();
    if (scaler_ && extra.contains("loss_scaler")) scaler_->loadState(extra["loss_scaler"]);
    result_.lastCheckpoint = loaded.path;
    // 16-bit working copy from the loaded (16-bit representable) weights.
    if (model_->mixed()) model_->roundWeights();
    // The fp8 weights at the saved scales (ZeRO-3: per block, at each gather).
    if (model_->fp8()) {
      if (extra.contains("fp8"))
        model_->loadFp8State(extra["fp8"]);
      else
        warn("checkpoint " + loaded.path +
             " has no fp8 scaling state (written before it was saved): the amax histories "
             "start empty");
    }
    if (dp_) dp_->reshard();  // ZeRO-3 parameter offload: the loaded shard goes to its tier
    log("resumed from " + loaded.path + " at step " + std::to_string(step_));
  } catch (const std::exception& e) {
    throw SetupFailure{"resume: " + std::string(e.what()), true};
  }
}

bool TrainingSession::saveCheckpoint(const char* why) {
  TrainingState st;
  st.step = step_;
  st.tokens = tokens_;
  st.data = data_->state();
  st.attachments = data_->tokenizerFiles();
  st.extra = {
      {"best_val_loss", std::isfinite(bestVal_) ? nlohmann::json(bestVal_) : nlohmann::json()},
      {"reason", why}};
  if (scaler_) st.extra["loss_scaler"] = scaler_->state();
  if (model_->fp8()) st.extra["fp8"] = model_->fp8State();
  // An adapter checkpoint is only meaningful on its base: say which one.
  if (!baseChecksum_.empty())
    st.extra["base_checkpoint"] = {{"path", config_.finetune.base_checkpoint},
                                   {"checksum", baseChecksum_}};
  // ZeRO: the shards come together on rank 0, which writes one checkpoint in this run's layout
  // (recorded, so any number of ranks can resume it); the other ranks write nothing.
  std::vector<std::pair<std::string, Tensor>> gathered;
  if (dp_ && dp_->stage() >= 1) {
    try {
      gathered = dp_->gatherOptimizerState(*opt_, 0);
      dp_->gatherAll();
    } catch (const std::exception& e) {
      warn(std::string("checkpoint at step ") + std::to_string(step_) + " failed: " + e.what());
      return false;
    }
    const ParamArena& pa = model_->arena();
    st.extra["zero_layout"] = {{"ranks", ranks_},
                               {"stage", dp_->stage()},
                               {"align", pa.options().align},
                               {"pad_to", pa.options().padTo},
                               {"tensor_align", pa.options().tensorAlign}};
  }
  struct Release {
    DataParallel* dp;
    ~Release() {
      if (dp && dp->stage() >= 1) dp->releaseAll();
    }
  } release{dp_.get()};
  if (rank_ != 0) return true;
  try {
    GatheredOptimizer full(*opt_, gathered);
    Optimizer& writeOpt = gathered.empty() ? *opt_ : static_cast<Optimizer&>(full);
    auto info = engine::saveCheckpoint(ckptDir_, model_->arena(), writeOpt, configJson_, st);
    pruneCheckpoints(ckptDir_, std::max(1, options_.keepCheckpoints));
    result_.lastCheckpoint = info.path;
    emit(core::EventType::Checkpoint, {{"path", info.path},
                                       {"step", info.step},
                                       {"checksum", info.checksum},
                                       {"bytes", info.bytes},
                                       {"reason", why}});
    return true;
  } catch (const std::exception& e) {
    warn(std::string("checkpoint at step ") + std::to_string(step_) +
         " failed, previous checkpoint kept" +
         (result_.lastCheckpoint.empty() ? "" : " (" + result_.lastCheckpoint + ")") + ": " +
         e.what());
    return false;
  }
}

}  // namespace ts::engine
