// GeGLU on rows [gate | up]: one thread per output element, gelu.cu's formulas (the tanh in
// its sigmoid form) times up.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr float kS = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kA = 0.044715f;
__global__ void gegluF(float* out, const float* inp, int64_t n, int F) {
  TS_GRID_LOOP(idx, n) {
    const int64_t row = idx / F, c = idx % F;
    const float x = inp[row * 2 * F + c], u = inp[row * 2 * F + F + c];
    out[idx] = x / (1.0f + expf(-2.0f * kS * (x + kA * x * x * x))) * u;
  }
}
__global__ void gegluB(float* dinp, const float* inp, const float* dout, int64_t n, int F) {
  TS_GRID_LOOP(idx, n) {
    const int64_t row = idx / F, c = idx % F;
    const float g = inp[row * 2 * F + c], u = inp[row * 2 * F + F + c];
    const float gelu = g / (1.0f + expf(-2.0f * kS * (g + kA * g * g * g)));
    const float x = fminf(fmaxf(g, -10.0f), 10.0f);  // as geluB: the tails' derivative is 0 or 1
    const float e = expf(-2.0f * kS * (x + kA * x * x * x));
    const float s = 1.0f / (1.0f + e);
    const float d = s + x * 2.0f * s * (e * s) * kS * (1.0f + 3.0f * kA * x * x);
    dinp[row * 2 * F + c] = dout[idx] * u * d;
    dinp[row * 2 * F + F + c] = dout[idx] * gelu;
  }
}
}  // namespace

void gegluForward(float* out, const float* inp, int N, int F) {
  const int64_t n = int64_t(N) * F;
  if (n <= 0) return;
  gegluF<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, inp, n, F);
  TS_CUDA_LAUNCHED("gegluForward");
}

void gegluBackward(float* dinp, const float* inp, const float* dout, int N, int F) {
  const int64_t n = int64_t(N) * F;
  if (n <= 0) return;
  gegluB<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(dinp, inp, dout, n, F);
  TS_CUDA_LAUNCHED("gegluBackward");
}

}  // namespace ts::kernels::cuda
