#pragma once
// Flash attention on bf16 tensor cores (FlashAttention-2, reference.md), forward and backward,
// causal, grouped-query, head dims 64 and 128. Every product is an mma.sync.m16n8k16 with bf16
// operands and fp32 accumulation; the numerics are OpList.h's (the CPU twin is the reference).
//
// A CTA of 4 warps takes a tile of 64 rows, each warp 16 of them; tiles of 64 keys (or queries)
// stream through shared memory as bf16, rounded from the fp32 activations on the way in. The
// fragment layouts are the PTX ISA's for m16n8k16: lane = 4 g + t holds accumulator rows g and
// g + 8, columns 2t and 2t + 1 of each n-tile of 8 — exactly the A operand's layout for a k-chunk
// of 16 made of two n-tiles, so probabilities go from one product into the next without
// leaving registers (FlashAttention-2's trick). B operands are read as 32-bit pairs along k:
// tiles used with k along the row are stored transposed.
//
// Forward: online softmax per query row (running max m, sum l), only lse = m + log l saved.
// Backward, deterministic (every output has one writer, no atomics): one kernel per query tile
// recomputes P and dP and writes dq; one per key tile of a kv head loops over its query heads
// and the query tiles at or after the diagonal and writes dk and dv. D_i = sum_d dO_i O_i is
// recomputed in each from the bf16 dO tile and the fp32 forward output.
//
// Device code only, shared by flash_attention_bf16.cu (the launchers) and a CPU test that runs
// these kernels under a small SIMT emulation (tests/kernels/CudaEmulation.h defines
// TS_CUDA_EMULATION and the CUDA names used here first).
#ifndef TS_CUDA_EMULATION
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

// The kernels' dynamic shared memory (CUDA) or the emulated CTA's buffer.
#ifndef TS_DYNAMIC_SMEM
#define TS_DYNAMIC_SMEM(type, name) extern __shared__ __align__(16) type name[]
#endif

namespace ts::kernels::cuda::flash_bf16 {

constexpr int kRows = 64;           // rows (queries or keys) per CTA tile; key tiles equal
constexpr int kThreads = 128;       // 4 warps x 16 rows
constexpr int kPad = 8;             // bf16 padding per smem row: conflict-free fragment reads
constexpr int kLdT = kRows + kPad;  // row length of a transposed tile [HD][kRows]

struct Geo {
  int B, T, C, NH, KVH, hs, group;
  int64_t C3;  // qkv row: (NH + 2 KVH) hs
};

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
#ifdef TS_CUDA_EMULATION
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#else
  return *reinterpret_cast<const uint32_t*>(&v);
#endif
}
__device__ __forceinline__ float bf(uint16_t b) {
  return __uint_as_float(uint32_t(b) << 16);
}
__device__ __forceinline__ uint16_t tobf(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ uint32_t ld32(const uint16_t* p) {
#ifdef TS_CUDA_EMULATION
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}

// c += a (16x16, row-major) * b (16x8, k-major), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(TS_CUDA_EMULATION)
  emulatedMma(c, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // the host refuses to launch below sm_80 (bf16 tensor cores)
#endif
}

// A fragment of rows r0.. r0+15, k-chunk k0..k0+15 of a row-major smem tile (row length ld).
__device__ __forceinline__ void loadA(uint32_t a[4], const uint16_t* s, int ld, int r0, int k0,
                                      int g, int t) {
  a[0] = ld32(s + (r0 + g) * ld + k0 + 2 * t);
  a[1] = ld32(s + (r0 + g + 8) * ld + k0 + 2 * t);
  a[2] = ld32(s + (r0 + g) * ld + k0 + 2 * t + 8);
  a[3] = ld32(s + (r0 + g + 8) * ld + k0 + 2 * t + 8);
}
// B fragment (k 16 x n 8) from a tile stored n-major: s[n][k] (row length ld).
__device__ __forceinline__ void loadB(uint32_t b[2], const uint16_t* s, int ld, int n0, int k0,
                                      int g, int t) {
  b[0] = ld32(s + (n0 + g) * ld + k0 + 2 * t);
  b[1] = ld32(s + (n0 + g) * ld + k0 + 2 * t + 8);
}
// A fragment for k-chunk kc from accumulators of n-tiles 2 kc and 2 kc + 1 (rounded to bf16).
__device__ __forceinline__ void accToA(uint32_t a[4], const float lo[4], const float hi[4]) {
  a[0] = pack2(lo[0], lo[1]);
  a[1] = pack2(lo[2], lo[3]);
  a[2] = pack2(hi[0], hi[1]);
  a[3] = pack2(hi[2], hi[3]);
}

// Rows [t0, t0 + kRows) of one head (src points at row 0 of the head, rows `stride` floats
// apart; rows >= T read as zero) into smem as bf16: row-major dst[r][d] (row length HD + kPad)
// and/or transposed dstT[d][r] (row length kLdT). vec: every row start is 16-byte aligned.
template <int HD>
__device__ void loadTile(uint16_t* dst, uint16_t* dstT, const float* src, int64_t stride, int t0,
                         int T, bool vec) {
  constexpr int kLd = HD + kPad, kQuads = HD / 4;
  for (int idx = threadIdx.x; idx < kRows * kQuads; idx += kThreads) {
    const int r = idx / kQuads, d = (idx % kQuads) * 4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t0 + r < T) {
      const float* p = src + int64_t(t0 + r) * stride + d;
      if (vec)
#ifdef TS_CUDA_EMULATION
        std::memcpy(&v, p, sizeof v);
#else
        v = *reinterpret_cast<const float4*>(p);
#endif
      else
        v = make_float4(p[0], p[1], p[2], p[3]);
    }
    if (dst) {
      uint2 w;
      w.x = pack2(v.x, v.y);
      w.y = pack2(v.z, v.w);
#ifdef TS_CUDA_EMULATION
      std::memcpy(dst + r * kLd + d, &w, sizeof w);
#else
      *reinterpret_cast<uint2*>(dst + r * kLd + d) = w;
#endif
    }
    if (dstT) {
      dstT[(d + 0) * kLdT + r] = tobf(v.x);
      dstT[(d + 1) * kLdT + r] = tobf(v.y);
      dstT[(d + 2) * kLdT + r] = tobf(v.z);
      dstT[(d + 3) * kLdT + r] = tobf(v.w);
    }
  }
}

// D_i = sum_d bf16(dO_i) O_i for the tile's rows (warp w: rows 16 w..16 w + 15), into sD;
// rows >= T get 0.
template <int HD>
__device__ void rowDots(float* sD, const uint16_t* sdO, const float* out, int64_t stride, int t0,
                        int T, int warp, int lane) {
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr;
    float acc = 0.f;
    if (t0 + r < T) {
      const float* o = out + int64_t(t0 + r) * stride;
      for (int d = lane; d < HD; d += 32) acc += bf(sdO[r * (HD + kPad) + d]) * o[d];
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) sD[r] = acc;
  }
}

__device__ __forceinline__ float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ---- forward: CTA = (query tile, batch x query head) ---------------------------------------
template <int HD>
__global__ void __launch_bounds__(kThreads)
    fwdKernel(float* out, float* lse, const float* qkv, Geo G, float sc, bool vec) {
  constexpr int kLd = HD + kPad;
  TS_DYNAMIC_SMEM(uint16_t, smem);
  uint16_t* sQ = smem;               // [kRows][kLd]
  uint16_t* sK = sQ + kRows * kLd;   // [kRows][kLd]
  uint16_t* sVt = sK + kRows * kLd;  // [HD][kLdT]
  const int nT = (G.T + kRows - 1) / kRows;
  const int qt = nT - 1 - int(blockIdx.x);  // longest rows first
  const int bh = blockIdx.y, b = bh / G.NH, h = bh % G.NH, kvh = h / G.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int q0 = qt * kRows;
  const float* row0 = qkv + int64_t(b) * G.T * G.C3;
  loadTile<HD>(sQ, nullptr, row0 + int64_t(h) * HD, G.C3, q0, G.T, vec);

  float o[HD / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int iRow[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kRows;
    __syncthreads();  // the previous tile's readers are done
    loadTile<HD>(sK, nullptr, row0 + int64_t(G.NH + kvh) * HD, G.C3, k0, G.T, vec);
    loadTile<HD>(nullptr, sVt, row0 + int64_t(G.NH + G.KVH + kvh) * HD, G.C3, k0, G.T, vec);
    __syncthreads();
    float s[8][4] = {};
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t a[4];
      loadA(a, sQ, kLd, warp * 16, kk * 16, g, t);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t bb[2];
        loadB(bb, sK, kLd, nt * 8, kk * 16, g, t);
        mma(s[nt], a, bb);
      }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = k0 + nt * 8 + 2 * t + (e & 1), i = iRow[e / 2];
        s[nt][e] = (j > i || j >= G.T) ? -INFINITY : s[nt][e] * sc;
        mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
      }
    float alpha[2], mUse[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mNew = fmaxf(m[r], quadMax(mx[r]));
      mUse[r] = mNew == -INFINITY ? 0.f : mNew;  // a row with no key yet (padding rows only)
      alpha[r] = __expf(m[r] - mUse[r]);
      m[r] = mNew;
    }
    float rs[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = __expf(s[nt][e] - mUse[e / 2]);
        rs[e / 2] += s[nt][e];
      }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = alpha[r] * l[r] + quadSum(rs[r]);
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      o[dt][0] *= alpha[0], o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1], o[dt][3] *= alpha[1];
    }
#pragma unroll
    for (int kc = 0; kc < kRows / 16; ++kc) {
      uint32_t a[4];
      accToA(a, s[2 * kc], s[2 * kc + 1]);
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        uint32_t bb[2];
        loadB(bb, sVt, kLdT, dt * 8, kc * 16, g, t);
        mma(o[dt], a, bb);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = iRow[r];
    if (i >= G.T) continue;
    float* dst = out + (int64_t(b) * G.T + i) * G.C + int64_t(h) * HD;
    const float inv = 1.f / l[r];
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      dst[dt * 8 + 2 * t] = o[dt][2 * r] * inv;
      dst[dt * 8 + 2 * t + 1] = o[dt][2 * r + 1] * inv;
    }
    if (t == 0) lse[int64_t(bh) * G.T + i] = m[r] + logf(l[r]);
  }
}

// ---- backward, dq: CTA = (query tile, batch x query head) ----------------------------------
template <int HD>
__global__ void __launch_bounds__(kThreads)
    bwdQKernel(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
               Geo G, float sc, bool vec) {
  constexpr int kLd = HD + kPad;
  TS_DYNAMIC_SMEM(uint16_t, smem);
  uint16_t* sQ = smem;                                    // [kRows][kLd]
  uint16_t* sdO = sQ + kRows * kLd;                       // [kRows][kLd]
  uint16_t* sK = sdO + kRows * kLd;                       // [kRows][kLd]
  uint16_t* sV = sK + kRows * kLd;                        // [kRows][kLd]
  uint16_t* sKt = sV + kRows * kLd;                       // [HD][kLdT]
  float* sD = reinterpret_cast<float*>(sKt + HD * kLdT);  // [kRows]
  float* sL = sD + kRows;                                 // [kRows]
  const int nT = (G.T + kRows - 1) / kRows;
  const int qt = nT - 1 - int(blockIdx.x);
  const int bh = blockIdx.y, b = bh / G.NH, h = bh % G.NH, kvh = h / G.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int q0 = qt * kRows;
  const float* row0 = qkv + int64_t(b) * G.T * G.C3;
  const float* o0 = out + int64_t(b) * G.T * G.C + int64_t(h) * HD;
  loadTile<HD>(sQ, nullptr, row0 + int64_t(h) * HD, G.C3, q0, G.T, vec);
  loadTile<HD>(sdO, nullptr, dout + int64_t(b) * G.T * G.C + int64_t(h) * HD, G.C, q0, G.T, vec);
  for (int r = threadIdx.x; r < kRows; r += kThreads)
    sL[r] = q0 + r < G.T ? lse[int64_t(bh) * G.T + q0 + r] : INFINITY;
  __syncthreads();
  rowDots<HD>(sD, sdO, o0, G.C, q0, G.T, warp, lane);

  float dq[HD / 8][4] = {};
  const int rLoc[2] = {warp * 16 + g, warp * 16 + g + 8};
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kRows;
    __syncthreads();
    loadTile<HD>(sK, sKt, row0 + int64_t(G.NH + kvh) * HD, G.C3, k0, G.T, vec);
    loadTile<HD>(sV, nullptr, row0 + int64_t(G.NH + G.KVH + kvh) * HD, G.C3, k0, G.T, vec);
    __syncthreads();  // also publishes sD before the first use
    const float L[2] = {sL[rLoc[0]], sL[rLoc[1]]}, D[2] = {sD[rLoc[0]], sD[rLoc[1]]};
#pragma unroll
    for (int kc = 0; kc < kRows / 16; ++kc) {  // 16 keys at a time: two n-tiles
      float s[2][4] = {}, dp[2][4] = {};
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t aq[4], ao[4];
        loadA(aq, sQ, kLd, warp * 16, kk * 16, g, t);
        loadA(ao, sdO, kLd, warp * 16, kk * 16, g, t);
#pragma unroll
        for (int n = 0; n < 2; ++n) {
          uint32_t bk[2], bv[2];
          loadB(bk, sK, kLd, kc * 16 + n * 8, kk * 16, g, t);
          loadB(bv, sV, kLd, kc * 16 + n * 8, kk * 16, g, t);
          mma(s[n], aq, bk);
          mma(dp[n], ao, bv);
        }
      }
#pragma unroll
      for (int n = 0; n < 2; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int j = k0 + kc * 16 + n * 8 + 2 * t + (e & 1), i = q0 + rLoc[e / 2];
          const float p = j > i ? 0.f : __expf(s[n][e] * sc - L[e / 2]);
          s[n][e] = p * (dp[n][e] - D[e / 2]);  // dS
        }
      uint32_t a[4];
      accToA(a, s[0], s[1]);
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        uint32_t bb[2];
        loadB(bb, sKt, kLdT, dt * 8, kc * 16, g, t);
        mma(dq[dt], a, bb);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = q0 + rLoc[r];
    if (i >= G.T) continue;
    float* dst = dqkv + (int64_t(b) * G.T + i) * G.C3 + int64_t(h) * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      dst[dt * 8 + 2 * t] = dq[dt][2 * r] * sc;
      dst[dt * 8 + 2 * t + 1] = dq[dt][2 * r + 1] * sc;
    }
  }
}

// ---- backward, dk and dv: CTA = (key tile, batch x kv head) --------------------------------
// Transposed products: S^T = K Q^T (rows: the warp's 16 keys; columns: 16 queries at a time),
// so P^T and dS^T are A operands of dV = P^T dO and dK = dS^T Q.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    bwdKVKernel(float* dqkv, const float* dout, const float* out, const float* lse,
                const float* qkv, Geo G, float sc, bool vec) {
  constexpr int kLd = HD + kPad;
  TS_DYNAMIC_SMEM(uint16_t, smem);
  uint16_t* sK = smem;                                     // [kRows][kLd]
  uint16_t* sV = sK + kRows * kLd;                         // [kRows][kLd]
  uint16_t* sQ = sV + kRows * kLd;                         // [kRows][kLd]
  uint16_t* sdO = sQ + kRows * kLd;                        // [kRows][kLd]
  uint16_t* sQt = sdO + kRows * kLd;                       // [HD][kLdT]
  uint16_t* sdOt = sQt + HD * kLdT;                        // [HD][kLdT]
  float* sD = reinterpret_cast<float*>(sdOt + HD * kLdT);  // [kRows]
  float* sL = sD + kRows;                                  // [kRows]
  const int nT = (G.T + kRows - 1) / kRows;
  const int kt = int(blockIdx.x);  // tile 0 sees every query: longest first
  const int bg = blockIdx.y, b = bg / G.KVH, kvh = bg % G.KVH;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int k0 = kt * kRows;
  const float* row0 = qkv + int64_t(b) * G.T * G.C3;
  loadTile<HD>(sK, nullptr, row0 + int64_t(G.NH + kvh) * HD, G.C3, k0, G.T, vec);
  loadTile<HD>(sV, nullptr, row0 + int64_t(G.NH + G.KVH + kvh) * HD, G.C3, k0, G.T, vec);

  float dk[HD / 8][4] = {}, dv[HD / 8][4] = {};
  const int jRow[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  for (int h = kvh * G.group; h < (kvh + 1) * G.group; ++h) {
    const int64_t bh = int64_t(b) * G.NH + h;
    const float* o0 = out + int64_t(b) * G.T * G.C + int64_t(h) * HD;
    for (int qt = kt; qt < nT; ++qt) {
      const int q0 = qt * kRows;
      __syncthreads();
      loadTile<HD>(sQ, sQt, row0 + int64_t(h) * HD, G.C3, q0, G.T, vec);
      loadTile<HD>(sdO, sdOt, dout + int64_t(b) * G.T * G.C + int64_t(h) * HD, G.C, q0, G.T, vec);
      for (int r = threadIdx.x; r < kRows; r += kThreads)
        sL[r] = q0 + r < G.T ? lse[bh * G.T + q0 + r] : INFINITY;  // padding: P = 0
      __syncthreads();
      rowDots<HD>(sD, sdO, o0, G.C, q0, G.T, warp, lane);
      __syncthreads();
#pragma unroll
      for (int kc = 0; kc < kRows / 16; ++kc) {  // 16 queries at a time
        float s[2][4] = {}, dp[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
          uint32_t ak[4], av[4];
          loadA(ak, sK, kLd, warp * 16, kk * 16, g, t);
          loadA(av, sV, kLd, warp * 16, kk * 16, g, t);
#pragma unroll
          for (int n = 0; n < 2; ++n) {
            uint32_t bq[2], bo[2];
            loadB(bq, sQ, kLd, kc * 16 + n * 8, kk * 16, g, t);
            loadB(bo, sdO, kLd, kc * 16 + n * 8, kk * 16, g, t);
            mma(s[n], ak, bq);
            mma(dp[n], av, bo);
          }
        }
        float p[2][4];
#pragma unroll
        for (int n = 0; n < 2; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int il = kc * 16 + n * 8 + 2 * t + (e & 1), i = q0 + il, j = jRow[e / 2];
            p[n][e] = i < j ? 0.f : __expf(s[n][e] * sc - sL[il]);
            s[n][e] = p[n][e] * (dp[n][e] - sD[il]);  // dS^T
          }
        uint32_t ap[4], as[4];
        accToA(ap, p[0], p[1]);
        accToA(as, s[0], s[1]);
#pragma unroll
        for (int dt = 0; dt < HD / 8; ++dt) {
          uint32_t bo[2], bq[2];
          loadB(bo, sdOt, kLdT, dt * 8, kc * 16, g, t);
          loadB(bq, sQt, kLdT, dt * 8, kc * 16, g, t);
          mma(dv[dt], ap, bo);
          mma(dk[dt], as, bq);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = jRow[r];
    if (j >= G.T) continue;
    float* dK = dqkv + (int64_t(b) * G.T + j) * G.C3 + int64_t(G.NH + kvh) * HD;
    float* dV = dK + int64_t(G.KVH) * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) {
      dK[dt * 8 + 2 * t] = dk[dt][2 * r] * sc;
      dK[dt * 8 + 2 * t + 1] = dk[dt][2 * r + 1] * sc;
      dV[dt * 8 + 2 * t] = dv[dt][2 * r];
      dV[dt * 8 + 2 * t + 1] = dv[dt][2 * r + 1];
    }
  }
}

// Dynamic shared memory of each kernel, bytes.
constexpr size_t smemRowMajor(int hd) {
  return size_t(kRows) * (hd + kPad) * 2;
}
constexpr size_t smemT(int hd) {
  return size_t(hd) * kLdT * 2;
}
constexpr size_t kFwdSmem(int hd) {
  return 2 * smemRowMajor(hd) + smemT(hd);
}
constexpr size_t kBwdQSmem(int hd) {
  return 4 * smemRowMajor(hd) + smemT(hd) + 2 * kRows * 4;
}
constexpr size_t kBwdKVSmem(int hd) {
  return 4 * smemRowMajor(hd) + 2 * smemT(hd) + 2 * kRows * 4;
}

}  // namespace ts::kernels::cuda::flash_bf16
