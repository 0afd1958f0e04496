// CUDA twins of kernels/cpu/centered_rows.cpp: Numeric.h's scalar conversions and plain fp32
// subtract/add, so the values equal the CPU's bit for bit.
#include "Common.cuh"
#include "trainscope/kernels/CudaNumeric.h"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void packCenteredRowsK(uint16_t* y, const float* x, const float* mean, int64_t rows,
                                  int64_t cols, bool fp16) {
  TS_GRID_LOOP(k, rows * cols) {
    const float v = __fsub_rn(x[k], mean[k / cols]);
    y[k] = fp16 ? ts::kernels::floatToFp16(v) : ts::kernels::floatToBf16(v);
  }
}
__global__ void unpackCenteredRowsK(float* x, const uint16_t* y, const float* mean, int64_t rows,
                                    int64_t cols, bool fp16) {
  TS_GRID_LOOP(k, rows * cols) {
    const float v = fp16 ? ts::kernels::fp16ToFloat(y[k]) : ts::kernels::bf16ToFloat(y[k]);
    x[k] = __fadd_rn(v, mean[k / cols]);
  }
}
}  // namespace

void packCenteredRows(uint16_t* y, const float* x, const float* mean, int64_t rows, int64_t cols,
                      bool fp16) {
  if (rows <= 0 || cols <= 0) return;
  packCenteredRowsK<<<gridFor(rows * cols, kElementwiseBlock), kElementwiseBlock>>>(
      y, x, mean, rows, cols, fp16);
  TS_CUDA_LAUNCHED("packCenteredRows");
}

void unpackCenteredRows(float* x, const uint16_t* y, const float* mean, int64_t rows, int64_t cols,
                        bool fp16) {
  if (rows <= 0 || cols <= 0) return;
  unpackCenteredRowsK<<<gridFor(rows * cols, kElementwiseBlock), kElementwiseBlock>>>(
      x, y, mean, rows, cols, fp16);
  TS_CUDA_LAUNCHED("unpackCenteredRows");
}

}  // namespace ts::kernels::cuda
