#pragma once
// Runs a CUDA kernel's device code on the CPU, for tests where no GPU answers: one std::thread
// per CUDA thread of a CTA, the CTAs one after another. __syncthreads is a barrier of the CTA;
// __shfl_xor_sync and mma.sync exchange values through per-warp slots between barriers of the
// warp, so every lane of a warp must reach them together (as the kernels here do). mma.sync is
// m16n8k16 with bf16 operands and fp32 accumulation, its fragments decoded as the PTX ISA lays
// them out. This checks a kernel's indexing, tiling, masking and synchronization, not its speed
// or the hardware's rounding. Include it before the kernels' .cuh (it defines
// TS_CUDA_EMULATION and the CUDA names they use).
#define TS_CUDA_EMULATION 1

#include <array>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "trainscope/kernels/Numeric.h"

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

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
inline float __expf(float x) {
  return std::exp(x);
}
[[noreturn]] inline void __trap() {
  std::abort();
}

namespace ts::emu {

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

struct Cta {
  Cta(int threads, size_t smemBytes)
      : block(threads),
        shfl(size_t(threads)),
        a(size_t(threads)),
        b(size_t(threads)),
        smem((smemBytes + 15) / 16 + 1) {
    for (int w = 0; w < threads / 32; ++w) warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> shfl;
  std::vector<std::array<uint32_t, 4>> a;
  std::vector<std::array<uint32_t, 2>> b;
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  std::vector<Chunk> smem;  // dynamic shared memory, 16-byte aligned
};

inline thread_local Dim3 tThread, tBlock;
inline thread_local Cta* tCta = nullptr;

inline std::barrier<>& warpBarrier() {
  return *tCta->warps[tThread.x / 32];
}

// Runs kernel(args...) on a grid of grid.x * grid.y CTAs of `threads` threads each.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, Dim3 grid, int threads, size_t smemBytes, Args... args) {
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned x = 0; x < grid.x; ++x) {
      Cta cta(threads, smemBytes);
      std::vector<std::thread> pool;
      pool.reserve(size_t(threads));
      for (int i = 0; i < threads; ++i)
        pool.emplace_back([&, i] {
          tThread = {unsigned(i), 0, 0};
          tBlock = {x, y, 0};
          tCta = &cta;
          kernel(args...);
        });
      for (auto& t : pool) t.join();
    }
}

}  // namespace ts::emu

#define threadIdx (::ts::emu::tThread)
#define blockIdx (::ts::emu::tBlock)
#define TS_DYNAMIC_SMEM(type, name) \
  type* name = reinterpret_cast<type*>(::ts::emu::tCta->smem.data())

inline void __syncthreads() {
  ts::emu::tCta->block.arrive_and_wait();
}

inline float __shfl_xor_sync(unsigned, float v, int laneMask) {
  auto& cta = *ts::emu::tCta;
  const unsigned tid = ts::emu::tThread.x, base = tid / 32 * 32;
  cta.shfl[tid] = v;
  ts::emu::warpBarrier().arrive_and_wait();
  const float r = cta.shfl[base + ((tid % 32) ^ unsigned(laneMask))];
  ts::emu::warpBarrier().arrive_and_wait();
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += A (16x16) B (16x8). Lane 4 g + t
// holds A's registers {row g | row g+8} x {k 2t,2t+1 | k 2t+8,2t+9} in the order (g, k), (g+8,
// k), (g, k+8), (g+8, k+8); B's {k 2t,2t+1 | k 2t+8,2t+9} of column g; C's rows g and g+8,
// columns 2t and 2t+1. The low half of each 32-bit register is the lower k.
inline void emulatedMma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  auto& cta = *ts::emu::tCta;
  const unsigned tid = ts::emu::tThread.x, base = tid / 32 * 32, lane = tid % 32;
  cta.a[tid] = {a[0], a[1], a[2], a[3]};
  cta.b[tid] = {b[0], b[1]};
  ts::emu::warpBarrier().arrive_and_wait();
  auto half = [](uint32_t reg, int k) { return uint16_t(k % 2 ? reg >> 16 : reg & 0xFFFFu); };
  auto A = [&](int row, int k) {
    const unsigned owner = base + unsigned((row % 8) * 4 + (k % 8) / 2);
    return ts::kernels::bf16ToFloat(half(cta.a[owner][(row >= 8) + 2 * (k >= 8)], k));
  };
  auto B = [&](int k, int n) {
    const unsigned owner = base + unsigned(n * 4 + (k % 8) / 2);
    return ts::kernels::bf16ToFloat(half(cta.b[owner][k >= 8], k));
  };
  const int g = int(lane / 4), t = int(lane % 4);
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float s = c[e];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    c[e] = s;
  }
  ts::emu::warpBarrier().arrive_and_wait();
}
