// SwiGLU on rows [gate | up]: one thread per output element, the same formulas as the CPU op.
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {
__global__ void swigluF(float* out, const float* inp, int64_t n, int F) {
  TS_GRID_LOOP(idx, n) {
    const int64_t row = idx / F, c = idx % F;
    const float g = inp[row * 2 * F + c], u = inp[row * 2 * F + F + c];
    out[idx] = g / (1.0f + expf(-g)) * u;
  }
}
__global__ void swigluB(float* dinp, const float* inp, const float* dout, int64_t n, int F) {
  TS_GRID_LOOP(idx, n) {
    const int64_t row = idx / F, c = idx % F;
    const float g = inp[row * 2 * F + c], u = inp[row * 2 * F + F + c];
    const float s = 1.0f / (1.0f + expf(-g));
    dinp[row * 2 * F + c] = dout[idx] * u * (s * (1.0f + g * (1.0f - s)));
    dinp[row * 2 * F + F + c] = dout[idx] * (g * s);
  }
}
}  // namespace

void swigluForward(float* out, const float* inp, int N, int F) {
  const int64_t n = int64_t(N) * F;
  if (n <= 0) return;
  swigluF<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, inp, n, F);
  TS_CUDA_LAUNCHED("swigluForward");
}

void swigluBackward(float* dinp, const float* inp, const float* dout, int N, int F) {
  const int64_t n = int64_t(N) * F;
  if (n <= 0) return;
  swigluB<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(dinp, inp, dout, n, F);
  TS_CUDA_LAUNCHED("swigluBackward");
}

}  // namespace ts::kernels::cuda
