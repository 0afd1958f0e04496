// CUDA twins of kernels/cpu/convert.cpp: the elementwise kernels run Numeric.h's scalar
// code, so every conversion is bit-identical to the CPU one.
#include <cmath>
#include <cstring>

#include "Common.cuh"
#include "trainscope/kernels/CudaNumeric.h"

namespace ts::kernels::cuda {

namespace {
__global__ void floatToBf16K(const float* x, uint16_t* y, int64_t n) {
  TS_GRID_LOOP(i, n) y[i] = ts::kernels::floatToBf16(x[i]);
}
__global__ void bf16ToFloatK(const uint16_t* x, float* y, int64_t n) {
  TS_GRID_LOOP(i, n) y[i] = ts::kernels::bf16ToFloat(x[i]);
}
__global__ void floatToFp16K(const float* x, uint16_t* y, int64_t n) {
  TS_GRID_LOOP(i, n) y[i] = ts::kernels::floatToFp16(x[i]);
}
__global__ void fp16ToFloatK(const uint16_t* x, float* y, int64_t n) {
  TS_GRID_LOOP(i, n) y[i] = ts::kernels::fp16ToFloat(x[i]);
}
__global__ void floatToFp8K(const float* x, uint8_t* y, int64_t n, Fp8Format f, float scale,
                            bool saturate) {
  TS_GRID_LOOP(i, n) y[i] = ts::kernels::floatToFp8(x[i] * scale, f, saturate);
}
__global__ void fp8ToFloatK(const uint8_t* x, float* y, int64_t n, Fp8Format f, float scaleInv) {
  TS_GRID_LOOP(i, n) y[i] = ts::kernels::fp8ToFloat(x[i], f) * scaleInv;
}

// |x| bits order like magnitudes and NaN bits exceed inf's: an unsigned max is amax with NaN
// propagation, and integer max is exact, so the result does not depend on the order.
__device__ inline unsigned absBits(float v) {
  return __float_as_uint(v) & 0x7FFFFFFFu;
}
__device__ inline unsigned blockMaxU(unsigned v) {
  __shared__ unsigned sh[32];
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0u;
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__global__ void amaxK(const float* x, int64_t n, unsigned* out) {
  unsigned m = 0;
  TS_GRID_LOOP(i, n) m = max(m, absBits(x[i]));
  m = blockMaxU(m);
  if (threadIdx.x == 0) atomicMax(out, m);
}

__global__ void quantizeInt8RowsK(const float* x, int8_t* q, float* scales, int64_t rows,
                                  int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    unsigned m = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = max(m, absBits(xr[c]));
    const float a = __uint_as_float(blockMaxU(m));
    const bool finite = a <= 3.40282347e38f;
    const float inv = (finite && a > 0.0f) ? 127.0f / a : 0.0f;
    if (threadIdx.x == 0) scales[r] = finite ? a / 127.0f : __uint_as_float(0x7FC00000u);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float v = rintf(xr[c] * inv);
      v = v > 127.0f ? 127.0f : v;
      v = v < -127.0f ? -127.0f : v;
      q[r * cols + c] = static_cast<int8_t>(v == v ? v : 0.0f);
    }
    __syncthreads();  // blockMaxU's shared buffer is reused by the next row
  }
}
__global__ void dequantizeInt8RowsK(const int8_t* q, const float* scales, float* y, int64_t n,
                                    int64_t cols) {
  TS_GRID_LOOP(i, n) y[i] = float(q[i]) * scales[i / cols];
}
}  // namespace

void floatToBf16(const float* x, uint16_t* y, int64_t n) {
  if (n <= 0) return;
  floatToBf16K<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, y, n);
  TS_CUDA_LAUNCHED("floatToBf16");
}
void bf16ToFloat(const uint16_t* x, float* y, int64_t n) {
  if (n <= 0) return;
  bf16ToFloatK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, y, n);
  TS_CUDA_LAUNCHED("bf16ToFloat");
}
void floatToFp16(const float* x, uint16_t* y, int64_t n) {
  if (n <= 0) return;
  floatToFp16K<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, y, n);
  TS_CUDA_LAUNCHED("floatToFp16");
}
void fp16ToFloat(const uint16_t* x, float* y, int64_t n) {
  if (n <= 0) return;
  fp16ToFloatK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, y, n);
  TS_CUDA_LAUNCHED("fp16ToFloat");
}
void floatToFp8(const float* x, uint8_t* y, int64_t n, Fp8Format f, float scale, bool saturate) {
  if (n <= 0) return;
  floatToFp8K<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, y, n, f, scale, saturate);
  TS_CUDA_LAUNCHED("floatToFp8");
}
void fp8ToFloat(const uint8_t* x, float* y, int64_t n, Fp8Format f, float scaleInv) {
  if (n <= 0) return;
  fp8ToFloatK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(x, y, n, f, scaleInv);
  TS_CUDA_LAUNCHED("fp8ToFloat");
}

float amax(const float* x, int64_t n) {
  if (n <= 0) return 0.0f;
  unsigned* d = nullptr;
  TS_CUDA_CHECK(cudaMalloc(&d, sizeof(unsigned)));
  unsigned h = 0;
  try {
    TS_CUDA_CHECK(cudaMemset(d, 0, sizeof(unsigned)));
    const unsigned grid =
        gridFor(n, kElementwiseBlock) < 1024 ? gridFor(n, kElementwiseBlock) : 1024;
    amaxK<<<grid, kElementwiseBlock>>>(x, n, d);
    TS_CUDA_LAUNCHED("amax");
    TS_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(unsigned), cudaMemcpyDeviceToHost));
  } catch (...) {
    cudaFree(d);
    throw;
  }
  TS_CUDA_CHECK(cudaFree(d));
  float out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

void quantizeInt8Rows(const float* x, int8_t* q, float* scales, int64_t rows, int64_t cols) {
  if (rows <= 0) return;
  if (cols <= 0) {  // empty rows: scale 0, as on the CPU
    TS_CUDA_CHECK(cudaMemset(scales, 0, size_t(rows) * sizeof(float)));
    return;
  }
  const unsigned grid = unsigned(rows < 65535 ? rows : 65535);
  quantizeInt8RowsK<<<grid, kElementwiseBlock>>>(x, q, scales, rows, cols);
  TS_CUDA_LAUNCHED("quantizeInt8Rows");
}
void dequantizeInt8Rows(const int8_t* q, const float* scales, float* y, int64_t rows,
                        int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t n = rows * cols;
  dequantizeInt8RowsK<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(q, scales, y, n, cols);
  TS_CUDA_LAUNCHED("dequantizeInt8Rows");
}

}  // namespace ts::kernels::cuda
