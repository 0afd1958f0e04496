// CUDA twins of kernels/cpu/int8_rows.cpp: one block per row. The row's absmax is exact in any
// order; the scale, its inverse and every code use the CPU's fp32 operations, so the codes and
// scales equal the CPU's bit for bit.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr int kRowBlock = 256;

__global__ void quantizeRowsInt8K(int8_t* q, float* scale, const float* x, int64_t cols,
                                  bool keepNonzero) {
  const int64_t i = blockIdx.x;
  const float* xr = x + i * cols;
  float amax = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) amax = fmaxf(amax, fabsf(xr[j]));
  amax = blockMax(amax);
  const float s = __fdiv_rn(amax, 127.f);
  if (threadIdx.x == 0) scale[i] = s;
  const float inv = s > 0.f ? __fdiv_rn(1.f, s) : 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = fminf(fmaxf(rintf(__fmul_rn(xr[j], inv)), -127.f), 127.f);
    if (keepNonzero && v == 0.f && xr[j] != 0.f) v = xr[j] > 0.f ? 1.f : -1.f;
    q[i * cols + j] = static_cast<int8_t>(v);
  }
}

__global__ void dequantizeRowsInt8K(float* x, const int8_t* q, const float* scale, int64_t rows,
                                    int64_t cols) {
  TS_GRID_LOOP(k, rows * cols) x[k] = __fmul_rn(float(q[k]), scale[k / cols]);
}
}  // namespace

void quantizeRowsInt8(int8_t* q, float* scale, const float* x, int64_t rows, int64_t cols,
                      bool keepNonzero) {
  if (rows <= 0 || cols <= 0) return;
  quantizeRowsInt8K<<<unsigned(rows), kRowBlock>>>(q, scale, x, cols, keepNonzero);
  TS_CUDA_LAUNCHED("quantizeRowsInt8");
}

void dequantizeRowsInt8(float* x, const int8_t* q, const float* scale, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  dequantizeRowsInt8K<<<gridFor(rows * cols, kElementwiseBlock), kElementwiseBlock>>>(x, q, scale,
                                                                                      rows, cols);
  TS_CUDA_LAUNCHED("dequantizeRowsInt8");
}

}  // namespace ts::kernels::cuda
