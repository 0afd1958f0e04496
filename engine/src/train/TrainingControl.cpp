// Control commands (stop, pause, resume, checkpoint, profile) from the stdin reader, and how
// the ranks agree on them at a step boundary.
#include "TrainingSession.h"

namespace ts::engine {

void TrainingSession::drainCommands() {
  for (const auto& c : takeCommands_()) {
    switch (c.type) {
      case core::CommandType::Stop:
        stopRequested_ = true;
        break;
      case core::CommandType::Pause:
        // `state` lets a follower of the database (the app reopened) show the true state.
        if (!paused_)
          emit(core::EventType::Log,
               {{"message", "paused at step " + std::to_string(step_)}, {"state", "paused"}});
        paused_ = true;
        break;
      case core::CommandType::Resume:
        if (paused_)
          emit(core::EventType::Log,
               {{"message", "resumed at step " + std::to_string(step_)}, {"state", "running"}});
        paused_ = false;
        break;
      case core::CommandType::Checkpoint:
        ckptRequested_ = true;
        break;
      case core::CommandType::Profile:
        profileAsk_ = c.steps > 0                  ? c.steps
                      : config_.profile.active > 0 ? config_.profile.active
                                                   : 3;
        log("profiling the next " + std::to_string(c.steps > 0 ? c.steps : 3) + " steps");
        break;
      default:
        warn("unknown command ignored: " + c.raw);
    }
  }
}

bool TrainingSession::interrupted() const {
  return options_.interrupt && options_.interrupt->load();
}

// Several ranks stop on the agreed flag only (a signal seen by one rank alone waits a step).
bool TrainingSession::stopNow() const {
  return stopRequested_ || (ranks_ == 1 && interrupted());
}

// Commands reach rank 0 only (mpirun forwards stdin there) and signals may reach ranks at
// different steps: every decision that starts or skips collectives (stop, pause, an extra
// checkpoint, a profiled window) is agreed on by all ranks at the step boundary.
void TrainingSession::syncControl() {
  if (ranks_ > 1) {
    const bool stop = stopRequested_ || interrupted();
    stopRequested_ = comm_->allReduceMax(stop ? 1.0 : 0.0) > 0;
    // Rank 0's word (the others offer -1): it alone reads the commands.
    auto fromRoot = [&](double v) { return comm_->allReduceMax(rank_ == 0 ? v : -1.0); };
    paused_ = fromRoot(paused_ ? 1.0 : 0.0) > 0;
    ckptRequested_ = fromRoot(ckptRequested_ ? 1.0 : 0.0) > 0;
    profileAsk_ = static_cast<int>(fromRoot(static_cast<double>(profileAsk_)));
  }
  if (profileAsk_ > 0) profile_->requestSteps(profileAsk_);
  profileAsk_ = 0;
}

}  // namespace ts::engine
