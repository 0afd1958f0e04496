#pragma once
// The compute backend: one interface, one op per file underneath (kernels/cpu/<op>.cpp,
// kernels/cuda/<op>.cu) with the same signature on every device. The ops and their contracts
// are listed once in OpList.h; this class adds device, memory and capability queries. Engine
// code asks `supports()` instead of using #ifdefs. All tensors are dense, row-major, fp32
// unless the op says otherwise; pointers live in the backend's memory (host memory for the
// CPU).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/kernels/AttentionOptions.h"  // before OpList.h, outside the namespace
#include "trainscope/kernels/Numeric.h"           // Fp8Format, in the conversion ops' signatures

namespace ts::kernels {

enum class DType { F32, BF16, F16, F8E4M3, F8E5M2, I8, NF4, I32, U16 };
const char* dtypeName(DType d);
// Storage size in bits (NF4 = 4).
int dtypeBits(DType d);
// The dtypes the Convert ops go between (fp32 and bf16, fp16, fp8 E4M3/E5M2).
inline bool convertsTo(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16 || d == DType::F8E4M3 ||
         d == DType::F8E5M2;
}

// What supports()/emulates() ask about: one kind per op family in OpList.h.
enum class Op {
#define TS_OP_KIND(kind) kind,
#include "trainscope/kernels/OpList.h"
};
// "Matmul", "RmsNorm", ...
const char* opName(Op op);

enum class DeviceKind { Cpu, Cuda };

struct DeviceInfo {
  DeviceKind kind = DeviceKind::Cpu;
  std::string name;                   // "AMD EPYC ...", "NVIDIA H200"
  int64_t memory_bytes = 0;           // total memory of the device
  std::vector<std::string> features;  // "avx2", "avx512f", "amx_bf16", "sm_90", ...
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual DeviceInfo device() const = 0;
  virtual bool supports(Op op) const = 0;
  // Whether `op` runs with operands of `dtype` (the storage type of its tensor inputs). Ops
  // are fp32 unless an override says otherwise (e.g. MatmulBF16 takes BF16).
  virtual bool supports(Op op, DType dtype) const { return supports(op) && dtype == DType::F32; }
  // A supported op that runs without dedicated hardware (e.g. MatmulBF16 on a CPU without
  // AVX512/AMX bf16: correct, but slower than the fp32 op it would replace).
  virtual bool emulates(Op op) const {
    (void)op;
    return false;
  }
  virtual void setThreads(int n) = 0;  // CPU: OpenMP threads (0 = all cores)
  virtual int threads() const = 0;

  // Kernel working space (flash tiles, norm partials, bf16 operand blocks; ScratchSizes.h):
  // the slices a model's scratch region needs, one per thread (0: this backend's kernels need
  // none). The model allocates the region as tracked workspace (core::savedState sizes it) and
  // binds it; its kernels then take their scratch from it. unbindScratch(base) forgets a region
  // if it is the bound one (the model freeing it).
  virtual int scratchThreads() const { return 0; }
  virtual void bindScratch(float* base, int64_t floatsPerThread, int threads) {
    (void)base, (void)floatsPerThread, (void)threads;
  }
  virtual void unbindScratch(const float* base) { (void)base; }

  // Whether host code may dereference this backend's pointers. Only the plain CPU backend's
  // memory is the host's; engine code must not rely on it except for documented CPU-only paths
  // (activation compression packs on the host), which ask this first.
  virtual bool hostAccessible() const { return kind() == DeviceKind::Cpu; }

  // Memory (device memory for CUDA, 64-byte aligned host memory for the CPU).
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // [p, p + bytes) of an allocation reads as zero afterwards, and its whole pages go back to
  // the system, keeping the addresses valid (ZeRO's sharded buffers keep their layout and give
  // back what a rank does not own). False when the backend cannot (nothing happens).
  virtual bool discard(void* p, size_t bytes) {
    (void)p;
    (void)bytes;
    return false;
  }
  // Makes [p, p + bytes) usable again after discard() gave pages of it back: they read as zero
  // and take writes. Engine code commits a range it discarded before it reads or writes there
  // again. The CPU gets such pages back on first touch (nothing to do); CUDA maps memory there
  // again (it cannot fault pages in); the guarded test backend faults on any access to a page
  // given back and not committed, so tests on it prove the calls are in place.
  virtual void commit(void* p, size_t bytes) {
    (void)p;
    (void)bytes;
  }
  // What the device itself reports in use (CUDA: cudaMemGetInfo's total - free, so the
  // context and every process on the GPU included), to cross-check the memory tracker in
  // memory events; false where the device keeps no such count (the CPU: the process RSS is
  // reported instead).
  virtual bool deviceMemory(int64_t* used, int64_t* total) const {
    (void)used;
    (void)total;
    return false;
  }
  virtual void copyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void copyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // The ops, one pure virtual per OpList.h entry (documented there).
#define TS_OP(kind, ret, name, params, args) virtual ret name params = 0;
#include "trainscope/kernels/OpList.h"
};

// The CPU backend (always present).
std::unique_ptr<Backend> makeCpuBackend();
// Host memory: madvise(MADV_DONTNEED) on the whole pages inside [p, p + bytes) (private
// anonymous memory reads as zero afterwards). Backend::discard of the CPU backends.
bool discardHostPages(void* p, size_t bytes);
// The CUDA backend, or nullptr with `why` set when CUDA is not built in or no GPU is present
// (decided from cudaGetDeviceCount's error code).
std::unique_ptr<Backend> makeCudaBackend(std::string* why);
// "auto" picks CUDA when usable, else CPU.
std::unique_ptr<Backend> makeBackend(const std::string& name, std::string* why);
// Names of the backends compiled in ("cpu", "cuda").
std::vector<std::string> compiledBackends();

}  // namespace ts::kernels
