#include "trainscope/engine/params/MemoryTracker.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace ts::engine {

void MemoryTracker::add(core::MemoryTier tier, core::MemoryCategory category, int64_t bytes) {
  if (parent_) parent_->add(tier, category, bytes);
  std::lock_guard lock(mutex_);
  auto& e = table_.at(tier, category);
  e.current += bytes;
  if (e.current > e.peak) e.peak = e.current;
  totalCurrent_ += bytes;
  if (totalCurrent_ > totalPeak_) totalPeak_ = totalCurrent_;
}

void MemoryTracker::remove(core::MemoryTier tier, core::MemoryCategory category, int64_t bytes) {
  if (parent_) parent_->remove(tier, category, bytes);
  std::lock_guard lock(mutex_);
  table_.at(tier, category).current -= bytes;
  totalCurrent_ -= bytes;
}

int64_t MemoryTracker::current(core::MemoryTier tier, core::MemoryCategory category) const {
  std::lock_guard lock(mutex_);
  return table_.at(tier, category).current;
}

int64_t MemoryTracker::peak(core::MemoryTier tier, core::MemoryCategory category) const {
  std::lock_guard lock(mutex_);
  return table_.at(tier, category).peak;
}

int64_t MemoryTracker::totalCurrent() const {
  std::lock_guard lock(mutex_);
  return totalCurrent_;
}

int64_t MemoryTracker::totalPeak() const {
  std::lock_guard lock(mutex_);
  return totalPeak_;
}

void MemoryTracker::resetPeaks() {
  std::lock_guard lock(mutex_);
  for (auto& tier : table_.tiers)
    for (auto& e : tier) e.peak = e.current;
  totalPeak_ = totalCurrent_;
}

core::MemoryReport MemoryTracker::report() const {
  std::lock_guard lock(mutex_);
  core::MemoryReport r;
  r.ranks.push_back(table_);
  r.ranks.back().rank = rank_;
  return r;
}

namespace {
int64_t statusField(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string k(key);
  while (std::getline(in, line)) {
    if (line.compare(0, k.size(), k) == 0) {
      long long kb = 0;
      if (std::sscanf(line.c_str() + k.size(), " %lld", &kb) == 1) return kb * 1024;
    }
  }
  return 0;
}
}  // namespace

int64_t processRssBytes() {
  return statusField("VmRSS:");
}
int64_t processPeakRssBytes() {
  return statusField("VmHWM:");
}

}  // namespace ts::engine
