#pragma once
// The CUDA twins of CpuOps.h, one per file in kernels/cuda/, same signatures and semantics;
// every pointer is device memory. They run on the default stream and return without
// synchronizing (except sumSquares, which returns a host value). Launch errors throw
// std::runtime_error. Reductions use fixed orders (no float atomics): deterministic.
#include <cstdint>

namespace ts::kernels::cuda {

void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA, bool transB,
            float alpha, float beta);
void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta);

void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                      const float* bias, int N, int C, float eps);
void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, const float* mean, const float* rstd,
                       int N, int C);

void geluForward(float* out, const float* inp, int64_t n);
void geluBackward(float* dinp, const float* inp, const float* dout, int64_t n);
void reluForward(float* out, const float* inp, int64_t n);
void reluBackward(float* dinp, const float* out, const float* dout, int64_t n);

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH);
void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH);

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);
void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH);

void crossEntropyForwardBackward(float* losses, float* dlogits, const float* logits,
                                 const int32_t* targets, int N, int V, float dloss);

void embeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                      int T, int C);
void embeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                       int T, int C);

void residualForward(float* out, const float* a, const float* b, int64_t n);
void accumulate(float* y, const float* x, int64_t n);
void scale(float* x, int64_t n, float s);

void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int64_t step);
void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
               float weight_decay);
double sumSquares(const float* x, int64_t n);

}  // namespace ts::kernels::cuda
