// Rotary position embedding, rotate_half convention (OpList.h). The cos/sin table (T x HD/2,
// angles in double) is cached for the last (T, HD, theta): every layer rotates q and k with
// the same one, forward and backward, so it is computed once per shape, not per call.
#include <omp.h>

#include <cmath>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

namespace {

struct RopeTable {
  int T = 0, HD = 0;
  float theta = 0.0f;
  std::vector<float> cos, sin;  // [t * half + i]
};

std::shared_ptr<const RopeTable> ropeTable(int T, int HD, float theta) {
  static std::mutex mu;
  static std::shared_ptr<const RopeTable> last;
  std::lock_guard<std::mutex> lock(mu);
  if (last && last->T == T && last->HD == HD && last->theta == theta) return last;
  auto t = std::make_shared<RopeTable>();
  t->T = T;
  t->HD = HD;
  t->theta = theta;
  const int half = HD / 2;
  t->cos.resize(size_t(T) * half);
  t->sin.resize(size_t(T) * half);
  std::vector<double> invFreq(half);
  for (int i = 0; i < half; ++i) invFreq[i] = std::pow(double(theta), -2.0 * i / HD);
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(T) * half * 16))
  for (int p = 0; p < T; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * invFreq[i];
      t->cos[size_t(p) * half + i] = float(std::cos(a));
      t->sin[size_t(p) * half + i] = float(std::sin(a));
    }
  last = t;
  return last;
}

// dst = R(sign * angle) src over the (B, T, NH, HD) view. Each i touches only elements i and
// i + half of a head, so in place (dst == src) is safe, also when vectorised.
void rotate(float* dst, const float* src, int B, int T, int NH, int HD, int dstStride,
            int srcStride, float theta, float sign) {
  if (HD % 2 != 0)
    throw std::invalid_argument("rope: head dim must be even, got " + std::to_string(HD));
  if (B <= 0 || T <= 0 || NH <= 0 || HD <= 0) return;
  const auto table = ropeTable(T, HD, theta);
  const int half = HD / 2;
#pragma omp parallel for schedule(static) if (worthThreading(int64_t(B) * T * NH * HD))
  for (int64_t row = 0; row < int64_t(B) * T; ++row) {
    const int t = int(row % T);
    const float* cs = table->cos.data() + size_t(t) * half;
    const float* sn = table->sin.data() + size_t(t) * half;
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
    }
  }
}

}  // namespace

void ropeForward(float* out, const float* inp, int B, int T, int NH, int HD, int outStride,
                 int inpStride, float theta) {
  rotate(out, inp, B, T, NH, HD, outStride, inpStride, theta, 1.0f);
}

void ropeBackward(float* dinp, const float* dout, int B, int T, int NH, int HD, int dinpStride,
                  int doutStride, float theta) {
  rotate(dinp, dout, B, T, NH, HD, dinpStride, doutStride, theta, -1.0f);
}

}  // namespace ts::kernels::cpu
