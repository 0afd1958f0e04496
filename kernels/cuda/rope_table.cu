// Rotary position embedding from a precomputed (T, RD) cos | sin table (OpList.h). One thread
// per (row, i) pair index rotates that pair in every head; consecutive threads touch
// consecutive i, so loads and stores coalesce. The pass-through dims RD..HD-1 are copied by a
// second loop when not in place.
#include <string>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void rotateTable(float* dst, const float* src, int64_t rows, int T, int NH, int HD,
                            int RD, int dstStride, int srcStride, const float* table, float sign) {
  const int half = RD / 2;
  TS_GRID_LOOP(idx, rows * half) {
    const int i = int(idx % half);
    const int64_t row = idx / half;
    const int t = int(row % T);
    const float c = table[int64_t(t) * RD + i], s = sign * table[int64_t(t) * RD + half + i];
    for (int h = 0; h < NH; ++h) {
      const float* x = src + row * srcStride + int64_t(h) * HD;
      float* y = dst + row * dstStride + int64_t(h) * HD;
      const float x1 = x[i], x2 = x[i + half];
      y[i] = x1 * c - x2 * s;
      y[i + half] = x2 * c + x1 * s;
    }
  }
}

__global__ void copyTail(float* dst, const float* src, int64_t rows, int NH, int HD, int RD,
                         int dstStride, int srcStride) {
  const int tail = HD - RD;
  TS_GRID_LOOP(idx, rows * NH * tail) {
    const int d = RD + int(idx % tail);
    const int64_t rh = idx / tail, row = rh / NH;
    const int h = int(rh % NH);
    dst[row * dstStride + int64_t(h) * HD + d] = src[row * srcStride + int64_t(h) * HD + d];
  }
}

void launch(float* dst, const float* src, int B, int T, int NH, int HD, int RD, int dstStride,
            int srcStride, const float* table, float sign, const char* what) {
  if (RD % 2 != 0 || RD < 0 || RD > HD)
    throw std::invalid_argument(std::string(what) + ": rotary dims RD = " + std::to_string(RD) +
                                " must be even and at most the head dim " + std::to_string(HD));
  if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return;
  const int64_t rows = int64_t(B) * T;
  if (RD > 0)
    rotateTable<<<gridFor(rows * (RD / 2), kElementwiseBlock), kElementwiseBlock>>>(
        dst, src, rows, T, NH, HD, RD, dstStride, srcStride, table, sign);
  if (RD < HD && dst != src)
    copyTail<<<gridFor(rows * NH * (HD - RD), kElementwiseBlock), kElementwiseBlock>>>(
        dst, src, rows, NH, HD, RD, dstStride, srcStride);
  TS_CUDA_LAUNCHED(what);
}
}  // namespace

void ropeTableForward(float* out, const float* inp, int B, int T, int NH, int HD, int RD,
                      int outStride, int inpStride, const float* table) {
  launch(out, inp, B, T, NH, HD, RD, outStride, inpStride, table, 1.0f, "ropeTableForward");
}

void ropeTableBackward(float* dinp, const float* dout, int B, int T, int NH, int HD, int RD,
                       int dinpStride, int doutStride, const float* table) {
  launch(dinp, dout, B, T, NH, HD, RD, dinpStride, doutStride, table, -1.0f, "ropeTableBackward");
}

}  // namespace ts::kernels::cuda
