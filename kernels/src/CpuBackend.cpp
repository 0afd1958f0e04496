// The CPU backend: dispatches to the free functions in kernels/cpu/ and owns the thread count.
#include <cpuid.h>
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels {

namespace {

constexpr size_t kAlign = 64;

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown CPU";
}

// Run-time ISA detection (never assumed at compile time beyond x86-64-v3's AVX2/FMA).
std::vector<std::string> cpuFeatures() {
  std::vector<std::string> f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    if (c & bit_FMA) f.push_back("fma");
    if (c & bit_AVX) f.push_back("avx");
  }
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    if (b & bit_AVX2) f.push_back("avx2");
    if (b & bit_AVX512F) f.push_back("avx512f");
    if (d & (1u << 22)) f.push_back("amx_bf16");
    if (d & (1u << 24)) f.push_back("amx_tile");
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5))) f.push_back("avx512_bf16");
  return f;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : threads_(omp_get_max_threads()) {}

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }
  DeviceInfo device() const override {
    DeviceInfo info;
    info.kind = DeviceKind::Cpu;
    info.name = cpuModelName();
    info.memory_bytes = int64_t(sysconf(_SC_PHYS_PAGES)) * int64_t(sysconf(_SC_PAGE_SIZE));
    info.features = cpuFeatures();
    return info;
  }
  bool supports(Op op) const override {
    switch (op) {
      case Op::Convert:
        return false;
      default:
        return true;
    }
  }
  // bf16 GEMMs are emulated unless oneDNN has a kernel for this CPU's bf16 instructions.
  bool emulates(Op op) const override { return op == Op::MatmulBF16 && !cpu::matmulBf16Native(); }
  void setThreads(int n) override {
    threads_ = n > 0 ? n : omp_get_num_procs();
    omp_set_num_threads(threads_);
  }
  int threads() const override { return threads_; }

  void* allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }
  void copyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  void matmul(float* C, const float* A, const float* B, int M, int N, int K, bool transA,
              bool transB, float alpha, float beta) override {
    cpu::matmul(C, A, B, M, N, K, transA, transB, alpha, beta);
  }
  void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                  bool transB, float alpha, float beta) override {
    cpu::matmulBf16(C, A, B, M, N, K, transA, transB, alpha, beta);
  }
  void layernormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C, float eps) override {
    cpu::layernormForward(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  void layernormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int N, int C) override {
    cpu::layernormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void geluForward(float* out, const float* inp, int64_t n) override {
    cpu::geluForward(out, inp, n);
  }
  void geluBackward(float* dinp, const float* inp, const float* dout, int64_t n) override {
    cpu::geluBackward(dinp, inp, dout, n);
  }
  void reluForward(float* out, const float* inp, int64_t n) override {
    cpu::reluForward(out, inp, n);
  }
  void reluBackward(float* dinp, const float* out, const float* dout, int64_t n) override {
    cpu::reluBackward(dinp, out, dout, n);
  }
  void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C,
                        int NH) override {
    cpu::attentionForward(out, att, qkv, B, T, C, NH);
  }
  void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                         const float* att, int B, int T, int C, int NH) override {
    cpu::attentionBackward(dqkv, datt, dout, qkv, att, B, T, C, NH);
  }
  void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C,
                             int NH) override {
    cpu::flashAttentionForward(out, lse, qkv, B, T, C, NH);
  }
  void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                              const float* qkv, int B, int T, int C, int NH) override {
    cpu::flashAttentionBackward(dqkv, dout, out, lse, qkv, B, T, C, NH);
  }
  void crossEntropyForwardBackward(float* losses, float* dlogits, const float* logits,
                                   const int32_t* targets, int N, int V, float dloss) override {
    cpu::crossEntropyForwardBackward(losses, dlogits, logits, targets, N, V, dloss);
  }
  void embeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int B, int T, int C) override {
    cpu::embeddingForward(out, tokens, wte, wpe, B, T, C);
  }
  void embeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                         int T, int C) override {
    cpu::embeddingBackward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void residualForward(float* out, const float* a, const float* b, int64_t n) override {
    cpu::residualForward(out, a, b, n);
  }
  void accumulate(float* y, const float* x, int64_t n) override { cpu::accumulate(y, x, n); }
  void scale(float* x, int64_t n, float s) override { cpu::scale(x, n, s); }
  void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, int64_t step) override {
    cpu::adamwUpdate(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step);
  }
  void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
                 float weight_decay) override {
    cpu::sgdUpdate(param, grad, buf, n, lr, momentum, weight_decay);
  }
  double sumSquares(const float* x, int64_t n) override { return cpu::sumSquares(x, n); }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Backend> makeCpuBackend() {
  return std::make_unique<CpuBackend>();
}

}  // namespace ts::kernels
