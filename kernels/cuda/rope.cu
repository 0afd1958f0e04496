// Rotary position embedding, rotate_half convention (OpList.h). One thread per (row, i) pair
// index computes its angle once in double (as the CPU table does) and rotates that pair in
// every head; consecutive threads touch consecutive i, so loads and stores coalesce.
#include <string>

#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void rotate(float* dst, const float* src, int64_t rows, int T, int NH, int HD,
                       int dstStride, int srcStride, double theta, float sign) {
  const int half = HD / 2;
  TS_GRID_LOOP(idx, rows * half) {
    const int i = int(idx % half);
    const int64_t row = idx / half;
    const int t = int(row % T);
    const double a = double(t) * pow(theta, -2.0 * i / HD);
    const float c = float(cos(a)), s = sign * float(sin(a));
    for (int h = 0; h < NH; ++h) {
      const float* x = src + row * srcStride + int64_t(h) * HD;
      float* y = dst + row * dstStride + int64_t(h) * HD;
      const float x1 = x[i], x2 = x[i + half];
      y[i] = x1 * c - x2 * s;
      y[i + half] = x2 * c + x1 * s;
    }
  }
}

void launch(float* dst, const float* src, int B, int T, int NH, int HD, int dstStride,
            int srcStride, float theta, float sign, const char* what) {
  if (HD % 2 != 0)
    throw std::invalid_argument(std::string(what) + ": head dim must be even, got " +
                                std::to_string(HD));
  if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return;
  const int64_t rows = int64_t(B) * T;
  rotate<<<gridFor(rows * (HD / 2), kElementwiseBlock), kElementwiseBlock>>>(
      dst, src, rows, T, NH, HD, dstStride, srcStride, double(theta), sign);
  TS_CUDA_LAUNCHED(what);
}
}  // namespace

void ropeForward(float* out, const float* inp, int B, int T, int NH, int HD, int outStride,
                 int inpStride, float theta) {
  launch(out, inp, B, T, NH, HD, outStride, inpStride, theta, 1.0f, "ropeForward");
}

void ropeBackward(float* dinp, const float* dout, int B, int T, int NH, int HD, int dinpStride,
                  int doutStride, float theta) {
  launch(dinp, dout, B, T, NH, HD, dinpStride, doutStride, theta, -1.0f, "ropeBackward");
}

}  // namespace ts::kernels::cuda
