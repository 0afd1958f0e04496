#pragma once
// The compute backend: one interface, one op per file underneath (kernels/cpu/<op>.cpp,
// kernels/cuda/<op>.cu) with the same signature on every device. Engine code asks
// `supports()` instead of using #ifdefs. All tensors are dense, row-major, fp32 unless the
// op says otherwise; pointers live in the backend's memory (host memory for the CPU).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ts::kernels {

enum class DType { F32, BF16, F16, F8E4M3, F8E5M2, I8, NF4, I32, U16 };
const char* dtypeName(DType d);
// Storage size in bits (NF4 = 4).
int dtypeBits(DType d);

enum class Op {
  Matmul,
  MatmulBF16,
  LayerNorm,
  Gelu,
  Relu,
  Attention,
  FlashAttention,
  CrossEntropy,
  Embedding,
  Residual,
  AdamW,
  SgdMomentum,
  GradNorm,
  Scale,
  Convert
};

enum class DeviceKind { Cpu, Cuda };

struct DeviceInfo {
  DeviceKind kind = DeviceKind::Cpu;
  std::string name;                   // "AMD EPYC ...", "NVIDIA H200"
  int64_t memory_bytes = 0;           // total memory of the device
  std::vector<std::string> features;  // "avx2", "avx512f", "amx_bf16", "sm_90", ...
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  virtual DeviceInfo device() const = 0;
  virtual bool supports(Op op) const = 0;
  // A supported op that runs without dedicated hardware (e.g. MatmulBF16 on a CPU without
  // AVX512/AMX bf16: correct, but slower than the fp32 op it would replace).
  virtual bool emulates(Op op) const {
    (void)op;
    return false;
  }
  virtual void setThreads(int n) = 0;  // CPU: OpenMP threads (0 = all cores)
  virtual int threads() const = 0;

  // Memory (device memory for CUDA, 64-byte aligned host memory for the CPU).
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void copyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void copyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;

  // C[M,N] = alpha * op(A) * op(B) + beta * C. op(A) is MxK, op(B) is KxN; with transA, A is
  // stored KxM; with transB, B is stored NxK. Row-major, tightly packed.
  virtual void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA,
                      bool transB, float alpha, float beta) = 0;

  // As matmul with bf16 operands (uint16_t bit patterns), fp32 accumulation and fp32 C
  // (Op::MatmulBF16).
  virtual void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K,
                          bool transA, bool transB, float alpha, float beta) = 0;

  // LayerNorm over the last dim C for N rows. mean/rstd (N each) are saved for backward.
  virtual void layernormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C,
                                float eps) = 0;
  // Accumulates (+=) into dinp, dweight, dbias.
  virtual void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) = 0;

  // GELU (tanh approximation, as GPT-2) and ReLU. Backward writes (=) dinp = f'(inp) * dout.
  virtual void geluForward(float* out, const float* inp, int64_t n) = 0;
  virtual void geluBackward(float* dinp, const float* inp, const float* dout, int64_t n) = 0;
  virtual void reluForward(float* out, const float* inp, int64_t n) = 0;
  virtual void reluBackward(float* dinp, const float* out, const float* dout, int64_t n) = 0;

  // Causal self-attention, naive. qkv is (B, T, 3C) [q | k | v], heads NH, head dim C/NH.
  // att (B, NH, T, T) holds the softmax probabilities (saved for backward); out is (B, T, C).
  virtual void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                                int NH) = 0;
  // Writes (=) dqkv; datt is scratch of the size of att.
  virtual void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                                 const float* att, int B, int T, int C, int NH) = 0;

  // Flash attention: lse (B, NH, T) is the only thing saved. Backward recomputes P.
  virtual void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C,
                                     int NH) = 0;
  virtual void flashAttentionBackward(float* dqkv, const float* dout, const float* out,
                                      const float* lse, const float* qkv, int B, int T, int C,
                                      int NH) = 0;

  // Fused softmax cross-entropy over V classes for N rows. losses[i] = -log p[target];
  // dlogits = (softmax - onehot) * dloss (dloss per row, e.g. 1/num_target_tokens; targets < 0
  // are ignored: loss 0, gradient 0). dlogits may alias logits.
  virtual void crossEntropyForwardBackward(float* losses, float* dlogits, const float* logits,
                                           const int32_t* targets, int N, int V, float dloss) = 0;

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; backward accumulates (+=) into dwte, dwpe.
  virtual void embeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) = 0;
  virtual void embeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                 int B, int T, int C) = 0;

  // out = a + b (out may alias a or b).
  virtual void residualForward(float* out, const float* a, const float* b, int64_t n) = 0;
  // y += x
  virtual void accumulate(float* y, const float* x, int64_t n) = 0;
  // x *= s
  virtual void scale(float* x, int64_t n, float s) = 0;

  // AdamW with decoupled weight decay (PyTorch semantics, bias-corrected with `step` >= 1).
  virtual void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                           float beta1, float beta2, float eps, float weight_decay,
                           int64_t step) = 0;
  // SGD with momentum (PyTorch semantics: buf = mu*buf + g (+wd*p); p -= lr*buf).
  virtual void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, float lr,
                         float momentum, float weight_decay) = 0;
  // Sum of squares in double (for the global gradient norm across tensors).
  virtual double sumSquares(const float* x, int64_t n) = 0;
};

// The CPU backend (always present).
std::unique_ptr<Backend> makeCpuBackend();
// The CUDA backend, or nullptr with `why` set when CUDA is not built in or no GPU is present
// (decided from cudaGetDeviceCount's error code).
std::unique_ptr<Backend> makeCudaBackend(std::string* why);
// "auto" picks CUDA when usable, else CPU.
std::unique_ptr<Backend> makeBackend(const std::string& name, std::string* why);
// Names of the backends compiled in ("cpu", "cuda").
std::vector<std::string> compiledBackends();

}  // namespace ts::kernels
