// The backend op list: the one place each plain op's signature is written. No include guard:
// an includer defines TS_OP and/or TS_OP_KIND, includes this file, and gets one expansion
// (both macros are #undef'd at the end). From it come the `Op` enum and the `Backend` pure
// virtuals (Backend.h), the ts::kernels::cpu and ts::kernels::cuda free-function declarations
// (CpuOps.h, CudaOps.h) and both backends' forwarding overrides (CpuBackend.cpp,
// CudaBackend.cpp).
//
//   TS_OP_KIND(Kind)                            an `Op` value, what supports()/emulates() take
//   TS_OP(Kind, Ret, name, (params), (args))    one op: Backend::name, cpu::name, cuda::name
//
// Adding an op: one TS_OP entry (after a new TS_OP_KIND if it is a new kind), documented like
// the others, plus kernels/cpu/<op>.cpp defining cpu::name and kernels/cuda/<op>.cu defining
// cuda::name (the sources are globbed). Every entry must have both twins or a CUDA build fails
// to link; supports() says true for a kind unless a backend's override says otherwise.
//
// All tensors are dense, row-major and fp32 unless the op says otherwise; pointers live in the
// backend's memory (host memory for the CPU), and engine code reaches that memory only through
// these ops and Backend's copies (the guarded test backend enforces it). Keep the kinds' order:
// new kinds go at the end. This file stays C++17 (the .cu files include it); includers need
// Fp8Format (Numeric.h).

#include "trainscope/kernels/AttentionOptions.h"  // guarded: the masked attention ops take it

#ifndef TS_OP
#define TS_OP(kind, ret, name, params, args)
#endif
#ifndef TS_OP_KIND
#define TS_OP_KIND(kind)
#endif

// C[M,N] = alpha * op(A) * op(B) + beta * C. op(A) is MxK, op(B) is KxN; with transA, A is
// stored KxM; with transB, B is stored NxK. Row-major, tightly packed.
TS_OP_KIND(Matmul)
TS_OP(Matmul, void, matmul,
      (float* C, const float* A, const float* B, int M, int N, int K, bool transA, bool transB,
       float alpha, float beta),
      (C, A, B, M, N, K, transA, transB, alpha, beta))

// As matmul on sub-matrices: lda / ldb / ldc are the stored row lengths (>= the used width),
// so a GEMM can read or write a column slice of a wider matrix (a LoRA adapter's rows of a
// packed q|k|v output). Kind Matmul: supported wherever matmul is.
TS_OP(Matmul, void, matmulStrided,
      (float* C, int64_t ldc, const float* A, int64_t lda, const float* B, int64_t ldb, int M,
       int N, int K, bool transA, bool transB, float alpha, float beta),
      (C, ldc, A, lda, B, ldb, M, N, K, transA, transB, alpha, beta))

// As matmul with bf16 operands (uint16_t bit patterns), fp32 accumulation and fp32 C. The CPU
// runs oneDNN's bf16 kernel where it has one, else widens to fp32 (Backend::emulates).
TS_OP_KIND(MatmulBF16)
TS_OP(MatmulBF16, void, matmulBf16,
      (float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
       bool transB, float alpha, float beta),
      (C, A, B, M, N, K, transA, transB, alpha, beta))

// LayerNorm over the last dim C for N rows. mean/rstd (N each) are saved for backward.
TS_OP_KIND(LayerNorm)
TS_OP(LayerNorm, void, layernormForward,
      (float* out, float* mean, float* rstd, const float* inp, const float* weight,
       const float* bias, int N, int C, float eps),
      (out, mean, rstd, inp, weight, bias, N, C, eps))
// Accumulates (+=) into dinp, dweight, dbias (dweight / dbias null: frozen, not computed).
TS_OP(LayerNorm, void, layernormBackward,
      (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
       const float* weight, const float* mean, const float* rstd, int N, int C),
      (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))

// GELU (tanh approximation, as GPT-2) and ReLU. Backward writes (=) dinp = f'(inp) * dout.
TS_OP_KIND(Gelu)
TS_OP(Gelu, void, geluForward, (float* out, const float* inp, int64_t n), (out, inp, n))
TS_OP(Gelu, void, geluBackward, (float* dinp, const float* inp, const float* dout, int64_t n),
      (dinp, inp, dout, n))
TS_OP_KIND(Relu)
TS_OP(Relu, void, reluForward, (float* out, const float* inp, int64_t n), (out, inp, n))
TS_OP(Relu, void, reluBackward, (float* dinp, const float* out, const float* dout, int64_t n),
      (dinp, out, dout, n))

// Causal self-attention, naive. qkv is (B, T, 3C) [q | k | v], heads NH, head dim C/NH.
// att (B, NH, T, T) holds the softmax probabilities (saved for backward); out is (B, T, C).
TS_OP_KIND(Attention)
TS_OP(Attention, void, attentionForward,
      (float* out, float* att, const float* qkv, int B, int T, int C, int NH),
      (out, att, qkv, B, T, C, NH))
// Writes (=) dqkv; datt is scratch of the size of att.
TS_OP(Attention, void, attentionBackward,
      (float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B,
       int T, int C, int NH),
      (dqkv, datt, dout, qkv, att, B, T, C, NH))

// Flash attention: lse (B, NH, T) is the only thing saved. Backward recomputes P and writes
// (=) dqkv. The CUDA twin takes head dims up to 256 (beyond, it throws std::runtime_error).
TS_OP_KIND(FlashAttention)
TS_OP(FlashAttention, void, flashAttentionForward,
      (float* out, float* lse, const float* qkv, int B, int T, int C, int NH),
      (out, lse, qkv, B, T, C, NH))
TS_OP(FlashAttention, void, flashAttentionBackward,
      (float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
       int T, int C, int NH),
      (dqkv, dout, out, lse, qkv, B, T, C, NH))

// Fused softmax cross-entropy over V classes for N rows. losses[i] = -log p[target];
// dlogits = (softmax - onehot) * dloss (dloss per row, e.g. 1/num_target_tokens; targets < 0
// are ignored: loss 0, gradient 0). dlogits may alias logits.
TS_OP_KIND(CrossEntropy)
TS_OP(CrossEntropy, void, crossEntropyForwardBackward,
      (float* losses, float* dlogits, const float* logits, const int32_t* targets, int N, int V,
       float dloss),
      (losses, dlogits, logits, targets, N, V, dloss))

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; backward accumulates (+=) into dwte, dwpe
// (either may be null: frozen).
// wpe / dwpe may be null: no position table (rotary positions, llama).
TS_OP_KIND(Embedding)
TS_OP(Embedding, void, embeddingForward,
      (float* out, const int32_t* tokens, const float* wte, const float* wpe, int B, int T, int C),
      (out, tokens, wte, wpe, B, T, C))
TS_OP(Embedding, void, embeddingBackward,
      (float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B, int T, int C),
      (dwte, dwpe, dout, tokens, B, T, C))
// embeddingForward from bf16 tables (the stored weights under bf16 GEMMs): each value widened
// exactly, the sum in fp32, so it equals embeddingForward on the upcast tables bit for bit.
TS_OP(Embedding, void, embeddingForwardBf16,
      (float* out, const int32_t* tokens, const uint16_t* wte, const uint16_t* wpe, int B, int T,
       int C),
      (out, tokens, wte, wpe, B, T, C))

// out = a + b (out may alias a or b).
TS_OP_KIND(Residual)
TS_OP(Residual, void, residualForward, (float* out, const float* a, const float* b, int64_t n),
      (out, a, b, n))
// y += x
TS_OP(Residual, void, accumulate, (float* y, const float* x, int64_t n), (y, x, n))

// AdamW with decoupled weight decay (PyTorch semantics, bias-corrected with `step` >= 1).
TS_OP_KIND(AdamW)
TS_OP(AdamW, void, adamwUpdate,
      (float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
       float beta2, float eps, float weight_decay, int64_t step),
      (param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step))
// SGD with momentum (PyTorch semantics: buf = mu*buf + g (+wd*p); p -= lr*buf).
TS_OP_KIND(SgdMomentum)
TS_OP(SgdMomentum, void, sgdUpdate,
      (float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
       float weight_decay),
      (param, grad, buf, n, lr, momentum, weight_decay))
// Sum of squares in double (for the global gradient norm across tensors). The CUDA twin
// synchronizes and returns a host value.
TS_OP_KIND(GradNorm)
TS_OP(GradNorm, double, sumSquares, (const float* x, int64_t n), (x, n))
// As sumSquares over n 16-bit values (bf16, or fp16 when `fp16`), each widened exactly: the
// norm of a 16-bit policy's whole gradient buffer in one call (one synchronization on CUDA,
// where opening each tensor's fp32 window for sumSquares took one per tensor).
TS_OP(GradNorm, double, sumSquaresHalf, (const uint16_t* x, int64_t n, bool fp16), (x, n, fp16))
// x *= s
TS_OP_KIND(Scale)
TS_OP(Scale, void, scale, (float* x, int64_t n, float s), (x, n, s))

// Bulk format conversions, bit-exact to Numeric.h's scalar functions element by element (RNE;
// the formats' NaN/inf/saturation rules are listed there). n <= 0 is a no-op. 16-bit values are
// uint16_t bit patterns, fp8 values uint8_t. Also callable directly as the cpu::/cuda:: free
// functions of Numeric.h / CudaNumeric.h (same signatures, default arguments there).
TS_OP_KIND(Convert)
TS_OP(Convert, void, floatToBf16, (const float* x, uint16_t* y, int64_t n), (x, y, n))
TS_OP(Convert, void, bf16ToFloat, (const uint16_t* x, float* y, int64_t n), (x, y, n))
TS_OP(Convert, void, floatToFp16, (const float* x, uint16_t* y, int64_t n), (x, y, n))
TS_OP(Convert, void, fp16ToFloat, (const uint16_t* x, float* y, int64_t n), (x, y, n))
// y = fp8(x * scale); out-of-range values saturate to +-max when `saturate`, else per format.
TS_OP(Convert, void, floatToFp8,
      (const float* x, uint8_t* y, int64_t n, Fp8Format f, float scale, bool saturate),
      (x, y, n, f, scale, saturate))
// y = float(x) * scaleInv.
TS_OP(Convert, void, fp8ToFloat,
      (const uint8_t* x, float* y, int64_t n, Fp8Format f, float scaleInv), (x, y, n, f, scaleInv))

// RMSNorm (LLaMA) over the last dim C for N rows: out = x * rstd * weight with
// rstd = 1/sqrt(mean(x^2) + eps), saved for backward (N floats). No mean, no bias.
TS_OP_KIND(RmsNorm)
TS_OP(RmsNorm, void, rmsnormForward,
      (float* out, float* rstd, const float* inp, const float* weight, int N, int C, float eps),
      (out, rstd, inp, weight, N, C, eps))
// Accumulates (+=) into dinp and dweight, as layernormBackward does (the residual stream's
// gradient and micro-batch weight gradients both sum contributions).
TS_OP(RmsNorm, void, rmsnormBackward,
      (float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
       const float* rstd, int N, int C),
      (dinp, dweight, dout, inp, weight, rstd, N, C))

// Rotary position embedding in the Hugging Face `rotate_half` convention (transformers'
// LlamaRotaryEmbedding + apply_rotary_pos_emb), not GPT-J's interleaved pairs. For an even
// head dim HD with half = HD/2, inv_freq[i] = theta^(-2i/HD) and angle(t, i) = t * inv_freq[i]
// for positions t = 0..T-1; cos/sin repeat over both halves, rotate_half(x) = cat(-x2, x1):
//   out[i] = x[i] cos - x[i+half] sin,  out[i+half] = x[i+half] cos + x[i] sin   (i < half).
// The (B, T, NH, HD) tensor's element (b, t, h, d) is at p[(b*T + t) * stride + h*HD + d],
// with one stride for the destination and one for the source: the q heads or the k heads of a
// packed qkv buffer rotate in place by passing qkv (or qkv + NH*HD) and the qkv row width.
// out may be inp with equal strides (in place); otherwise they must not overlap. Elements
// outside the view are not touched. Angles are computed in double and sin/cos rounded to
// float (transformers computes inv_freq in fp32, so its angles drift at large positions).
// An odd HD throws std::invalid_argument.
TS_OP_KIND(Rope)
TS_OP(Rope, void, ropeForward,
      (float* out, const float* inp, int B, int T, int NH, int HD, int outStride, int inpStride,
       float theta),
      (out, inp, B, T, NH, HD, outStride, inpStride, theta))
// The transpose rotation (angle -> -angle), written (=): dinp = R(t)^T dout. dinp may be dout
// with equal strides (in place).
TS_OP(Rope, void, ropeBackward,
      (float* dinp, const float* dout, int B, int T, int NH, int HD, int dinpStride, int doutStride,
       float theta),
      (dinp, dout, B, T, NH, HD, dinpStride, doutStride, theta))

// SwiGLU on a fused gate/up projection: inp is (N, 2F), each row [gate | up] (one GEMM against
// the concatenated weights yields it); out (N, F) = silu(gate) * up, silu(g) = g sigmoid(g).
TS_OP_KIND(SwiGlu)
TS_OP(SwiGlu, void, swigluForward, (float* out, const float* inp, int N, int F), (out, inp, N, F))
// Writes (=) dinp (N, 2F) as [dgate | dup]: dgate = dout * up * silu'(gate),
// dup = dout * silu(gate).
TS_OP(SwiGlu, void, swigluBackward,
      (float* dinp, const float* inp, const float* dout, int N, int F), (dinp, inp, dout, N, F))

// Grouped-query causal self-attention (GQA; MQA for KVH = 1), naive: KVH key/value heads
// shared by NH query heads (NH % KVH == 0), head dim HD = C/NH. qkv is (B, T, (NH + 2*KVH)*HD)
// laid out [q heads | k heads | v heads]; query head h reads kv head h / (NH/KVH). out
// (B, T, C) and att (B, NH, T, T) as attentionForward, which is the KVH == NH case (it calls
// this, so the two agree bitwise). NH not a multiple of KVH throws std::invalid_argument.
TS_OP_KIND(AttentionGqa)
TS_OP(AttentionGqa, void, attentionGqaForward,
      (float* out, float* att, const float* qkv, int B, int T, int C, int NH, int KVH),
      (out, att, qkv, B, T, C, NH, KVH))
// Writes (=) dqkv (qkv's layout); a kv head's dk and dv sum over the NH/KVH query heads that
// read it. datt is scratch of the size of att.
TS_OP(AttentionGqa, void, attentionGqaBackward,
      (float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B,
       int T, int C, int NH, int KVH),
      (dqkv, datt, dout, qkv, att, B, T, C, NH, KVH))

// Flash attention with KVH kv heads: qkv as attentionGqaForward, lse (B, NH, T) as
// flashAttentionForward (the KVH == NH case, bitwise). Backward writes (=) dqkv, summing dk/dv
// over each kv head's query heads.
TS_OP_KIND(FlashAttentionGqa)
TS_OP(FlashAttentionGqa, void, flashAttentionGqaForward,
      (float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH),
      (out, lse, qkv, B, T, C, NH, KVH))
TS_OP(FlashAttentionGqa, void, flashAttentionGqaBackward,
      (float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
       int T, int C, int NH, int KVH),
      (dqkv, dout, out, lse, qkv, B, T, C, NH, KVH))

// max |x| over n values, returned to the host (0 for n <= 0): inf if any +-inf, NaN if any NaN
// (a poisoned tensor must not be silently scaled). Exact, so independent of reduction order.
// The CUDA twin synchronizes.
TS_OP_KIND(Amax)
TS_OP(Amax, float, amax, (const float* x, int64_t n), (x, n))

// How many of x[0..n) are inf or NaN, returned to the host (the fp16 loss scaler's overflow
// check). The CUDA twin synchronizes.
TS_OP_KIND(NonFinite)
TS_OP(NonFinite, int64_t, countNonFinite, (const float* x, int64_t n), (x, n))
// As countNonFinite over n 16-bit values (bf16, or fp16 when `fp16`): the overflow check of a
// whole 16-bit gradient buffer in one call.
TS_OP(NonFinite, int64_t, countNonFiniteHalf, (const uint16_t* x, int64_t n, bool fp16),
      (x, n, fp16))

// Sets `bytes` bytes at dst to `value` (memset: zeroing any dtype), and x[0..n) = value.
TS_OP_KIND(Fill)
TS_OP(Fill, void, fill, (void* dst, uint8_t value, int64_t bytes), (dst, value, bytes))
TS_OP(Fill, void, fillF32, (float* x, float value, int64_t n), (x, value, n))

// dst = src for `bytes` bytes, both in the backend's memory, not overlapping (copyToDevice and
// copyToHost cross between host and backend; this stays on the device).
TS_OP_KIND(Copy)
TS_OP(Copy, void, copyOnDevice, (void* dst, const void* src, int64_t bytes), (dst, src, bytes))

// fp8 GEMM operand quantization (Fp8Quant.h has the recipes). quantizeFp8Tiles: current
// scaling over tileRows x tileCols tiles of the row-major rows x cols matrix x (edge tiles
// partial): per tile t (row-major tile order) scale_t = fp8ScaleFor(amax of tile t, f, margin),
// scaleInv[t] = 1 / scale_t, q = fp8(x * scale_t) (saturating); q and deq may be null, deq =
// fp8ToFloat(q) * scaleInv[t] (the GEMM's view). Non-positive sizes are a no-op.
TS_OP_KIND(Fp8Quant)
TS_OP(Fp8Quant, void, quantizeFp8Tiles,
      (const float* x, uint8_t* q, float* deq, float* scaleInv, int64_t rows, int64_t cols,
       int64_t tileRows, int64_t tileCols, Fp8Format f, int margin),
      (x, q, deq, scaleInv, rows, cols, tileRows, tileCols, f, margin))
// deq = fp8ToFloat(q) * scaleInv[tile].
TS_OP(Fp8Quant, void, dequantizeFp8Tiles,
      (const uint8_t* q, const float* scaleInv, float* deq, int64_t rows, int64_t cols,
       int64_t tileRows, int64_t tileCols, Fp8Format f),
      (q, scaleInv, deq, rows, cols, tileRows, tileCols, f))
// One per-tensor scale: deq = fp8ToFloat(fp8(x * scale)) * (1 / scale), the bytes not kept.
TS_OP(Fp8Quant, void, fakeQuantizeFp8,
      (const float* x, float* deq, int64_t n, Fp8Format f, float scale), (x, deq, n, f, scale))

// Dropout with a counter-based mask (DropoutMask.h): out[i] = inp[i] / (1 - p) where element i
// of stream (seed, key) is kept, else 0. The mask is a pure function of (seed, key, i), so the
// backward (the same op on the output gradient), a recomputed forward and a resumed run all see
// the same mask without storing it. out may alias inp; 0 <= p < 1.
TS_OP_KIND(Dropout)
TS_OP(Dropout, void, dropout,
      (float* out, const float* inp, int64_t n, float p, uint64_t seed, uint64_t key),
      (out, inp, n, p, seed, key))

// 8-bit AdamW (bitsandbytes' blockwise 8-bit Adam, reference.md): m and v are uint8 codes into
// the signed / unsigned 256-entry dynamic maps mapM / mapV (DynamicMap.h, sorted ascending),
// in blocks of `block` (<= 1024) elements, each block with an fp32 absmax (absM / absV,
// ceil(n / block) each): value = map[code] * absmax. Per block: dequantize, update
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr sqrt(1-b2^t) / (1-b1^t) * m / (sqrt(v) + sqrt(1-b2^t) eps);  p *= 1 - lr wd
// then the block's new absmax and every value requantized to the nearest map entry of
// value / absmax. An element whose gradient is not finite gets m = v = 0 and no update.
TS_OP_KIND(AdamW8bit)
TS_OP(AdamW8bit, void, adamw8bitUpdate,
      (float* param, const float* grad, uint8_t* qm, uint8_t* qv, float* absM, float* absV,
       const float* mapM, const float* mapV, int64_t n, int block, float lr, float beta1,
       float beta2, float eps, float weight_decay, int64_t step),
      (param, grad, qm, qv, absM, absV, mapM, mapV, n, block, lr, beta1, beta2, eps, weight_decay,
       step))

// NF4 dequantization (Nf4.h; QLoRA's frozen base weights): out[i] = code[q_i] * absmax' of its
// block of 64, absmax' = map2[absmaxCodes[b]] * scales[1 + b / 256] + scales[0] (map2: the signed
// 256-entry dynamic map, backend memory). dequantizeNf4Bf16 writes the same values rounded to
// bf16 (the operand of a bf16 GEMM). One call per quantized tensor, n its element count.
TS_OP_KIND(Nf4)
TS_OP(Nf4, void, dequantizeNf4,
      (float* out, const uint8_t* packed, const uint8_t* absmaxCodes, const float* scales,
       const float* map2, int64_t n),
      (out, packed, absmaxCodes, scales, map2, n))
TS_OP(Nf4, void, dequantizeNf4Bf16,
      (uint16_t * out, const uint8_t* packed, const uint8_t* absmaxCodes, const float* scales,
       const float* map2, int64_t n),
      (out, packed, absmaxCodes, scales, map2, n))

// Knowledge distillation (Hinton et al.), fused per row like crossEntropyForwardBackward: with
// p_t = softmax(teacher / T), q = softmax(logits / T) and the hard softmax s = softmax(logits),
//   ce[i] = -log s[target];  kl[i] = sum_j p_t log(p_t / q)
// and dlogits = dloss * ((1 - alpha) (s - onehot) + alpha T (q - p_t)), the gradient of
// (1 - alpha) ce + alpha T^2 kl. A target < 0 is ignored: ce = kl = 0 and no gradient. dlogits
// may alias logits; teacher is only read.
TS_OP_KIND(Distill)
TS_OP(Distill, void, distillForwardBackward,
      (float* ce, float* kl, float* dlogits, const float* logits, const float* teacher,
       const int32_t* targets, int N, int V, float temperature, float alpha, float dloss),
      (ce, kl, dlogits, logits, teacher, targets, N, V, temperature, alpha, dloss))

// Saved-activation packing (memory.activation_compression, docs/memory.md), so it runs on every
// backend. quantizeRowsInt8: per row scale[i] = absmax(row) / 127 (fp32 division), q =
// clamp(rne(x * (1 / scale)), -127, 127) (0 for an all-zero row); keepNonzero turns a code that
// rounds to 0 for x != 0 into +-1 (a ReLU output's mask survives). dequantizeRowsInt8 writes (=)
// x = q * scale[row].
TS_OP_KIND(Int8Rows)
TS_OP(Int8Rows, void, quantizeRowsInt8,
      (int8_t * q, float* scale, const float* x, int64_t rows, int64_t cols, bool keepNonzero),
      (q, scale, x, rows, cols, keepNonzero))
TS_OP(Int8Rows, void, dequantizeRowsInt8,
      (float* x, const int8_t* q, const float* scale, int64_t rows, int64_t cols),
      (x, q, scale, rows, cols))
// A LayerNorm input in 16 bits, centered: y = half(x - mean[row]) (bf16, or fp16 when `fp16`,
// RNE as the Convert ops), and back: x = float(y) + mean[row] (fp32 add).
TS_OP_KIND(CenteredRows)
TS_OP(CenteredRows, void, packCenteredRows,
      (uint16_t * y, const float* x, const float* mean, int64_t rows, int64_t cols, bool fp16),
      (y, x, mean, rows, cols, fp16))
TS_OP(CenteredRows, void, unpackCenteredRows,
      (float* x, const uint16_t* y, const float* mean, int64_t rows, int64_t cols, bool fp16),
      (x, y, mean, rows, cols, fp16))

// Flash attention on bf16 tensor cores, what the 16-bit policies run on a GPU: shapes, layouts
// and causal masking as flashAttentionGqaForward / Backward, lse (B, NH, T) fp32 the only saved
// state. Numerics (both twins): q, k, v and dout are rounded to bf16 (RNE) and every product
// sums in fp32; probabilities are rounded to bf16 before they multiply v (out, dv), and
// dS = P (dP - D), D_i = sum_d bf16(dout_i) out_i, before it multiplies k (dq) and q (dk); the
// softmax scale multiplies S and, at the end, dq and dk. Forward's P is relative to a running
// max (the GPU's online softmax) or the row max (the CPU's): the twins agree to bf16 rounding.
// The CUDA twin (mma.sync, sm_80 and newer) takes head dims 64 and 128 only and throws
// std::invalid_argument otherwise; the CPU twin is a plain reference for any head dim, reported
// as emulated, so the engine picks this op only where the backend runs it natively.
TS_OP_KIND(FlashAttentionBf16)
TS_OP(FlashAttentionBf16, void, flashAttentionBf16Forward,
      (float* out, float* lse, const float* qkv, int B, int T, int C, int NH, int KVH),
      (out, lse, qkv, B, T, C, NH, KVH))
TS_OP(FlashAttentionBf16, void, flashAttentionBf16Backward,
      (float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
       int T, int C, int NH, int KVH),
      (dqkv, dout, out, lse, qkv, B, T, C, NH, KVH))

// ---- The model families' variants (head_dim independent of C, rotary scaling and partial
// rotary, q/k norms, Gemma's (1 + w) norms and GeGLU, sliding windows, soft-capping). Each is a
// generalisation of an op above; where both exist, the op above equals the general one with the
// defaults (bitwise on the CPU).

// Rotary position embedding from a precomputed table, rotate_half convention as ropeForward:
// table (T, RD) in the backend's memory holds per position t the RD/2 cosines then the RD/2
// sines (each already multiplied by the rope type's attention factor, so every rope type of
// transformers' modeling_rope_utils is one table). Each head of HD rotates its first RD dims
// (RD even, RD <= HD; Phi-3's partial_rotary_factor) with half = RD/2:
//   out[i] = x[i] cos_i - x[i+half] sin_i,  out[i+half] = x[i+half] cos_i + x[i] sin_i;
// dims RD..HD-1 pass through (copied when out != inp). Strides and in-place rules as ropeForward.
// An odd RD or RD > HD throws std::invalid_argument.
TS_OP_KIND(RopeTable)
TS_OP(RopeTable, void, ropeTableForward,
      (float* out, const float* inp, int B, int T, int NH, int HD, int RD, int outStride,
       int inpStride, const float* table),
      (out, inp, B, T, NH, HD, RD, outStride, inpStride, table))
// The transpose rotation, written (=); dinp may be dout with equal strides (in place).
TS_OP(RopeTable, void, ropeTableBackward,
      (float* dinp, const float* dout, int B, int T, int NH, int HD, int RD, int dinpStride,
       int doutStride, const float* table),
      (dinp, dout, B, T, NH, HD, RD, dinpStride, doutStride, table))

// RMSNorm over groups: row n (of N, `stride` floats apart) holds G groups of D values at
// n*stride + g*D; each group is normalised on its own with one weight of D shared by all:
//   out = x * rstd * (weightOffset + weight),  rstd[n*G + g] = 1/sqrt(mean(x^2) + eps)
// out at the same offsets as inp (out may be inp; elements outside the groups are untouched).
// G = 1, D = stride = C is rmsnormForward (weightOffset 0); weightOffset 1 is Gemma's x (1 + w);
// G = heads, D = head_dim, stride = the qkv row is a per-head q or k norm (Qwen3, Gemma 3).
TS_OP_KIND(RmsNormGroups)
TS_OP(RmsNormGroups, void, rmsnormGroupsForward,
      (float* out, float* rstd, const float* inp, const float* weight, int N, int G, int D,
       int64_t stride, float eps, float weightOffset),
      (out, rstd, inp, weight, N, G, D, stride, eps, weightOffset))
// dinp at inp's offsets: accumulated (+=) when `accumulate`, else written (=), and then dinp may
// be dout (in place). dweight (D) accumulates (+=); null: frozen, not computed.
TS_OP(RmsNormGroups, void, rmsnormGroupsBackward,
      (float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
       const float* rstd, int N, int G, int D, int64_t stride, float weightOffset, bool accumulate),
      (dinp, dweight, dout, inp, weight, rstd, N, G, D, stride, weightOffset, accumulate))

// GeGLU on a fused gate/up projection (Gemma): inp (N, 2F) rows [gate | up]; out (N, F) =
// gelu_tanh(gate) * up (transformers' gelu_pytorch_tanh, as geluForward).
TS_OP_KIND(GeGlu)
TS_OP(GeGlu, void, gegluForward, (float* out, const float* inp, int N, int F), (out, inp, N, F))
// Writes (=) dinp (N, 2F) as [dgate | dup]: dgate = dout * up * gelu_tanh'(gate),
// dup = dout * gelu_tanh(gate).
TS_OP(GeGlu, void, gegluBackward, (float* dinp, const float* inp, const float* dout, int N, int F),
      (dinp, inp, dout, N, F))

// Grouped-query causal attention with options (AttentionOptions.h: scale, sliding window,
// soft-capping) and an explicit head dim: qkv (B, T, (NH + 2*KVH)*HD) [q heads | k heads |
// v heads], out (B, T, NH*HD), att (B, NH, T, T) the probabilities (0 where masked). Default
// options equal attentionGqaForward with C = NH*HD.
TS_OP_KIND(AttentionMasked)
TS_OP(AttentionMasked, void, attentionMaskedForward,
      (float* out, float* att, const float* qkv, int B, int T, int NH, int KVH, int HD,
       AttentionOptions opt),
      (out, att, qkv, B, T, NH, KVH, HD, opt))
// Writes (=) dqkv; datt is scratch of the size of att.
TS_OP(AttentionMasked, void, attentionMaskedBackward,
      (float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B,
       int T, int NH, int KVH, int HD, AttentionOptions opt),
      (dqkv, datt, dout, qkv, att, B, T, NH, KVH, HD, opt))
// Flash (tiled online softmax) with the same options and layouts; lse (B, NH, T) the only
// saved state; a sliding window skips the key tiles wholly outside it. Backward writes (=) dqkv.
TS_OP_KIND(FlashAttentionMasked)
TS_OP(FlashAttentionMasked, void, flashAttentionMaskedForward,
      (float* out, float* lse, const float* qkv, int B, int T, int NH, int KVH, int HD,
       AttentionOptions opt),
      (out, lse, qkv, B, T, NH, KVH, HD, opt))
TS_OP(FlashAttentionMasked, void, flashAttentionMaskedBackward,
      (float* dqkv, const float* dout, const float* out, const float* lse, const float* qkv, int B,
       int T, int NH, int KVH, int HD, AttentionOptions opt),
      (dqkv, dout, out, lse, qkv, B, T, NH, KVH, HD, opt))

// Tanh soft-capping of logits in place (Gemma 2's final_logit_softcapping): x = cap tanh(x / cap),
// and grad = 1 - tanh(x / cap)^2, the derivative backward multiplies by (n values each).
TS_OP_KIND(Softcap)
TS_OP(Softcap, void, softcapForward, (float* x, float* grad, int64_t n, float cap),
      (x, grad, n, cap))
// dx *= grad (the soft-cap's derivative saved by forward).
TS_OP(Softcap, void, softcapBackward, (float* dx, const float* grad, int64_t n), (dx, grad, n))

#undef TS_OP
#undef TS_OP_KIND
