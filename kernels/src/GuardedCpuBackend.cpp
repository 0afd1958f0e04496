// The guarded CPU backend (GuardedCpuBackend.h): forwards to the CPU backend with the memory of
// each call's pointer arguments opened (mprotect read/write) for the call's duration only.
#include "trainscope/kernels/GuardedCpuBackend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace ts::kernels {

namespace {

constexpr size_t kAlign = 64;  // as the CPU backend: same alignment, same SIMD paths

size_t pageSize() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

struct Region {
  char* map = nullptr;   // mapping start (page aligned)
  size_t mapBytes = 0;   // data pages + one guard page
  size_t dataBytes = 0;  // the data pages (what a call opens)
  size_t bytes = 0;      // requested
  // Data pages discard() gave back and commit() has not taken again: no access, in or out of
  // a call (as an unmapped page of a CUDA buffer).
  mutable std::vector<bool> gone;
};

[[noreturn]] void fatal(const std::string& what) {
  std::fprintf(stderr, "cpu-guarded backend: %s\n", what.c_str());
  std::abort();
}

void protect(const Region& r, int prot) {
  if (::mprotect(r.map, r.dataBytes, prot) != 0)
    fatal(std::string("mprotect failed: ") + std::strerror(errno));
}

class GuardedCpuBackend final : public Backend {
 public:
  GuardedCpuBackend() : cpu_(makeCpuBackend()) {}
  ~GuardedCpuBackend() override {
    for (auto& [p, r] : live_) ::munmap(r.map, r.mapBytes);
  }

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu-guarded"; }
  DeviceInfo device() const override { return cpu_->device(); }
  bool supports(Op op) const override { return cpu_->supports(op); }
  bool supports(Op op, DType dtype) const override { return cpu_->supports(op, dtype); }
  bool emulates(Op op) const override { return cpu_->emulates(op); }
  bool hostAccessible() const override { return false; }
  void setThreads(int n) override { cpu_->setThreads(n); }
  int threads() const override { return cpu_->threads(); }
  int scratchThreads() const override { return cpu_->scratchThreads(); }
  void bindScratch(float* base, int64_t floatsPerThread, int threads) override {
    scratch_ = base;
    cpu_->bindScratch(base, floatsPerThread, threads);
  }
  void unbindScratch(const float* base) override {
    if (scratch_ == base) scratch_ = nullptr;
    cpu_->unbindScratch(base);
  }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;  // as the CPU backend
    const size_t page = pageSize();
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    const size_t dataBytes = (rounded + page - 1) / page * page;
    void* m = ::mmap(nullptr, dataBytes + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    Region r{static_cast<char*>(m), dataBytes + page, dataBytes, bytes, {}};
    r.gone.assign(dataBytes / page, false);
    // Uninitialised memory reads as NaN, not as the zeros a fresh mapping would give: code that
    // forgets to initialise a tensor shows up here instead of passing by luck.
    std::memset(r.map, 0xFF, dataBytes);
    protect(r, PROT_NONE);
    ::mprotect(r.map + dataBytes, page, PROT_NONE);  // the guard page
    char* p = r.map + dataBytes - rounded;           // data ends against the guard page
    std::lock_guard lock(mu_);
    live_[p] = r;
    return p;
  }
  void release(void* p) override {
    if (!p) return;
    std::lock_guard lock(mu_);
    const auto it = live_.find(static_cast<char*>(p));
    if (it == live_.end()) fatal("release of a pointer this backend did not allocate");
    ::munmap(it->second.map, it->second.mapBytes);
    live_.erase(it);
  }
  // As discardHostPages, and the whole pages inside are marked given back; a partial page at
  // either end is zeroed unless it was given back before.
  bool discard(void* p, size_t bytes) override {
    if (!bytes) return true;
    Call call(*this, "discard");
    const Region& r = call.open(p, bytes);
    const size_t page = pageSize();
    char* const c = static_cast<char*>(p);
    const size_t a = size_t(c - r.map), e = a + bytes;
    const size_t lo = (a + page - 1) / page * page, hi = e / page * page;
    auto zero = [&](size_t x, size_t y) {  // [x, y) within one page
      if (y > x && !r.gone[x / page]) std::memset(r.map + x, 0, y - x);
    };
    if (hi > lo) {
      ::madvise(r.map + lo, hi - lo, MADV_DONTNEED);
      for (size_t q = lo / page; q < hi / page; ++q) r.gone[q] = true;
      if (::mprotect(r.map + lo, hi - lo, PROT_NONE) != 0) fatal("mprotect failed");
      zero(a, lo);
      zero(hi, e);
    } else {
      for (size_t x = a; x < e;) {
        const size_t y = std::min(e, (x / page + 1) * page);
        zero(x, y);
        x = y;
      }
    }
    return true;
  }
  void commit(void* p, size_t bytes) override {
    if (!bytes) return;
    Call call(*this, "commit");
    const Region& r = call.open(p, bytes);
    const size_t page = pageSize();
    const size_t a = size_t(static_cast<char*>(p) - r.map);
    for (size_t q = a / page; q < (a + bytes + page - 1) / page; ++q)
      if (r.gone[q]) {
        r.gone[q] = false;  // madvise left it zero
        if (::mprotect(r.map + q * page, page, PROT_READ | PROT_WRITE) != 0)
          fatal("mprotect failed");
      }
  }
  void copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    Call call(*this, "copyToDevice");
    call.requireHost(src, bytes);
    call.open(dst, bytes);
    std::memcpy(dst, src, bytes);
  }
  void copyToHost(void* dst, const void* src, size_t bytes) override {
    if (!bytes) return;
    Call call(*this, "copyToHost");
    call.requireHost(dst, bytes);
    call.open(src, bytes);
    std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  // One forwarder per OpList.h entry: open what the pointer arguments point into, run the CPU op.
#define TS_OP(kind, ret, name, params, args)  \
  ret name params override {                  \
    Call call(*this, #name);                  \
    call.pointers args;                       \
    call.open(scratch_); /* kernel scratch */ \
    return cpu_->name args;                   \
  }
#include "trainscope/kernels/OpList.h"

 private:
  // One backend call: holds the lock, opens the allocations it is handed and closes them again
  // when it ends (also when the op throws).
  class Call {
   public:
    Call(GuardedCpuBackend& g, const char* what) : g_(g), what_(what), lock_(g.mu_) {
      ++g.calls_[what];
    }
    ~Call() {
      for (const Region* r : opened_) protect(*r, PROT_NONE);
    }
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

    // Opens the allocation holding [p, p + bytes); p may be its end (an empty view) or null (an
    // optional argument). Anything else is a pointer the op could not read on a device.
    // Pages given back and not committed stay closed.
    const Region& open(const void* p, size_t bytes = 0) {
      static const Region none;
      if (!p) return none;
      const Region* r = find(p, bytes);
      if (!r)
        throw std::logic_error(std::string("cpu-guarded backend: ") + what_ +
                               " was handed a pointer outside the backend's memory (" +
                               (bytes ? std::to_string(bytes) + " bytes" : "op argument") +
                               "): host memory, which a device cannot read, or past an end");
      for (const Region* o : opened_)
        if (o == r) return *r;
      protect(*r, PROT_READ | PROT_WRITE);
      const size_t page = pageSize();
      for (size_t q = 0; q < r->gone.size();) {
        if (!r->gone[q]) {
          ++q;
          continue;
        }
        size_t e = q;
        while (e < r->gone.size() && r->gone[e]) ++e;
        if (::mprotect(r->map + q * page, (e - q) * page, PROT_NONE) != 0) fatal("mprotect failed");
        q = e;
      }
      opened_.push_back(r);
      return *r;
    }
    // The host side of a copy must be host memory.
    void requireHost(const void* p, size_t bytes) {
      if (find(p, 0) || find(static_cast<const char*>(p) + bytes - 1, 0))
        throw std::logic_error(std::string("cpu-guarded backend: the host side of ") + what_ +
                               " lies in the backend's memory (use copyOnDevice)");
    }
    // Every pointer among an op's arguments (the others are sizes, scales, flags).
    template <class... A>
    void pointers(const A&... a) {
      (pointer(a), ...);
    }

   private:
    template <class A>
    void pointer(const A& a) {
      if constexpr (std::is_pointer_v<A>) open(a);
    }
    const Region* find(const void* p, size_t bytes) const {
      const char* c = static_cast<const char*>(p);
      auto it = g_.live_.upper_bound(const_cast<char*>(c));
      if (it == g_.live_.begin()) return nullptr;
      --it;
      const char* begin = it->first;
      return c >= begin && c + bytes <= begin + it->second.bytes ? &it->second : nullptr;
    }

    GuardedCpuBackend& g_;
    const char* what_;
    std::lock_guard<std::mutex> lock_;
    std::vector<const Region*> opened_;
  };

  std::unique_ptr<Backend> cpu_;
  const float* scratch_ = nullptr;  // the bound kernel scratch region: every op may use it
  std::mutex mu_;
  std::map<char*, Region> live_;          // by data pointer
  std::map<std::string, int64_t> calls_;  // backend calls (ops and copies) by name

 public:
  std::map<std::string, int64_t> callCounts() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
};

}  // namespace

std::unique_ptr<Backend> makeGuardedCpuBackend() {
  return std::make_unique<GuardedCpuBackend>();
}

std::map<std::string, int64_t> guardedCallCounts(Backend& b) {
  auto* g = dynamic_cast<GuardedCpuBackend*>(&b);
  if (!g) throw std::logic_error("guardedCallCounts: not the cpu-guarded backend");
  return g->callCounts();
}

}  // namespace ts::kernels
