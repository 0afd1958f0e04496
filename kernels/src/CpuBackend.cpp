// The CPU backend: forwards to the free functions in kernels/cpu/ and owns the thread count.
#include <cpuid.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"

namespace ts::kernels {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kPageAligned = size_t(1) << 16;  // from 64 KiB on, allocations start on a page
size_t pageBytes() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown CPU";
}

// Run-time ISA detection (never assumed at compile time beyond x86-64-v3's AVX2/FMA).
std::vector<std::string> cpuFeatures() {
  std::vector<std::string> f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    if (c & bit_FMA) f.push_back("fma");
    if (c & bit_AVX) f.push_back("avx");
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & bit_AVX2) f.push_back("avx2");
    if (b & bit_AVX512F) f.push_back("avx512f");
    if (d & (1u << 22)) f.push_back("amx_bf16");
    if (d & (1u << 24)) f.push_back("amx_tile");
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5))) f.push_back("avx512_bf16");
  return f;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : threads_(omp_get_max_threads()) {}

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }
  DeviceInfo device() const override {
    DeviceInfo info;
    info.kind = DeviceKind::Cpu;
    info.name = cpuModelName();
    info.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
    info.features = cpuFeatures();
    return info;
  }
  bool supports(Op) const override { return true; }
  bool supports(Op op, DType dtype) const override {
    if (op == Op::MatmulBF16) return dtype == DType::BF16;
    if (op == Op::Convert) return convertsTo(dtype);
    return supports(op) && dtype == DType::F32;
  }
  // bf16 GEMMs are emulated unless oneDNN has a kernel for this CPU's bf16 instructions.
  // The bf16 flash attention is a reference here (OpList.h): never faster than the fp32 one.
  bool emulates(Op op) const override {
    return (op == Op::MatmulBF16 && !cpu::matmulBf16Native()) || op == Op::FlashAttentionBf16;
  }
  void setThreads(int n) override {
    threads_ = n > 0 ? n : omp_get_num_procs();
    omp_set_num_threads(threads_);
  }
  int threads() const override { return threads_; }
  int scratchThreads() const override { return threads_; }
  void bindScratch(float* base, int64_t floatsPerThread, int threads) override {
    scratch_ = {base, base ? floatsPerThread : 0, base ? threads : 0};
  }
  void unbindScratch(const float* base) override {
    if (scratch_.base == base) scratch_ = {};
  }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    // Large buffers start on a page, so whole pages of them can be discarded.
    const size_t align = bytes >= kPageAligned ? pageBytes() : kAlign;
    const size_t rounded = (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }
  bool discard(void* p, size_t bytes) override { return discardHostPages(p, bytes); }
  void copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  // One forwarder per OpList.h entry.
#define TS_OP(kind, ret, name, params, args)  \
  ret name params override {                  \
    const cpu::ScratchScope scope(&scratch_); \
    return cpu::name args;                    \
  }
#include "trainscope/kernels/OpList.h"

 private:
  int threads_;
  cpu::ScratchRegion scratch_;  // the bound model's kernel scratch
};

}  // namespace

bool discardHostPages(void* p, size_t bytes) {
  if (bytes == 0) return true;
  const size_t page = pageBytes();
  const auto a = reinterpret_cast<uintptr_t>(p), e = a + bytes;
  const uintptr_t lo = (a + page - 1) / page * page, hi = e / page * page;
  if (hi > lo) {
    ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
    // The partial pages at either end stay; they must read as zero too.
    std::memset(p, 0, lo - a);
    std::memset(reinterpret_cast<void*>(hi), 0, e - hi);
  } else {
    std::memset(p, 0, bytes);
  }
  return true;
}

std::unique_ptr<Backend> makeCpuBackend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace ts::kernels
