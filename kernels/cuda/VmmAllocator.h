#pragma once
// Device memory whose pages can go back while the addresses stay valid: Backend::discard and
// Backend::commit on CUDA (ZeRO's sharded buffers, the 16-bit policies' fp32 windows). A GPU
// cannot fault pages in, so an allocation of at least one granule (cuMemGetAllocationGranularity,
// 2 MiB on current GPUs) reserves its address range and maps physical memory one granule at a
// time (cuMemCreate / cuMemMap): discard() unmaps the whole granules inside a range, commit()
// maps zeroed ones again. Smaller allocations come from cudaMalloc (they hold no whole granule;
// discard zeroes them). Unmapping waits for the work queued before it: a discarded granule is
// released once an event recorded after the discard has completed (checked on the next call,
// or at once when memory runs short), so discarding never synchronizes the device.
// Driver entry points come through cudaGetDriverEntryPointByVersion: the binary does not link
// libcuda, so it still starts on machines without a driver.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ts::kernels::cuda {

class VmmAllocator {
 public:
  // Throws std::runtime_error naming the call when the driver lacks virtual memory management.
  explicit VmmAllocator(int device);
  ~VmmAllocator();
  VmmAllocator(const VmmAllocator&) = delete;
  VmmAllocator& operator=(const VmmAllocator&) = delete;

  void* allocate(size_t bytes);  // std::bad_alloc when the device is full
  void release(void* p);
  // Backend::discard / commit over [p, p + bytes) of one allocation.
  bool discard(void* p, size_t bytes);
  void commit(void* p, size_t bytes);

  size_t granularity() const { return granule_; }
  // Physical bytes mapped now (granules of the VMM allocations, discarded ones until released).
  int64_t mappedBytes() const { return mapped_; }

 private:
  enum class State : uint8_t { Live, Pending, Free };
  struct Allocation {
    uintptr_t base = 0;
    size_t bytes = 0;     // requested
    size_t reserved = 0;  // whole granules
    bool vmm = false;     // else cudaMalloc
    std::vector<uint64_t> handles;
    std::vector<State> state;
    // Bumped each time a granule is discarded: a release queued by an earlier discard (since
    // committed and discarded again) no longer applies to it.
    std::vector<uint32_t> generation;
  };
  // The whole granules one discard() gave back, released once `event` (recorded after the
  // work queued before the discard) has completed.
  struct PendingRelease {
    void* event;  // cudaEvent_t
    struct Granule {
      uintptr_t base;
      size_t index;
      uint32_t generation;
    };
    std::vector<Granule> granules;
  };
  Allocation* find(const void* p, size_t bytes);
  void mapGranule(Allocation& a, size_t i);
  void unmapGranule(Allocation& a, size_t i);
  void reap(bool wait);  // release the pending granules whose event completed (all, if wait)
  void zero(uintptr_t p, size_t bytes);

  struct Driver;
  std::unique_ptr<Driver> drv_;
  int device_;
  size_t granule_ = 0;
  int64_t mapped_ = 0;
  std::map<uintptr_t, Allocation> allocs_;  // by base address
  std::vector<PendingRelease> pending_;
};

}  // namespace ts::kernels::cuda
