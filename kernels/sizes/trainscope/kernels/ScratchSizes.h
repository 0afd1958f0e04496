// The working space each CPU kernel takes from the kernel scratch region (CpuScratch.h), in
// floats. Shared by the kernels, which lease exactly this, and by core::savedState, which sizes
// the region the engine allocates and the estimator predicts: one description, so tracked
// workspace is what the kernels use. Header-only and dependency-free (the core library, which
// has no compute dependencies, includes it too).
#pragma once

#include <algorithm>
#include <cstdint>

namespace ts::kernels::scratch {

constexpr int kFlashTile = 64;  // flash attention: query rows and keys per tile
// matmulBf16 emulated: fp32 copies of one block of each operand at a time.
constexpr int64_t kBf16BlockM = 512, kBf16BlockN = 512, kBf16BlockK = 256;

// Per thread of the parallel region:
// flash forward: the score tile S and the output accumulator O of one query tile.
constexpr int64_t flashForward(int64_t headDim) {
  return int64_t(kFlashTile) * kFlashTile + int64_t(kFlashTile) * headDim;
}
// flash backward: P and dS tiles, one key tile's dK and dV, and D = rowsum(dO * O) for the
// `group` query heads sharing a kv head over T rows.
constexpr int64_t flashBackward(int64_t headDim, int64_t group, int64_t T) {
  return 2 * int64_t(kFlashTile) * kFlashTile + 2 * int64_t(kFlashTile) * headDim + group * T;
}
// Norm backwards: each thread's partial dweight (and dbias) over its rows, added in thread
// order afterwards (deterministic).
constexpr int64_t layernormBackward(int64_t C) { return 2 * C; }
constexpr int64_t rmsnormBackward(int64_t C) { return C; }
// Distillation: the tempered student and teacher softmaxes of one row.
constexpr int64_t distill(int64_t V) { return 2 * V; }

// On the calling thread, in one piece: the two operand blocks of an emulated bf16 GEMM.
constexpr int64_t matmulBf16Emulated(int64_t M, int64_t N, int64_t K) {
  return std::min(M, kBf16BlockM) * std::min(K, kBf16BlockK) +
         std::min(K, kBf16BlockK) * std::min(N, kBf16BlockN);
}

}  // namespace ts::kernels::scratch
