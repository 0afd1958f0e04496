// Token + position embedding. Backward: one thread per channel walks the tokens in order, so
// repeated tokens never race and the sum order is fixed (deterministic, no atomics).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cuda {

namespace {
__global__ void embFwd(float* out, const int32_t* tokens, const float* wte, const float* wpe, int T,
                       int C, int64_t total) {
  TS_GRID_LOOP(idx, total) {
    const int c = int(idx % C);
    const int64_t bt = idx / C;
    out[idx] = wte[int64_t(tokens[bt]) * C + c] + (wpe ? wpe[(bt % T) * C + c] : 0.0f);
  }
}

__global__ void embFwdBf16(float* out, const int32_t* tokens, const uint16_t* wte,
                           const uint16_t* wpe, int T, int C, int64_t total) {
  TS_GRID_LOOP(idx, total) {
    const int c = int(idx % C);
    const int64_t bt = idx / C;
    out[idx] = ts::kernels::bf16ToFloat(wte[int64_t(tokens[bt]) * C + c]) +
               (wpe ? ts::kernels::bf16ToFloat(wpe[(bt % T) * C + c]) : 0.0f);
  }
}

__global__ void embBwdTokens(float* dwte, const float* dout, const int32_t* tokens, int BT, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) dwte[int64_t(tokens[bt]) * C + c] += dout[int64_t(bt) * C + c];
}

__global__ void embBwdPositions(float* dwpe, const float* dout, int B, int T, int C) {
  TS_GRID_LOOP(idx, int64_t(T) * C) {
    float acc = 0.0f;
    for (int b = 0; b < B; ++b) acc += dout[int64_t(b) * T * C + idx];
    dwpe[idx] += acc;
  }
}
}  // namespace

void embeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                      int T, int C) {
  const int64_t total = int64_t(B) * T * C;
  if (total <= 0) return;
  embFwd<<<gridFor(total, kElementwiseBlock), kElementwiseBlock>>>(out, tokens, wte, wpe, T, C,
                                                                   total);
  TS_CUDA_LAUNCHED("embeddingForward");
}

void embeddingForwardBf16(float* out, const int32_t* tokens, const uint16_t* wte,
                          const uint16_t* wpe, int B, int T, int C) {
  const int64_t total = int64_t(B) * T * C;
  if (total <= 0) return;
  embFwdBf16<<<gridFor(total, kElementwiseBlock), kElementwiseBlock>>>(out, tokens, wte, wpe, T, C,
                                                                       total);
  TS_CUDA_LAUNCHED("embeddingForwardBf16");
}

void embeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                       int T, int C) {
  if (int64_t(B) * T * C <= 0) return;
  if (dwte) embBwdTokens<<<(C + 127) / 128, 128>>>(dwte, dout, tokens, B * T, C);
  if (dwpe)
    embBwdPositions<<<gridFor(int64_t(T) * C, kElementwiseBlock), kElementwiseBlock>>>(dwpe, dout,
                                                                                       B, T, C);
  TS_CUDA_LAUNCHED("embeddingBackward");
}

}  // namespace ts::kernels::cuda
