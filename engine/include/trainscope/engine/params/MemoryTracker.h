#pragma once
// One tracker per rank: every engine allocation is tagged with a tier and a category and counted
// here (current and peak per category, and the overall peak). It produces the same table the
// estimator predicts (core::MemoryReport), so prediction and measurement can be compared.
#include <array>
#include <cstdint>
#include <mutex>

#include "trainscope/core/plan/MemoryTable.h"

namespace ts::engine {

class MemoryTracker {
 public:
  explicit MemoryTracker(int rank = 0) : rank_(rank) {}
  int rank() const { return rank_; }

  void add(core::MemoryTier tier, core::MemoryCategory category, int64_t bytes);
  void remove(core::MemoryTier tier, core::MemoryCategory category, int64_t bytes);

  int64_t current(core::MemoryTier tier, core::MemoryCategory category) const;
  int64_t peak(core::MemoryTier tier, core::MemoryCategory category) const;
  // Sum over every tier and category, and the highest that sum has been.
  int64_t totalCurrent() const;
  int64_t totalPeak() const;
  // Peaks restart from the current values (e.g. to measure one phase).
  void resetPeaks();

  core::MemoryReport report() const;

  // Every add and remove also goes to `parent` (a part of the model tracked on its own as well:
  // the distillation teacher's share of the run's memory).
  void setParent(MemoryTracker* parent) { parent_ = parent; }

 private:
  int rank_;
  MemoryTracker* parent_ = nullptr;
  mutable std::mutex mutex_;
  core::RankMemory table_{};
  int64_t totalCurrent_ = 0;
  int64_t totalPeak_ = 0;
};

// Bytes a buffer holds resident only part of the time (pages given back and taken again), kept
// in a tracker's device category for as long as this lives; moving transfers them.
class TrackedBytes {
 public:
  TrackedBytes() = default;
  TrackedBytes(MemoryTracker* tracker, core::MemoryCategory category)
      : tracker_(tracker), category_(category) {}
  TrackedBytes(TrackedBytes&& o) noexcept
      : tracker_(o.tracker_), category_(o.category_), bytes_(o.bytes_) {
    o.bytes_ = 0;
  }
  TrackedBytes& operator=(TrackedBytes&& o) noexcept {
    if (this != &o) {
      set(0);
      tracker_ = o.tracker_;
      category_ = o.category_;
      bytes_ = o.bytes_;
      o.bytes_ = 0;
    }
    return *this;
  }
  ~TrackedBytes() { set(0); }
  void add(int64_t bytes) { set(bytes_ + bytes); }
  void set(int64_t bytes) {
    if (tracker_ && bytes > bytes_)
      tracker_->add(core::MemoryTier::Device, category_, bytes - bytes_);
    if (tracker_ && bytes < bytes_)
      tracker_->remove(core::MemoryTier::Device, category_, bytes_ - bytes);
    bytes_ = bytes;
  }
  int64_t bytes() const { return bytes_; }

 private:
  MemoryTracker* tracker_ = nullptr;
  core::MemoryCategory category_ = core::MemoryCategory::Workspace;
  int64_t bytes_ = 0;
};

// Resident set size of this process in bytes (from /proc/self/statm), 0 if unavailable; the
// cross-check of the tracker against what the OS sees.
int64_t processRssBytes();
int64_t processPeakRssBytes();

}  // namespace ts::engine
