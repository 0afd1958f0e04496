#pragma once
// When to record, like torch.profiler.schedule: per cycle `wait` idle steps, `warmup` steps
// traced but discarded (absorbs tracer/CUPTI start-up cost), `active` recorded steps; the cycle
// runs `repeat` times (0 = forever). Plus an on-demand trigger: "capture the next N steps now"
// (the engine's `profile` stdin command).
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/profiler/Tracer.h"

namespace ts::profiler {

class DeviceCollector;

enum class ProfileAction { None, Warmup, Record, RecordAndSave };
const char* toString(ProfileAction a);  // "none", "warmup", "record", "record_and_save"

class ProfileSchedule {
 public:
  ProfileSchedule() = default;  // never records
  // Negative counts are treated as 0; active == 0 never records.
  ProfileSchedule(int wait, int warmup, int active, int repeat);
  // Pure: the action for training step `step` (0-based). RecordAndSave is the last recorded
  // step of a window (the window closes at its end).
  ProfileAction action(int64_t step) const;
  bool records(int64_t step) const;
  int wait() const { return wait_; }
  int warmup() const { return warmup_; }
  int active() const { return active_; }
  int repeat() const { return repeat_; }

 private:
  int wait_ = 0, warmup_ = 0, active_ = 0, repeat_ = 0;
};

// One closed recording window: every span recorded in its steps (host, plus device spans when
// a collector ran), ordered by start.
struct ProfileWindow {
  int index = 0;  // 0, 1, ... per controller
  int64_t firstStep = 0;
  int64_t lastStep = 0;
  bool onDemand = false;             // opened by requestSteps()
  int64_t stepTimeNs = 0;            // wall time of the recorded steps (beginStep..endStep), summed
  int64_t droppedDeviceRecords = 0;  // during this window
  std::vector<Span> spans;
};

// Drives the Tracer (and optionally a DeviceCollector) from the schedule, step by step:
//   for step: c.beginStep(step); ...train...; if (auto w = c.endStep(step)) emit(*w);
class ProfileController {
 public:
  explicit ProfileController(ProfileSchedule schedule = {}, Tracer* tracer = nullptr);
  ~ProfileController();
  ProfileController(const ProfileController&) = delete;
  ProfileController& operator=(const ProfileController&) = delete;

  // Device activity joins the host ranges while recording; a collector that fails to start is
  // dropped and its reason is returned by takeWarnings(). Not owned.
  void setDeviceCollector(DeviceCollector* collector);
  // Thread-safe (called from the stdin reader): record the next n steps, starting with the
  // next beginStep(). A request while one is running extends it to max(left, n).
  void requestSteps(int n);

  ProfileAction beginStep(int64_t step);
  // Returns the window when `step` closes one; the tracer is off afterwards until the next
  // warmup/recorded step.
  std::optional<ProfileWindow> endStep(int64_t step);
  bool recording() const { return windowOpen_; }
  std::vector<std::string> takeWarnings();

 private:
  void startDevice();
  ProfileSchedule schedule_;
  Tracer* tracer_;
  DeviceCollector* device_ = nullptr;
  bool deviceRunning_ = false;
  std::atomic<int> pending_{0};
  int demandLeft_ = 0;
  bool windowOpen_ = false;
  bool stepRecording_ = false;
  bool windowOnDemand_ = false;
  int64_t windowFirst_ = 0;
  int64_t windowStepNs_ = 0;
  int64_t stepStartNs_ = 0;
  int64_t droppedAtOpen_ = 0;
  int nextWindow_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace ts::profiler
