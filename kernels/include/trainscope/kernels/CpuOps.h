#pragma once
// The CPU ops as free functions, one per file in kernels/cpu/. Each has the same signature as
// its CUDA twin in CudaOps.h (ts::kernels::cuda) and the same semantics as the Backend method
// of the same name (see Backend.h). All are OpenMP-threaded with the current
// omp_get_max_threads() and deterministic for a fixed thread count (fixed-order reductions).
#include <cstdint>
#include <string>

namespace ts::kernels::cpu {

void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA, bool transB,
            float alpha, float beta);

// bf16 operands (bit patterns), fp32 accumulation and output; otherwise as matmul. Runs
// oneDNN's bf16 kernel where this CPU has one (matmulBf16Native), else matmulBf16Emulated.
void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta);
// Widens the operands to fp32 (exact) and runs sgemm: the same products, fp32 sums.
void matmulBf16Emulated(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K,
                        bool transA, bool transB, float alpha, float beta);
// Whether oneDNN has a (non-reference) bf16 matmul kernel for this CPU; `impl` gets its
// implementation name, or why there is none.
bool matmulBf16Native(std::string* impl = nullptr);

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

}  // namespace ts::kernels::cpu
