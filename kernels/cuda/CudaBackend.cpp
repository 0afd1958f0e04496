// The CUDA backend: device memory, copies and the ops in kernels/cuda/*.cu. Created only when
// cudaGetDeviceCount reports at least one usable device; otherwise the reason is returned.
#include <cuda_runtime.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    check(cudaSetDevice(device), "cudaSetDevice");
  }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return "cuda"; }
  DeviceInfo device() const override {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
    DeviceInfo info;
    info.kind = DeviceKind::Cuda;
    info.name = prop.name;
    info.memory_bytes = int64_t(prop.totalGlobalMem);
    info.features.push_back("sm_" + std::to_string(prop.major) + std::to_string(prop.minor));
    if (prop.major >= 8) info.features.push_back("bf16");
    if (prop.major > 8 || (prop.major == 8 && prop.minor >= 9)) info.features.push_back("fp8");
    return info;
  }
  bool supports(Op op) const override { return op != Op::Convert; }
  void setThreads(int) override {}  // host threads do not apply to the GPU
  int threads() const override { return 1; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      throw std::bad_alloc();
    }
    return p;
  }
  void release(void* p) override {
    if (p) cudaFree(p);
  }
  void copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copyToDevice");
  }
  void copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes) check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copyToHost");
  }
  void synchronize() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

  void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA,
              bool transB, float alpha, float beta) override {
    cuda::matmul(C, A, B, M, N, K, transA, transB, alpha, beta);
  }
  void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                  bool transB, float alpha, float beta) override {
    cuda::matmulBf16(C, A, B, M, N, K, transA, transB, alpha, beta);
  }
  void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C, float eps) override {
    cuda::layernormForward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int N, int C) override {
    cuda::layernormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void geluForward(float* out, const float* inp, int64_t n) override {
    cuda::geluForward(out, inp, n);
  }
  void geluBackward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cuda::geluBackward(dinp, inp, dout, n);
  }
  void reluForward(float* out, const float* inp, int64_t n) override {
    cuda::reluForward(out, inp, n);
  }
  void reluBackward(float* dinp, const float* out, const float* dout, int64_t n) override {
    cuda::reluBackward(dinp, out, dout, n);
  }
  void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                        int NH) override {
    cuda::attentionForward(out, att, qkv, B, T, C, NH);
  }
  void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                         const float* att, int B, int T, int C, int NH) override {
    cuda::attentionBackward(dqkv, datt, dout, qkv, att, B, T, C, NH);
  }
  void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) override {
    cuda::flashAttentionForward(out, lse, qkv, B, T, C, NH);
  }
  void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                              const float* qkv, int B, int T, int C, int NH) override {
    cuda::flashAttentionBackward(dqkv, dout, out, lse, qkv, B, T, C, NH);
  }
  void crossEntropyForwardBackward(float* losses, float* dlogits, const float* logits,
                                   const int32_t* targets, int N, int V, float dloss) override {
    cuda::crossEntropyForwardBackward(losses, dlogits, logits, targets, N, V, dloss);
  }
  void embeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int B, int T, int C) override {
    cuda::embeddingForward(out, tokens, wte, wpe, B, T, C);
  }
  void embeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                         int T, int C) override {
    cuda::embeddingBackward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void residualForward(float* out, const float* a, const float* b, int64_t n) override {
    cuda::residualForward(out, a, b, n);
  }
  void accumulate(float* y, const float* x, int64_t n) override { cuda::accumulate(y, x, n); }
  void scale(float* x, int64_t n, float s) override { cuda::scale(x, n, s); }
  void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int64_t step) override {
    cuda::adamwUpdate(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                 float weight_decay) override {
    cuda::sgdUpdate(param, grad, buf, n, lr, momentum, weight_decay);
  }
  double sumSquares(const float* x, int64_t n) override { return cuda::sumSquares(x, n); }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<Backend> createBackend(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why)
      *why = std::string("no usable CUDA device: cudaGetDeviceCount failed with ") +
             cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return nullptr;
  }
  if (count == 0) {
    if (why) *why = "no usable CUDA device: cudaGetDeviceCount reports 0 devices";
    return nullptr;
  }
  try {
    return std::make_unique<CudaBackend>(0);
  } catch (const std::exception& ex) {
    if (why) *why = std::string("CUDA device 0 unusable: ") + ex.what();
    return nullptr;
  }
}

}  // namespace ts::kernels::cuda
