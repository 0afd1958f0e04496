#include "trainscope/profiler/ProfileSchedule.h"

#include <algorithm>
#include <iterator>
#include <unordered_map>

#include "trainscope/profiler/DeviceCollector.h"

namespace ts::profiler {

const char* toString(ProfileAction a) {
  switch (a) {
    case ProfileAction::None:
      return "none";
    case ProfileAction::Warmup:
      return "warmup";
    case ProfileAction::Record:
      return "record";
    case ProfileAction::RecordAndSave:
      return "record_and_save";
  }
  return "none";
}

ProfileSchedule::ProfileSchedule(int wait, int warmup, int active, int repeat)
    : wait_(std::max(0, wait)),
      warmup_(std::max(0, warmup)),
      active_(std::max(0, active)),
      repeat_(std::max(0, repeat)) {}

ProfileAction ProfileSchedule::action(int64_t step) const {
  if (active_ <= 0 || step < 0) return ProfileAction::None;
  const int64_t cycle = static_cast<int64_t>(wait_) + warmup_ + active_;
  if (repeat_ > 0 && step >= cycle * repeat_) return ProfileAction::None;
  const int64_t pos = step % cycle;
  if (pos < wait_) return ProfileAction::None;
  if (pos < wait_ + warmup_) return ProfileAction::Warmup;
  return pos == cycle - 1 ? ProfileAction::RecordAndSave : ProfileAction::Record;
}

bool ProfileSchedule::records(int64_t step) const {
  auto a = action(step);
  return a == ProfileAction::Record || a == ProfileAction::RecordAndSave;
}

ProfileController::ProfileController(ProfileSchedule schedule, Tracer* tracer)
    : schedule_(schedule), tracer_(tracer ? tracer : &Tracer::instance()) {}

ProfileController::~ProfileController() {
  if (windowOpen_ || stepRecording_) tracer_->setEnabled(false);
  if (device_ && deviceRunning_) device_->stop();
}

void ProfileController::setDeviceCollector(DeviceCollector* collector) {
  device_ = collector;
}

void ProfileController::requestSteps(int n) {
  if (n <= 0) return;
  int cur = pending_.load(std::memory_order_relaxed);
  while (cur < n && !pending_.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
  }
}

std::vector<std::string> ProfileController::takeWarnings() {
  std::vector<std::string> out;
  out.swap(warnings_);
  return out;
}

void ProfileController::startDevice() {
  if (!device_ || deviceRunning_) return;
  std::string why;
  if (device_->start(&why)) {
    deviceRunning_ = true;
    return;
  }
  warnings_.push_back(device_->name() + " unavailable, profiling host ranges only: " + why);
  device_ = nullptr;  // don't retry every window
}

ProfileAction ProfileController::beginStep(int64_t step) {
  if (int n = pending_.exchange(0, std::memory_order_relaxed); n > 0)
    demandLeft_ = std::max(demandLeft_, n);
  const ProfileAction scheduled = schedule_.action(step);
  const bool record = schedule_.records(step) || demandLeft_ > 0;
  tracer_->setStep(step);
  if (record) {
    if (!windowOpen_) {
      startDevice();
      if (device_ && deviceRunning_) {
        device_->flush();  // drop warmup activity
        droppedAtOpen_ = device_->droppedRecords();
      }
      tracer_->clear();  // drop warmup (and stale) spans
      windowOpen_ = true;
      windowOnDemand_ = !schedule_.records(step);
      windowFirst_ = step;
      windowStepNs_ = 0;
    }
    tracer_->setEnabled(true);
    stepRecording_ = true;
    stepStartNs_ = tracer_->nowNs();
    if (scheduled == ProfileAction::RecordAndSave) return scheduled;
    return ProfileAction::Record;
  }
  stepRecording_ = false;
  if (scheduled == ProfileAction::Warmup) {
    startDevice();
    tracer_->setEnabled(true);
    return ProfileAction::Warmup;
  }
  tracer_->setEnabled(false);
  return ProfileAction::None;
}

std::optional<ProfileWindow> ProfileController::endStep(int64_t step) {
  if (!windowOpen_ || !stepRecording_) return std::nullopt;
  windowStepNs_ += tracer_->nowNs() - stepStartNs_;
  stepRecording_ = false;
  if (demandLeft_ > 0) --demandLeft_;
  const ProfileAction scheduled = schedule_.action(step);
  // A scheduled window ends on its last active step; an on-demand one when its steps are used
  // up and the schedule doesn't carry on recording.
  const bool close = scheduled == ProfileAction::RecordAndSave ||
                     (scheduled != ProfileAction::Record && demandLeft_ == 0);
  if (!close) return std::nullopt;

  tracer_->setEnabled(false);
  ProfileWindow w;
  w.index = nextWindow_++;
  w.firstStep = windowFirst_;
  w.lastStep = step;
  w.onDemand = windowOnDemand_;
  w.stepTimeNs = windowStepNs_;
  w.spans = tracer_->drain();
  if (device_ && deviceRunning_) {
    std::vector<Span> dev = device_->flush();
    w.droppedDeviceRecords = device_->droppedRecords() - droppedAtOpen_;
    const int rank = tracer_->rank();
    // A device record takes the step of the host range that launched it.
    std::unordered_map<uint64_t, int64_t> stepOf;
    for (const Span& s : w.spans) stepOf.emplace(s.correlation, s.step);
    for (Span& s : dev) {
      s.rank = rank;
      if (s.step < 0) {
        auto it = stepOf.find(s.correlation);
        s.step = it != stepOf.end() ? it->second : step;
      }
    }
    std::stable_sort(dev.begin(), dev.end(),
                     [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    std::vector<Span> merged;
    merged.reserve(w.spans.size() + dev.size());
    std::merge(std::make_move_iterator(w.spans.begin()), std::make_move_iterator(w.spans.end()),
               std::make_move_iterator(dev.begin()), std::make_move_iterator(dev.end()),
               std::back_inserter(merged),
               [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    w.spans = std::move(merged);
    device_->stop();
    deviceRunning_ = false;
  }
  windowOpen_ = false;
  return w;
}

}  // namespace ts::profiler
