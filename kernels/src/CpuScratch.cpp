#include "trainscope/kernels/CpuScratch.h"

#include <algorithm>
#include <atomic>

namespace ts::kernels::cpu {

namespace {
thread_local const ScratchRegion* current = nullptr;
std::atomic<int64_t> regionLeases{0}, unboundLeases{0}, shortfalls{0}, shortfallFloats{0};
}  // namespace

ScratchScope::ScratchScope(const ScratchRegion* r) : previous_(current) { current = r; }
ScratchScope::~ScratchScope() { current = previous_; }

ScratchLease::ScratchLease(int64_t floats, int slices) {
  floats = std::max<int64_t>(floats, 0);
  slices = std::max(slices, 1);
  const ScratchRegion* r = current && current->base ? current : nullptr;
  // One slice may use the whole region; several need a region slice each.
  const bool fits = r && (slices == 1 ? floats <= r->perThread * r->threads
                                      : slices <= r->threads && floats <= r->perThread);
  if (fits) {
    base_ = r->base;
    stride_ = r->perThread;
    regionLeases.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (r) {
    shortfalls.fetch_add(1, std::memory_order_relaxed);
    int64_t seen = shortfallFloats.load(std::memory_order_relaxed);
    const int64_t want = floats * slices;
    while (want > seen && !shortfallFloats.compare_exchange_weak(seen, want)) {
    }
  } else {
    unboundLeases.fetch_add(1, std::memory_order_relaxed);
  }
  heap_.resize(size_t(std::max<int64_t>(1, floats * slices)));
  base_ = heap_.data();
  stride_ = floats;
}

ScratchStats scratchStats() {
  ScratchStats s;
  s.regionLeases = regionLeases.load();
  s.unboundLeases = unboundLeases.load();
  s.shortfalls = shortfalls.load();
  s.shortfallFloats = shortfallFloats.load();
  return s;
}

}  // namespace ts::kernels::cpu
