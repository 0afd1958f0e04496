// GELU, tanh approximation (GPT-2), in the equivalent sigmoid form x * sigmoid(2u).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
constexpr float kS = 0.7978845608028654f;
constexpr float kA = 0.044715f;
__global__ void geluF(float* out, const float* inp, int64_t n) {
  TS_GRID_LOOP(i, n) {
    const float x = inp[i];
    out[i] = x / (1.0f + expf(-2.0f * kS * (x + kA * x * x * x)));
  }
}
__global__ void geluB(float* dinp, const float* inp, const float* dout, int64_t n) {
  TS_GRID_LOOP(i, n) {
    const float x = fminf(fmaxf(inp[i], -10.0f), 10.0f);
    const float e = expf(-2.0f * kS * (x + kA * x * x * x));
    const float s = 1.0f / (1.0f + e);
    dinp[i] = (s + x * 2.0f * s * (e * s) * kS * (1.0f + 3.0f * kA * x * x)) * dout[i];
  }
}
}  // namespace

void geluForward(float* out, const float* inp, int64_t n) {
  if (n <= 0) return;
  geluF<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, inp, n);
  TS_CUDA_LAUNCHED("geluForward");
}

void geluBackward(float* dinp, const float* inp, const float* dout, int64_t n) {
  if (n <= 0) return;
  geluB<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(dinp, inp, dout, n);
  TS_CUDA_LAUNCHED("geluBackward");
}

}  // namespace ts::kernels::cuda
