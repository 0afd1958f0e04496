// Kernel micro-benchmarks. Every benchmark takes its thread count as the last argument.
// GEMMs report GFLOP/s (2*M*N*K per call); other ops report bytes moved (bytes_per_second),
// counted as the minimum traffic: every input read once, every output written once.
// Run with OMP_WAIT_POLICY=passive when the machine is shared (reference.md).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;

namespace {

Backend& backend() {
  static std::unique_ptr<Backend> be = makeCpuBackend();
  return *be;
}

std::vector<float> randomVec(size_t n, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

int setThreads(benchmark::State& state, int argIndex) {
  const int t = int(state.range(argIndex));
  backend().setThreads(t);
  state.counters["threads"] = t;
  return t;
}

void setBytes(benchmark::State& state, double bytesPerIter) {
  state.SetBytesProcessed(int64_t(bytesPerIter * double(state.iterations())));
}

// ---- GEMM ----
void BM_Sgemm(benchmark::State& state) {
  const int M = int(state.range(0)), N = int(state.range(1)), K = int(state.range(2));
  const bool ta = state.range(3) & 1, tb = state.range(3) & 2;
  setThreads(state, 4);
  auto A = randomVec(size_t(M) * K), B = randomVec(size_t(K) * N), C = randomVec(size_t(M) * N);
  for (auto _ : state) {
    backend().matmul(C.data(), A.data(), B.data(), M, N, K, ta, tb, 1.0f, 0.0f);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
// M, N, K, transpose bits (1 = A^T, 2 = B^T), threads. GPT-2 small shapes for B*T = 1024.
BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "N", "K", "tr", "thr"})
    ->ArgsProduct({{768}, {768}, {768}, {0}, {1, 2}})
    ->Args({1024, 2304, 768, 2, 1})
    ->Args({1024, 2304, 768, 2, 2})  // qkv fwd (x W^T)
    ->Args({1024, 3072, 768, 2, 1})
    ->Args({1024, 3072, 768, 2, 2})  // fc fwd
    ->Args({768, 3072, 1024, 1, 1})
    ->Args({768, 3072, 1024, 1, 2})  // dW = dY^T X
    ->Args({1024, 768, 3072, 0, 1})
    ->Args({1024, 768, 3072, 0, 2})  // dX = dY W
    ->Args({512, 512, 512, 0, 1})
    ->Args({512, 512, 512, 0, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- non-GEMM ops: N = B*T tokens = 1024, C = 768 unless stated ----
constexpr int kN = 1024, kC = 768;

void BM_LayerNormForward(benchmark::State& state) {
  setThreads(state, 0);
  auto x = randomVec(size_t(kN) * kC), out = x, w = randomVec(kC), b = randomVec(kC);
  std::vector<float> mean(kN), rstd(kN);
  for (auto _ : state)
    backend().layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                               kN, kC, 1e-5f);
  setBytes(state, 2.0 * kN * kC * 4);
}
void BM_LayerNormBackward(benchmark::State& state) {
  setThreads(state, 0);
  auto x = randomVec(size_t(kN) * kC), g = x, dx = x, w = randomVec(kC), b = w, dw = w, db = w;
  std::vector<float> mean(kN), rstd(kN), out(x.size());
  backend().layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), kN,
                             kC, 1e-5f);
  for (auto _ : state)
    backend().layernormBackward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                                mean.data(), rstd.data(), kN, kC);
  setBytes(state, 4.0 * kN * kC * 4);  // x, dout, dinp read + dinp write
}
void BM_GeluForward(benchmark::State& state) {
  setThreads(state, 0);
  const int64_t n = int64_t(kN) * 4 * kC;
  auto x = randomVec(n), y = x;
  for (auto _ : state) backend().geluForward(y.data(), x.data(), n);
  setBytes(state, 2.0 * n * 4);
}
void BM_GeluBackward(benchmark::State& state) {
  setThreads(state, 0);
  const int64_t n = int64_t(kN) * 4 * kC;
  auto x = randomVec(n), g = x, dx = x;
  for (auto _ : state) backend().geluBackward(dx.data(), x.data(), g.data(), n);
  setBytes(state, 3.0 * n * 4);
}
void BM_ReluForward(benchmark::State& state) {
  setThreads(state, 0);
  const int64_t n = int64_t(kN) * 4 * kC;
  auto x = randomVec(n), y = x;
  for (auto _ : state) backend().reluForward(y.data(), x.data(), n);
  setBytes(state, 2.0 * n * 4);
}
void BM_Residual(benchmark::State& state) {
  setThreads(state, 0);
  const int64_t n = int64_t(kN) * kC;
  auto a = randomVec(n), b = a, y = a;
  for (auto _ : state) backend().residualForward(y.data(), a.data(), b.data(), n);
  setBytes(state, 3.0 * n * 4);
}
void BM_AdamW(benchmark::State& state) {
  setThreads(state, 0);
  const int64_t n = 7 << 20;  // ~7M params (a 6-layer d=256..384 model)
  auto p = randomVec(n), g = p, m = p, v = randomVec(n, 2);
  for (auto& x : v) x = x * x;
  int64_t step = 1;
  for (auto _ : state)
    backend().adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, 1e-4f, 0.9f, 0.95f, 1e-8f,
                          0.1f, step++);
  setBytes(state, 7.0 * n * 4);  // read p g m v, write p m v
}
void BM_SumSquares(benchmark::State& state) {
  setThreads(state, 0);
  const int64_t n = 7 << 20;
  auto x = randomVec(n);
  for (auto _ : state) benchmark::DoNotOptimize(backend().sumSquares(x.data(), n));
  setBytes(state, 1.0 * n * 4);
}
void BM_CrossEntropy(benchmark::State& state) {
  setThreads(state, 0);
  const int N = 256, V = 50257;
  auto x = randomVec(size_t(N) * V), dx = x;
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = (i * 7919) % V;
  std::vector<float> loss(N);
  for (auto _ : state)
    backend().crossEntropyForwardBackward(loss.data(), dx.data(), x.data(), t.data(), N, V,
                                          1.0f / N);
  setBytes(state, 2.0 * N * V * 4);
}
void BM_EmbeddingForward(benchmark::State& state) {
  setThreads(state, 0);
  const int B = 4, T = 256, V = 50257;
  auto wte = randomVec(size_t(V) * kC), wpe = randomVec(size_t(T) * kC), out = wpe;
  out.resize(size_t(B) * T * kC);
  std::vector<int32_t> tok(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919) % V);
  for (auto _ : state)
    backend().embeddingForward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, kC);
  setBytes(state, 3.0 * B * T * kC * 4);
}
void BM_EmbeddingBackward(benchmark::State& state) {
  setThreads(state, 0);
  const int B = 4, T = 256, V = 50257;
  auto dwte = randomVec(size_t(V) * kC), dwpe = randomVec(size_t(T) * kC);
  auto g = randomVec(size_t(B) * T * kC);
  std::vector<int32_t> tok(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * 7919) % V);
  for (auto _ : state)
    backend().embeddingBackward(dwte.data(), dwpe.data(), g.data(), tok.data(), B, T, kC);
  setBytes(state, 3.0 * B * T * kC * 4);
}

// Attention: B=4, T=256, C=768, NH=12. Reported as GFLOP/s of the causal useful work
// (fwd: 2 GEMMs of T*T*hs/2 each -> 2*B*NH*T*T*hs FLOPs; bwd: twice that).
void attnCounters(benchmark::State& state, int B, int T, int C, double mult) {
  state.counters["GFLOP/s"] = benchmark::Counter(mult * 2.0 * B * T * T * C * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
void BM_Attention(benchmark::State& state) {
  const bool flash = state.range(0), bwd = state.range(1);
  setThreads(state, 2);
  const int B = 4, T = int(state.range(3)), C = 768, NH = 12;
  auto qkv = randomVec(size_t(B) * T * 3 * C), dqkv = qkv;
  std::vector<float> out(size_t(B) * T * C), g = randomVec(out.size(), 3);
  std::vector<float> att(flash ? 0 : size_t(B) * NH * T * T), datt(att.size()),
      lse(size_t(B) * NH * T);
  auto fwd = [&] {
    if (flash)
      backend().flashAttentionForward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    else
      backend().attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  };
  fwd();
  for (auto _ : state) {
    if (!bwd)
      fwd();
    else if (flash)
      backend().flashAttentionBackward(dqkv.data(), g.data(), out.data(), lse.data(), qkv.data(), B,
                                       T, C, NH);
    else
      backend().attentionBackward(dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), B, T,
                                  C, NH);
  }
  attnCounters(state, B, T, C, bwd ? 2.0 : 1.0);
}

#define THREADS ->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond)
BENCHMARK(BM_LayerNormForward) THREADS;
BENCHMARK(BM_LayerNormBackward) THREADS;
BENCHMARK(BM_GeluForward) THREADS;
BENCHMARK(BM_GeluBackward) THREADS;
BENCHMARK(BM_ReluForward) THREADS;
BENCHMARK(BM_Residual) THREADS;
BENCHMARK(BM_AdamW) THREADS;
BENCHMARK(BM_SumSquares) THREADS;
BENCHMARK(BM_CrossEntropy) THREADS;
BENCHMARK(BM_EmbeddingForward) THREADS;
BENCHMARK(BM_EmbeddingBackward) THREADS;
BENCHMARK(BM_Attention)
    ->ArgNames({"flash", "bwd", "thr", "T"})
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}, {256}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
