// Launchers of the bf16 tensor-core flash attention (FlashAttentionBf16Kernels.cuh says how it
// works): head dim 64 or 128 and sm_80 or newer, checked here with a clear error.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "Common.cuh"
#include "FlashAttentionBf16Kernels.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
using namespace flash_bf16;

Geo geometry(int B, int T, int C, int NH, int KVH, const char* what) {
  if (NH <= 0 || KVH <= 0 || NH % KVH != 0 || C % NH != 0)
    throw std::invalid_argument(std::string(what) + ": NH = " + std::to_string(NH) +
                                " query heads must divide C = " + std::to_string(C) +
                                " and be a multiple of KVH = " + std::to_string(KVH));
  const int hs = C / NH;
  if (hs != 64 && hs != 128)
    throw std::invalid_argument(std::string(what) + ": head dim " + std::to_string(hs) +
                                " (the bf16 tensor-core kernel takes 64 or 128)");
  int dev = 0, major = 0;
  check(cudaGetDevice(&dev), what);
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), what);
  if (major < 8)
    throw std::invalid_argument(std::string(what) + ": needs bf16 tensor cores (sm_80 or newer)");
  return Geo{B, T, C, NH, KVH, hs, NH / KVH, int64_t(NH + 2 * KVH) * hs};
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Opt each kernel in to the shared memory it needs beyond the 48 KiB default, once.
template <typename K>
void allowSmem(K kernel, size_t bytes, const char* what) {
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
        what);
}

template <int HD>
void forward(float* out, float* lse, const float* qkv, const Geo& G) {
  static const bool once = (allowSmem(fwdKernel<HD>, kFwdSmem(HD), "flash bf16 forward"), true);
  (void)once;
  const bool vec = aligned16(qkv);  // C3 and head offsets are multiples of 4 floats
  const dim3 grid(unsigned((G.T + kRows - 1) / kRows), unsigned(G.B * G.NH));
  fwdKernel<HD><<<grid, kThreads, kFwdSmem(HD)>>>(out, lse, qkv, G, 1.0f / sqrtf(float(HD)), vec);
}

template <int HD>
void backward(float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv,
              const Geo& G) {
  static const bool once =
      (allowSmem(bwdQKernel<HD>, kBwdQSmem(HD), "flash bf16 backward"),
       allowSmem(bwdKVKernel<HD>, kBwdKVSmem(HD), "flash bf16 backward"), true);
  (void)once;
  const bool vec = aligned16(qkv) && aligned16(dout) && aligned16(out);
  const unsigned tiles = unsigned((G.T + kRows - 1) / kRows);
  const float sc = 1.0f / sqrtf(float(HD));
  bwdQKernel<HD><<<dim3(tiles, unsigned(G.B * G.NH)), kThreads, kBwdQSmem(HD)>>>(
      dqkv, dout, out, lse, qkv, G, sc, vec);
  bwdKVKernel<HD><<<dim3(tiles, unsigned(G.B * G.KVH)), kThreads, kBwdKVSmem(HD)>>>(
      dqkv, dout, out, lse, qkv, G, sc, vec);
}
}  // namespace

void flashAttentionBf16Forward(float* out, float* lse, const float* qkv, int B, int T, int C,
                               int NH, int KVH) {
  const Geo G = geometry(B, T, C, NH, KVH, "flashAttentionBf16Forward");
  if (B <= 0 || T <= 0) return;
  if (G.hs == 64)
    forward<64>(out, lse, qkv, G);
  else
    forward<128>(out, lse, qkv, G);
  TS_CUDA_LAUNCHED("flashAttentionBf16Forward");
}

void flashAttentionBf16Backward(float* dqkv, const float* dout, const float* out, const float* lse,
                                const float* qkv, int B, int T, int C, int NH, int KVH) {
  const Geo G = geometry(B, T, C, NH, KVH, "flashAttentionBf16Backward");
  if (B <= 0 || T <= 0) return;
  if (G.hs == 64)
    backward<64>(dqkv, dout, out, lse, qkv, G);
  else
    backward<128>(dqkv, dout, out, lse, qkv, G);
  TS_CUDA_LAUNCHED("flashAttentionBf16Backward");
}

}  // namespace ts::kernels::cuda
