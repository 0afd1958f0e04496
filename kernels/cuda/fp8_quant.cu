// CUDA twins of the fp8 operand quantization in kernels/cpu/fp8_quant.cpp. The encodings run
// Numeric.h's scalar code and the tile scales the same IEEE fp32 arithmetic, and a tile's amax is
// an exact (order-free) max, so every byte and value is identical to the CPU's.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {

constexpr int kTileBlock = 256;

// fp8ScaleFor (kernels/cpu/fp8_quant.cpp) with its default fallback of 1: fp8Max / amax /
// 2^margin, or 1 when amax is 0 or not finite or the scale would not be finite.
__device__ float scaleFor(float amax, Fp8Format f, int margin) {
  if (!(amax > 0.0f) || !(amax <= 3.40282347e38f)) return 1.0f;
  const float s = ldexpf(fp8Max(f) / amax, -margin);
  return isfinite(s) && s > 0.0f ? s : 1.0f;
}

// Block-wide max of unsigned values (blockDim.x == kTileBlock); every thread gets it.
__device__ unsigned blockMaxU(unsigned v) {
  __shared__ unsigned sh[kTileBlock / 32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < kTileBlock / 32 ? sh[lane] : 0u;
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// One block per tile (grid-stride over tiles): the tile's amax as the max of |x| bits (NaN bits
// exceed inf's, so a NaN poisons its tile, as on the CPU), then the tile quantized.
__global__ void quantizeTilesK(const float* x, uint8_t* q, float* deq, float* scaleInv,
                               int64_t rows, int64_t cols, int64_t tileRows, int64_t tileCols,
                               int64_t tilesPerRow, int64_t tiles, Fp8Format f, int margin) {
  __shared__ float sScale, sInv;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tilesPerRow) * tileRows, c0 = (t % tilesPerRow) * tileCols;
    const int64_t h = min(rows, r0 + tileRows) - r0, w = min(cols, c0 + tileCols) - c0;
    unsigned m = 0;
    for (int64_t e = threadIdx.x; e < h * w; e += blockDim.x)
      m = max(m, __float_as_uint(x[(r0 + e / w) * cols + c0 + e % w]) & 0x7FFFFFFFu);
    m = blockMaxU(m);
    if (threadIdx.x == 0) {
      sScale = scaleFor(__uint_as_float(m), f, margin);
      sInv = 1.0f / sScale;
      scaleInv[t] = sInv;
    }
    __syncthreads();
    const float s = sScale, inv = sInv;
    for (int64_t e = threadIdx.x; e < h * w; e += blockDim.x) {
      const int64_t i = (r0 + e / w) * cols + c0 + e % w;
      const uint8_t b = floatToFp8(x[i] * s, f, true);
      if (q) q[i] = b;
      if (deq) deq[i] = fp8ToFloat(b, f) * inv;
    }
    __syncthreads();  // sScale / sInv are rewritten for the next tile
  }
}

__global__ void dequantizeTilesK(const uint8_t* q, const float* scaleInv, float* deq, int64_t n,
                                 int64_t cols, int64_t tileRows, int64_t tileCols,
                                 int64_t tilesPerRow, Fp8Format f) {
  TS_GRID_LOOP(i, n) {
    const int64_t r = i / cols, c = i % cols;
    deq[i] = fp8ToFloat(q[i], f) * scaleInv[(r / tileRows) * tilesPerRow + c / tileCols];
  }
}

__global__ void fakeQuantizeK(const float* x, float* deq, int64_t n, Fp8Format f, float scale,
                              float inv) {
  TS_GRID_LOOP(i, n) deq[i] = fp8ToFloat(floatToFp8(x[i] * scale, f, true), f) * inv;
}

int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

void quantizeFp8Tiles(const float* x, uint8_t* q, float* deq, float* scaleInv, int64_t rows,
                      int64_t cols, int64_t tileRows, int64_t tileCols, Fp8Format f, int margin) {
  if (rows <= 0 || cols <= 0 || tileRows <= 0 || tileCols <= 0) return;
  const int64_t tilesPerRow = ceilDiv(cols, tileCols);
  const int64_t tiles = ceilDiv(rows, tileRows) * tilesPerRow;
  const unsigned grid = unsigned(tiles < 65535 ? tiles : 65535);
  quantizeTilesK<<<grid, kTileBlock>>>(x, q, deq, scaleInv, rows, cols, tileRows, tileCols,
                                       tilesPerRow, tiles, f, margin);
  TS_CUDA_LAUNCHED("quantizeFp8Tiles");
}

void dequantizeFp8Tiles(const uint8_t* q, const float* scaleInv, float* deq, int64_t rows,
                        int64_t cols, int64_t tileRows, int64_t tileCols, Fp8Format f) {
  if (rows <= 0 || cols <= 0 || tileRows <= 0 || tileCols <= 0) return;
  const int64_t n = rows * cols;
  dequantizeTilesK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(
      q, scaleInv, deq, n, cols, tileRows, tileCols, ceilDiv(cols, tileCols), f);
  TS_CUDA_LAUNCHED("dequantizeFp8Tiles");
}

void fakeQuantizeFp8(const float* x, float* deq, int64_t n, Fp8Format f, float scale) {
  if (n <= 0) return;
  // The reciprocal is taken on the host, as the CPU op does, so both multiply by the same value.
  fakeQuantizeK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, deq, n, f, scale,
                                                                      1.0f / scale);
  TS_CUDA_LAUNCHED("fakeQuantizeFp8");
}

}  // namespace ts::kernels::cuda
