// Profiler cost: one range with tracing off vs on, a synthetic tiny training step with and
// without profiling (the < 3% budget), and the per-window work: drain, summary, kernels
// batches, Chrome export of 100k spans (about 10 steps of the default preset).
#include <benchmark/benchmark.h>

#include <omp.h>

#include <chrono>

#include <string>
#include <vector>

#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/ChromeTrace.h"
#include "trainscope/profiler/Tracer.h"

using namespace ts::profiler;

namespace {

// Reference: the steady clock a range would otherwise read twice.
void BM_SteadyClockNow(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_SteadyClockNow);

void BM_TracerNowNs(benchmark::State& state) {
  Tracer& t = Tracer::instance();
  for (auto _ : state) benchmark::DoNotOptimize(t.nowNs());
}
BENCHMARK(BM_TracerNowNs);

void BM_RangeOff(benchmark::State& state) {
  Tracer::instance().setEnabled(false);
  for (auto _ : state) {
    ScopedRange r("matmul", SpanCategory::Gemm, 1.0);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_RangeOff);

void BM_RangeOn(benchmark::State& state) {
  Tracer& t = Tracer::instance();
  if (state.thread_index() == 0) {
    t.drain();
    t.setEnabled(true);
  }
  int64_t n = 0;
  for (auto _ : state) {
    {
      ScopedRange r("matmul", SpanCategory::Gemm, 1.0);
      benchmark::ClobberMemory();
    }
    // Bound memory the way a profiling window does; the drain is timed in BM_Drain.
    if (++n % 65536 == 0 && state.thread_index() == 0) {
      state.PauseTiming();
      benchmark::DoNotOptimize(t.drain());
      state.ResumeTiming();
    }
  }
  if (state.thread_index() == 0) {
    t.setEnabled(false);
    t.drain();
  }
}
BENCHMARK(BM_RangeOn)->Threads(1)->Threads(2);

void BM_RangeOnNested3(benchmark::State& state) {
  Tracer& t = Tracer::instance();
  t.drain();
  t.setEnabled(true);
  int64_t n = 0;
  for (auto _ : state) {
    {
      ScopedRange a("block", SpanCategory::Block);
      ScopedRange b("attention", SpanCategory::Attention);
      ScopedRange c("softmax", SpanCategory::Attention);
      benchmark::ClobberMemory();
    }
    if (++n % 32768 == 0) {
      state.PauseTiming();
      benchmark::DoNotOptimize(t.drain());
      state.ResumeTiming();
    }
  }
  state.SetItemsProcessed(state.iterations() * 3);
  t.setEnabled(false);
  t.drain();
}
BENCHMARK(BM_RangeOnNested3);

// A tiny-model-like step: `ops` small GEMMs (m x k x n = 32 x 64 x 32, ~65k FMA, a few us),
// each in its own range inside per-block ranges, with an OpenMP region every 4th op whose
// workers open a range each. Arg 1: profiling on.
void BM_SyntheticStep(benchmark::State& state) {
  const bool on = state.range(0) != 0;
  constexpr int kOps = 240, M = 32, K = 64, N = 32;
  std::vector<float> a(M * K, 0.5f), b(K * N, 0.25f), c(M * N, 0.0f);
  Tracer& t = Tracer::instance();
  t.drain();
  t.setEnabled(on);
  auto gemm = [&](int rows0, int rows1) {
    for (int i = rows0; i < rows1; ++i)
      for (int j = 0; j < N; ++j) {
        float acc = 0;
        for (int k = 0; k < K; ++k) acc += a[i * K + k] * b[k * N + j];
        c[i * N + j] = acc;
      }
  };
  for (auto _ : state) {
    ScopedRange step("step", SpanCategory::Step);
    for (int blk = 0; blk < kOps / 12; ++blk) {
      ScopedRange block("block", SpanCategory::Block);
      for (int op = 0; op < 12; ++op) {
        ScopedRange r("matmul", SpanCategory::Gemm, 2.0 * M * N * K);
        if (op % 4 == 0) {
#pragma omp parallel num_threads(2)
          {
            ScopedRange w("matmul.chunk", SpanCategory::Gemm);
            const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
            gemm(M * tid / nt, M * (tid + 1) / nt);
          }
        } else {
          gemm(0, M);
        }
        benchmark::DoNotOptimize(c.data());
      }
    }
    if (on) {
      state.PauseTiming();
      t.drain();
      state.ResumeTiming();
    }
  }
  t.setEnabled(false);
  t.drain();
  state.counters["ranges_per_step"] = 1 + kOps / 12 + kOps + (kOps / 4) * 2;
}
BENCHMARK(BM_SyntheticStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

std::vector<Span> manySpans(size_t n) {
  std::vector<Span> out;
  out.reserve(n);
  const char* names[] = {"matmul", "layernorm_fwd", "attention.flash_fwd", "gelu", "adamw_step"};
  for (size_t i = 0; i < n; ++i) {
    Span s;
    s.name = names[i % 5];
    s.category = categoryFromString(i % 5 == 0 ? "gemm" : "elementwise");
    s.lane = static_cast<int>(i % 3);
    s.start_ns = static_cast<int64_t>(i) * 1500;
    s.duration_ns = 1000 + static_cast<int64_t>(i % 17);
    s.depth = static_cast<int>(i % 3);
    s.step = static_cast<int64_t>(i / 10000);
    s.correlation = i + 1;
    s.flops = 1e6;
    out.push_back(std::move(s));
  }
  return out;
}

void BM_ChromeExport(benchmark::State& state) {
  auto spans = manySpans(static_cast<size_t>(state.range(0)));
  std::vector<CounterSample> mem;
  for (int i = 0; i < 100; ++i) mem.push_back({0, i * 1000000, "memory", {{"parameters", 1e6}}});
  size_t bytes = 0;
  for (auto _ : state) {
    std::string json = chromeTraceJson(spans, mem);
    bytes = json.size();
    benchmark::DoNotOptimize(json.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ChromeExport)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_KernelsBatchesToText(benchmark::State& state) {
  auto spans = manySpans(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    size_t total = 0;
    for (const auto& b : kernelsBatches(spans, KernelsBatchInfo{}, kDefaultMaxSpansPerBatch))
      total += b.dump().size();
    benchmark::DoNotOptimize(total);
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_KernelsBatchesToText)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_Summarize(benchmark::State& state) {
  auto spans = manySpans(static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(toJson(summarize(spans)));
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Summarize)->Arg(100000)->Unit(benchmark::kMillisecond);

void BM_Drain(benchmark::State& state) {
  Tracer& t = Tracer::instance();
  for (auto _ : state) {
    state.PauseTiming();
    t.drain();
    t.setEnabled(true);
    for (int64_t i = 0; i < state.range(0); ++i) ScopedRange r("op", SpanCategory::Gemm);
    t.setEnabled(false);
    state.ResumeTiming();
    benchmark::DoNotOptimize(t.drain());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Drain)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
