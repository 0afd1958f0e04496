// Rotary position embedding from a precomputed (T, RD) table of cosines then sines (OpList.h):
// the rope types' scalings live in the table, so this only rotates. Partial rotary (RD < HD)
// rotates each head's first RD dims and copies the rest when not in place.
#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {

void checkRotaryDims(int HD, int RD, const char* what) {
  if (RD % 2 != 0 || RD < 0 || RD > HD)
    throw std::invalid_argument(std::string(what) + ": rotary dims RD = " + std::to_string(RD) +
                                " must be even and at most the head dim " + std::to_string(HD));
}

// dst = R(sign * angle) src over the (B, T, NH, HD) view. Each i touches only elements i and
// i + half of a head, so in place (dst == src) is safe, also when vectorised.
void rotateTable(float* dst, const float* src, int B, int T, int NH, int HD, int RD, int dstStride,
                 int srcStride, const float* table, float sign) {
  if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return;
  const int half = RD / 2;
  const bool copyTail = RD < HD && dst != src;
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(B) * T * NH * HD))
  for (int64_t row = 0; row < int64_t(B) * T; ++row) {
    const int t = int(row % T);
    const float* cs = table + int64_t(t) * RD;
    const float* sn = cs + half;
    for (int h = 0; h < NH; ++h) {
      const float* x = src + row * srcStride + int64_t(h) * HD;
      float* y = dst + row * dstStride + int64_t(h) * HD;
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float x1 = x[i], x2 = x[i + half];
        const float c = cs[i], s = sign * sn[i];
        y[i] = x1 * c - x2 * s;
        y[i + half] = x2 * c + x1 * s;
      }
      if (copyTail) std::copy(x + RD, x + HD, y + RD);
    }
  }
}

}  // namespace

void ropeTableForward(float* out, const float* inp, int B, int T, int NH, int HD, int RD,
                      int outStride, int inpStride, const float* table) {
  checkRotaryDims(HD, RD, "ropeTableForward");
  rotateTable(out, inp, B, T, NH, HD, RD, outStride, inpStride, table, 1.0f);
}

void ropeTableBackward(float* dinp, const float* dout, int B, int T, int NH, int HD, int RD,
                       int dinpStride, int doutStride, const float* table) {
  checkRotaryDims(HD, RD, "ropeTableBackward");
  rotateTable(dinp, dout, B, T, NH, HD, RD, dinpStride, doutStride, table, -1.0f);
}

}  // namespace ts::kernels::cpu
