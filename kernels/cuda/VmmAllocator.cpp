// VmmAllocator.h: granule-mapped device memory for Backend::discard / commit on CUDA.
#include "VmmAllocator.h"

#include "CudaCheck.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <new>
#include <stdexcept>

namespace ts::kernels::cuda {

namespace {
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
  check(cudaFree(nullptr), "cudaFree(0) (context)");  // the primary context exists from here
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
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
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
  std::vector<PendingRelease> keep;
  for (auto& r : pending_) {
    auto ev = static_cast<cudaEvent_t>(r.event);
    if (!wait && cudaEventQuery(ev) == cudaErrorNotReady) {
      keep.push_back(std::move(r));
      continue;
    }
    for (const auto& g : r.granules) {
      auto it = allocs_.find(g.base);
      if (it == allocs_.end()) continue;
      Allocation& a = it->second;
      // Committed since (Live), or discarded again by a later discard (a newer generation).
      if (a.state[g.index] == State::Pending && a.generation[g.index] == g.generation)
        unmapGranule(a, g.index);
    }
    cudaEventDestroy(ev);
  }
  pending_.swap(keep);
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
  a.generation.assign(n, 0);
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
  // Work queued on it must finish before its granules go (cudaFree synchronizes likewise); the
  // device is then idle, so every pending release can go first (none refers to this address
  // range once it may be reserved again).
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  reap(true);
  for (size_t i = 0; i < a.state.size(); ++i)
    if (a.state[i] != State::Free) unmapGranule(a, i);
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
  if (bytes) check(cudaMemsetAsync(reinterpret_cast<void*>(p), 0, bytes), "cudaMemsetAsync");
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
  PendingRelease r{nullptr, {}};
  for (size_t i = first; i < last; ++i) {
    if (a->state[i] != State::Live) continue;
    a->state[i] = State::Pending;
    r.granules.push_back({a->base, i, ++a->generation[i]});
  }
  if (r.granules.empty()) return true;
  cudaEvent_t ev = nullptr;
  check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(ev, 0), "cudaEventRecord");
  r.event = ev;
  pending_.push_back(std::move(r));
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
    if (a->state[i] == State::Pending)  // not released yet: keep it (its release is skipped)
      a->state[i] = State::Live;
    else
      mapGranule(*a, i);
    zero(a->base + i * granule_, granule_);
  }
}

}  // namespace ts::kernels::cuda
