// VmmAllocator.h: granule-mapped device memory for Backend::discard / commit on CUDA.
#include "VmmAllocator.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <new>
#include <stdexcept>

namespace ts::kernels::cuda {

namespace {
void rtCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}
template <class F>
F entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn)
    throw std::runtime_error(std::string("the CUDA driver has no ") + name +
                             " (virtual memory management, needed to give pages back)");
  return reinterpret_cast<F>(fn);
}
}  // namespace

struct VmmAllocator::Driver {
  decltype(&cuMemCreate) create = entry<decltype(&cuMemCreate)>("cuMemCreate");
  decltype(&cuMemRelease) release = entry<decltype(&cuMemRelease)>("cuMemRelease");
  decltype(&cuMemMap) map = entry<decltype(&cuMemMap)>("cuMemMap");
  decltype(&cuMemUnmap) unmap = entry<decltype(&cuMemUnmap)>("cuMemUnmap");
  decltype(&cuMemSetAccess) setAccess = entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  decltype(&cuMemAddressReserve) reserve =
      entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  decltype(&cuMemAddressFree) addressFree = entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  decltype(&cuMemGetAllocationGranularity) granularity =
      entry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  CUmemAllocationProp prop{};
  CUmemAccessDesc access{};

  static void check(CUresult r, const char* what) {
    if (r != CUDA_SUCCESS)
      throw std::runtime_error(std::string(what) + " failed with CUresult " +
                               std::to_string(int(r)));
  }
};

VmmAllocator::VmmAllocator(int device) : drv_(std::make_unique<Driver>()), device_(device) {
  rtCheck(cudaFree(nullptr), "cudaFree(0) (context)");  // the primary context exists from here
  auto& p = drv_->prop;
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device_;
  drv_->access.location = p.location;
  drv_->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  Driver::check(drv_->granularity(&granule_, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity");
  if (granule_ == 0) throw std::runtime_error("cuMemGetAllocationGranularity returned 0");
}

VmmAllocator::~VmmAllocator() {
  cudaDeviceSynchronize();
  reap(true);
  for (auto& [base, a] : allocs_) {
    if (!a.vmm) {
      cudaFree(reinterpret_cast<void*>(base));
      continue;
    }
    for (size_t i = 0; i < a.state.size(); ++i)
      if (a.state[i] != State::Free) unmapGranule(a, i);
    drv_->addressFree(CUdeviceptr(base), a.reserved);
  }
}

void VmmAllocator::mapGranule(Allocation& a, size_t i) {
  const CUdeviceptr at = CUdeviceptr(a.base + i * granule_);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = drv_->create(&h, granule_, &drv_->prop, 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {  // granules waiting for their event may free enough
    rtCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    reap(true);
    r = drv_->create(&h, granule_, &drv_->prop, 0);
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
  Driver::check(r, "cuMemCreate");
  Driver::check(drv_->map(at, granule_, 0, h, 0), "cuMemMap");
  Driver::check(drv_->setAccess(at, granule_, &drv_->access, 1), "cuMemSetAccess");
  a.handles[i] = h;
  a.state[i] = State::Live;
  mapped_ += int64_t(granule_);
}

void VmmAllocator::unmapGranule(Allocation& a, size_t i) {
  Driver::check(drv_->unmap(CUdeviceptr(a.base + i * granule_), granule_), "cuMemUnmap");
  Driver::check(drv_->release(CUmemGenericAllocationHandle(a.handles[i])), "cuMemRelease");
  a.handles[i] = 0;
  a.state[i] = State::Free;
  mapped_ -= int64_t(granule_);
}

void VmmAllocator::reap(bool wait) {
  auto done = [&](const PendingRelease& r) {
    auto ev = static_cast<cudaEvent_t>(r.event);
    if (!wait && cudaEventQuery(ev) == cudaErrorNotReady) return false;
    auto it = allocs_.find(r.base);
    if (it != allocs_.end() && it->second.state[r.granule] == State::Pending)
      unmapGranule(it->second, r.granule);
    return true;
  };
  std::vector<void*> events;
  std::vector<PendingRelease> keep;
  for (const auto& r : pending_) {
    if (done(r))
      events.push_back(r.event);
    else
      keep.push_back(r);
  }
  pending_.swap(keep);
  // One event may serve several granules: destroy each once no entry holds it.
  std::sort(events.begin(), events.end());
  events.erase(std::unique(events.begin(), events.end()), events.end());
  for (void* e : events) {
    const bool held = std::any_of(pending_.begin(), pending_.end(),
                                  [&](const PendingRelease& r) { return r.event == e; });
    if (!held) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  }
}

void* VmmAllocator::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  reap(false);
  Allocation a;
  a.bytes = bytes;
  if (bytes < granule_) {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    a.base = reinterpret_cast<uintptr_t>(p);
    allocs_[a.base] = std::move(a);
    return p;
  }
  a.vmm = true;
  a.reserved = (bytes + granule_ - 1) / granule_ * granule_;
  CUdeviceptr base = 0;
  Driver::check(drv_->reserve(&base, a.reserved, granule_, 0, 0), "cuMemAddressReserve");
  a.base = uintptr_t(base);
  const size_t n = a.reserved / granule_;
  a.handles.assign(n, 0);
  a.state.assign(n, State::Free);
  try {
    for (size_t i = 0; i < n; ++i) mapGranule(a, i);
  } catch (...) {
    for (size_t i = 0; i < n; ++i)
      if (a.state[i] != State::Free) unmapGranule(a, i);
    drv_->addressFree(base, a.reserved);
    throw;
  }
  allocs_[a.base] = std::move(a);
  return reinterpret_cast<void*>(base);
}

void VmmAllocator::release(void* p) {
  auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
  if (it == allocs_.end()) throw std::logic_error("VmmAllocator::release of a foreign pointer");
  Allocation& a = it->second;
  if (!a.vmm) {
    cudaFree(p);
    allocs_.erase(it);
    return;
  }
  // Work queued on it must finish before its granules go (cudaFree synchronizes likewise).
  rtCheck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  for (size_t i = 0; i < a.state.size(); ++i)
    if (a.state[i] != State::Free) unmapGranule(a, i);
  // Its pending entries: the device is idle, so reaping them now only skips Free granules.
  reap(true);
  drv_->addressFree(CUdeviceptr(a.base), a.reserved);
  allocs_.erase(it);
}

VmmAllocator::Allocation* VmmAllocator::find(const void* p, size_t bytes) {
  const auto c = reinterpret_cast<uintptr_t>(p);
  auto it = allocs_.upper_bound(c);
  if (it == allocs_.begin()) return nullptr;
  --it;
  Allocation& a = it->second;
  return c >= a.base && c + bytes <= a.base + a.bytes ? &a : nullptr;
}

void VmmAllocator::zero(uintptr_t p, size_t bytes) {
  if (bytes) rtCheck(cudaMemsetAsync(reinterpret_cast<void*>(p), 0, bytes), "cudaMemsetAsync");
}

bool VmmAllocator::discard(void* p, size_t bytes) {
  if (bytes == 0) return true;
  Allocation* a = find(p, bytes);
  if (!a) throw std::logic_error("discard of a range outside one device allocation");
  const uintptr_t s = reinterpret_cast<uintptr_t>(p), e = s + bytes;
  if (!a->vmm) {
    zero(s, bytes);
    return true;
  }
  reap(false);
  const size_t first = (s - a->base + granule_ - 1) / granule_, last = (e - a->base) / granule_;
  // Partial granules at either end stay mapped; the part inside reads as zero (a given-back
  // granule is skipped: it reads as zero once committed).
  auto zeroPart = [&](uintptr_t x, uintptr_t y) {
    while (x < y) {
      const size_t i = (x - a->base) / granule_;
      const uintptr_t end = std::min<uintptr_t>(y, a->base + (i + 1) * granule_);
      if (a->state[i] == State::Live) zero(x, end - x);
      x = end;
    }
  };
  if (last <= first) {
    zeroPart(s, e);
    return true;
  }
  zeroPart(s, a->base + first * granule_);
  zeroPart(a->base + last * granule_, e);
  cudaEvent_t ev = nullptr;
  for (size_t i = first; i < last; ++i) {
    if (a->state[i] != State::Live) continue;
    if (!ev) {
      rtCheck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
      rtCheck(cudaEventRecord(ev, 0), "cudaEventRecord");
    }
    a->state[i] = State::Pending;
    pending_.push_back({a->base, i, ev});
  }
  return true;
}

void VmmAllocator::commit(void* p, size_t bytes) {
  if (bytes == 0) return;
  Allocation* a = find(p, bytes);
  if (!a) throw std::logic_error("commit of a range outside one device allocation");
  if (!a->vmm) return;
  const uintptr_t s = reinterpret_cast<uintptr_t>(p), e = s + bytes;
  const size_t first = (s - a->base) / granule_, last = (e - a->base + granule_ - 1) / granule_;
  for (size_t i = first; i < last; ++i) {
    if (a->state[i] == State::Live) continue;
    if (a->state[i] == State::Pending) {  // not released yet: keep it (its event stays queued)
      a->state[i] = State::Live;
      void* ev = nullptr;
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                    [&](const PendingRelease& r) {
                                      if (r.base != a->base || r.granule != i) return false;
                                      ev = r.event;
                                      return true;
                                    }),
                     pending_.end());
      const bool held = std::any_of(pending_.begin(), pending_.end(),
                                    [&](const PendingRelease& r) { return r.event == ev; });
      if (ev && !held) cudaEventDestroy(static_cast<cudaEvent_t>(ev));
    } else {
      mapGranule(*a, i);
    }
    zero(a->base + i * granule_, granule_);
  }
}

}  // namespace ts::kernels::cuda
