#pragma once
// Runs CUDA kernels on the CPU, for tests where no GPU answers. Each CTA's threads are fibers
// (ucontext) on the calling thread, run in turn; a thread runs until it reaches a barrier:
// __syncthreads waits for the CTA's live threads, and __shfl_xor_sync and mma.sync exchange
// values through per-warp slots between barriers of the warp's live threads (a warp must reach
// them together, as CUDA requires). CTAs run one after another, so `__shared__` is a static:
// one copy, as one CTA sees it. mma.sync is m16n8k16 with bf16 operands and fp32 accumulation,
// its fragments decoded as the PTX ISA lays them out; cuBLAS's GEMMs are reference loops.
// This checks a kernel's indexing, tiling, masking and synchronization, not its speed or the
// hardware's rounding (a GPU's products, fused multiply-adds and exp may differ in the last
// bits). Used through tests/kernels/emu/include/ (cuda_runtime.h, cuda_bf16.h, cublas_v2.h),
// which the emulated build of kernels/cuda puts first on its include path, or included before a
// kernel header directly.
#define TS_CUDA_EMULATION 1

#include <setjmp.h>
#include <ucontext.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "trainscope/kernels/Numeric.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static

// ---- types and intrinsics -------------------------------------------------------------------
struct float4 {
  float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) {
  return {x, y, z, w};
}
struct uint2 {
  uint32_t x, y;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {  // .x in the low half of the 32-bit pair, as on the GPU
  uint16_t x, y;
};
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {ts::kernels::floatToBf16(lo), ts::kernels::floatToBf16(hi)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float x) {
  return {ts::kernels::floatToBf16(x)};
}
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 b) {
  return b.bits;
}
inline float __uint_as_float(uint32_t u) {
  return std::bit_cast<float>(u);
}
inline uint32_t __float_as_uint(float f) {
  return std::bit_cast<uint32_t>(f);
}
inline float __expf(float x) {
  return std::exp(x);
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
using std::isfinite;  // CUDA's math functions are global
using std::isinf;
using std::isnan;
template <class A, class B>
std::common_type_t<A, B> max(A a, B b) {
  return a > b ? a : b;
}
template <class A, class B>
std::common_type_t<A, B> min(A a, B b) {
  return a < b ? a : b;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
[[noreturn]] inline void __trap() {
  std::abort();
}
// Fibers take turns on one OS thread: an atomic is a plain read-modify-write.
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const auto old = *p;
  *p += v;
  return old;
}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p += v;
  return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old > v ? old : v;
  return old;
}

// ---- the SIMT runtime -----------------------------------------------------------------------
namespace ts::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

class Runtime {
 public:
  static Runtime& get() {
    static Runtime r;
    return r;
  }
  Dim3 threadIdx, blockIdx, blockDim, gridDim;

  // Runs body() as every thread of every CTA of `grid`.
  template <class Body>
  void run(Dim3 grid, Dim3 block, size_t smemBytes, Body body) {
    if (running_) throw std::logic_error("emulated CUDA: a launch inside a kernel");
    running_ = true;
    gridDim = grid;
    blockDim = block;
    const int n = int(block.x * block.y * block.z);
    smem_.assign((smemBytes + 15) / 16 + 1, Chunk{});
    body_ = [&body] { body(); };
    // Fibers persist: one started for thread t runs thread t of every later CTA and launch.
    while (int(stacks_.size()) < n) stacks_.push_back(std::make_unique<char[]>(kStack));
    if (int(fibers_.size()) < n) fibers_.resize(size_t(n));
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          blockIdx = Dim3(x, y, z);
          runCta(n);
        }
    running_ = false;
  }

  // __syncthreads: every live thread of the CTA.
  void syncBlock() { arrive(blockArrived_, blockLive_, Wait::Block, -1); }
  // A warp-wide exchange point: every live lane of the current thread's warp.
  void syncWarp() {
    const int w = current_ / 32;
    arrive(warpArrived_[size_t(w)], warpLive_[size_t(w)], Wait::Warp, w);
  }
  int thread() const { return current_; }
  void* smem() { return smem_.data(); }
  uint64_t& slot(int t) { return shfl_[size_t(t)]; }
  std::array<uint32_t, 4>& a(int t) { return a_[size_t(t)]; }
  std::array<uint32_t, 2>& b(int t) { return b_[size_t(t)]; }

 private:
  static constexpr size_t kStack = 256 * 1024;
  enum class Wait { None, Block, Warp };
  // A fiber starts once through makecontext/swapcontext; afterwards it and the scheduler switch
  // with _setjmp/_longjmp, which (unlike swapcontext) save no signal mask: no system call per
  // switch. A fiber that ends a thread parks, and runs the same thread of the next CTA.
  struct Fiber {
    ucontext_t ctx{};
    jmp_buf jb;
    bool started = false;
    bool done = false;
    Wait wait = Wait::None;
    int warp = -1;
  };
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };

  static void entry() {
    Runtime& r = get();
    for (;;) {
      r.body_();
      r.exitThread();
      r.yield();  // parked until the next CTA needs this thread
    }
  }
  // Runs fiber t until it waits at a barrier or ends.
  void resume(int t) {
    Fiber& f = fibers_[size_t(t)];
    if (_setjmp(schedJb_) == 0) {
      if (!f.started) {
        f.started = true;
        swapcontext(&scheduler_, &f.ctx);
      } else {
        _longjmp(f.jb, 1);
      }
    }
  }
  // From the running fiber back to the scheduler; returns when the scheduler resumes it.
  void yield() {
    Fiber& f = fibers_[size_t(current_)];
    if (_setjmp(f.jb) == 0) _longjmp(schedJb_, 1);
  }

  void runCta(int n) {
    blockThreads_ = n;
    blockArrived_ = 0;
    blockLive_ = n;
    const int warps = (n + 31) / 32;
    warpArrived_.assign(size_t(warps), 0);
    warpLive_.assign(size_t(warps), 0);
    for (int t = 0; t < n; ++t) ++warpLive_[size_t(t / 32)];
    shfl_.assign(size_t(n), 0);
    a_.assign(size_t(n), {});
    b_.assign(size_t(n), {});
    for (int t = 0; t < n; ++t) {
      Fiber& f = fibers_[size_t(t)];
      f.done = false;
      f.wait = Wait::None;
      if (f.started) continue;
      getcontext(&f.ctx);
      f.ctx.uc_stack.ss_sp = stacks_[size_t(t)].get();
      f.ctx.uc_stack.ss_size = kStack;
      f.ctx.uc_link = &scheduler_;
      makecontext(&f.ctx, &Runtime::entry, 0);
    }
    int left = n;
    while (left > 0) {
      bool ran = false;
      for (int t = 0; t < n; ++t) {
        Fiber& f = fibers_[size_t(t)];
        if (f.done || f.wait != Wait::None) continue;
        current_ = t;
        threadIdx = Dim3(unsigned(t) % blockDim.x, unsigned(t) / blockDim.x % blockDim.y,
                         unsigned(t) / (blockDim.x * blockDim.y));
        resume(t);
        ran = true;
        if (f.done) --left;
      }
      if (!ran && left > 0) {
        std::fprintf(stderr,
                     "emulated CUDA: deadlock in CTA (%u,%u,%u): %d threads wait at a "
                     "barrier the others never reach\n",
                     blockIdx.x, blockIdx.y, blockIdx.z, left);
        std::abort();
      }
    }
  }

  void arrive(int& arrived, int& live, Wait kind, int warp) {
    if (++arrived == live) {
      release(arrived, kind, warp);
      return;
    }
    Fiber& f = fibers_[size_t(current_)];
    f.wait = kind;
    f.warp = warp;
    yield();  // back here once the barrier is complete
  }
  void release(int& arrived, Wait kind, int warp) {
    arrived = 0;
    for (int t = 0; t < blockThreads_; ++t) {
      Fiber& f = fibers_[size_t(t)];
      if (f.wait == kind && (kind == Wait::Block || f.warp == warp)) f.wait = Wait::None;
    }
  }
  // A returning thread no longer counts at barriers (it may complete one the others wait at).
  void exitThread() {
    fibers_[size_t(current_)].done = true;
    const int w = current_ / 32;
    if (--blockLive_ > 0 && blockArrived_ == blockLive_) release(blockArrived_, Wait::Block, -1);
    if (--warpLive_[size_t(w)] > 0 && warpArrived_[size_t(w)] == warpLive_[size_t(w)])
      release(warpArrived_[size_t(w)], Wait::Warp, w);
  }

  bool running_ = false;
  std::function<void()> body_;
  std::vector<std::unique_ptr<char[]>> stacks_;
  std::vector<Fiber> fibers_;
  ucontext_t scheduler_{};
  jmp_buf schedJb_;
  int current_ = -1;
  int blockThreads_ = 0, blockArrived_ = 0, blockLive_ = 0;
  std::vector<int> warpArrived_, warpLive_;
  std::vector<uint64_t> shfl_;
  std::vector<std::array<uint32_t, 4>> a_;
  std::vector<std::array<uint32_t, 2>> b_;
  std::vector<Chunk> smem_;
};

// kernel<<<grid, block, smem, stream>>>(args) is rewritten Launch(kernel, grid, block, ...)(args)
// by the emulated build (tests/kernels/CMakeLists.txt).
template <class... P>
struct Launch {
  void (*kernel)(P...);
  Dim3 grid, block;
  size_t smem;
  Launch(void (*k)(P...), Dim3 g, Dim3 b, size_t s = 0, int stream = 0)
      : kernel(k), grid(g), block(b), smem(s) {
    (void)stream;
  }
  template <class... A>
  void operator()(A&&... args) const {
    std::tuple<std::decay_t<P>...> bound(std::forward<A>(args)...);  // by value, as CUDA
    auto k = kernel;
    Runtime::get().run(grid, block, smem, [&] { std::apply(k, bound); });
  }
};

// Runs kernel(args...) on grid x block threads with smemBytes of dynamic shared memory.
template <class... P, class... A>
void launch(void (*kernel)(P...), Dim3 grid, Dim3 block, size_t smemBytes, A&&... args) {
  Launch<P...>(kernel, grid, block, smemBytes)(std::forward<A>(args)...);
}

}  // namespace ts::emu

using dim3 = ts::emu::Dim3;
#define threadIdx (::ts::emu::Runtime::get().threadIdx)
#define blockIdx (::ts::emu::Runtime::get().blockIdx)
#define blockDim (::ts::emu::Runtime::get().blockDim)
#define gridDim (::ts::emu::Runtime::get().gridDim)
#define TS_DYNAMIC_SMEM(type, name) \
  type* name = static_cast<type*>(::ts::emu::Runtime::get().smem())

inline void __syncthreads() {
  ts::emu::Runtime::get().syncBlock();
}

template <class T>
T __shfl_xor_sync(unsigned, T v, int laneMask) {
  static_assert(sizeof(T) <= 8);
  auto& r = ts::emu::Runtime::get();
  const int t = r.thread(), partner = t / 32 * 32 + ((t % 32) ^ laneMask);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  r.slot(t) = bits;
  r.syncWarp();
  bits = r.slot(partner);
  r.syncWarp();  // every lane has read before any slot is written again
  T out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += A (16x16) B (16x8). Lane 4 g + t
// holds A's registers {row g | row g+8} x {k 2t,2t+1 | k 2t+8,2t+9} in the order (g, k), (g+8,
// k), (g, k+8), (g+8, k+8); B's {k 2t,2t+1 | k 2t+8,2t+9} of column g; C's rows g and g+8,
// columns 2t and 2t+1. The low half of each 32-bit register is the lower k.
inline void emulatedMma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  auto& r = ts::emu::Runtime::get();
  const int tid = r.thread(), base = tid / 32 * 32, lane = tid % 32;
  r.a(tid) = {a[0], a[1], a[2], a[3]};
  r.b(tid) = {b[0], b[1]};
  r.syncWarp();
  auto half = [](uint32_t reg, int k) { return uint16_t(k % 2 ? reg >> 16 : reg & 0xFFFFu); };
  auto A = [&](int row, int k) {
    const int owner = base + (row % 8) * 4 + (k % 8) / 2;
    return ts::kernels::bf16ToFloat(half(r.a(owner)[size_t((row >= 8) + 2 * (k >= 8))], k));
  };
  auto B = [&](int k, int n) {
    const int owner = base + n * 4 + (k % 8) / 2;
    return ts::kernels::bf16ToFloat(half(r.b(owner)[size_t(k >= 8)], k));
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float s = c[e];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    out[e] = s;
  }
  r.syncWarp();  // every lane has read the fragments
  for (int e = 0; e < 4; ++e) c[e] = out[e];
}
