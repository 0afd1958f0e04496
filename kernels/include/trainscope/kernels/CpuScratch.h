// Working space for CPU kernels from one region the engine allocates as tracked workspace
// (core::savedState's "kernelScratch", sized by ScratchSizes.h), so the memory tracker counts
// what the kernels use and the estimator predicts it. The CPU backend binds the region around
// every op; a kernel leases its slices from it. Kernels called without a region (unit tests,
// calibration, benchmarks) lease from the heap; a bound region too small for a lease is a
// sizing bug, counted in scratchStats() so tests can insist it never happens.
#pragma once

#include <cstdint>
#include <vector>

#include "trainscope/kernels/ScratchSizes.h"

namespace ts::kernels::cpu {

// `threads` slices of `perThread` floats each, contiguous.
struct ScratchRegion {
  float* base = nullptr;
  int64_t perThread = 0;
  int threads = 0;
};

// Makes `r` the calling thread's region until the scope ends (nullptr: none).
class ScratchScope {
 public:
  explicit ScratchScope(const ScratchRegion* r);
  ~ScratchScope();
  ScratchScope(const ScratchScope&) = delete;
  ScratchScope& operator=(const ScratchScope&) = delete;

 private:
  const ScratchRegion* previous_;
};

// `slices` slices of `floats` each for one kernel call, taken on the calling thread before its
// parallel region; slice(i) belongs to thread i. One slice may span the whole region. The
// contents are undefined (zero them if the kernel accumulates).
class ScratchLease {
 public:
  ScratchLease(int64_t floats, int slices);
  float* slice(int i) const { return base_ + int64_t(i) * stride_; }
  bool fromRegion() const { return heap_.empty(); }

 private:
  std::vector<float> heap_;
  float* base_ = nullptr;
  int64_t stride_ = 0;
};

struct ScratchStats {
  int64_t regionLeases = 0;  // served by a bound region
  int64_t unboundLeases = 0;  // no region bound: from the heap
  int64_t shortfalls = 0;     // a bound region was too small: from the heap (a sizing bug)
  int64_t shortfallFloats = 0;  // the largest lease a region could not serve
};
ScratchStats scratchStats();  // process-wide, since start

}  // namespace ts::kernels::cpu
