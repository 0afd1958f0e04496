#pragma once
// Training throughput benchmark (`trainscope-engine bench`): fixed shapes trained a few steps on
// 1 and 2 threads; tokens/s, achieved GFLOP/s (6*params + 12*L*C*T per token, PaLM appendix B),
// the sgemm peak measured in the same run with the same thread count, the ratio, a time
// breakdown by op, and peak memory per category next to docs/memory.md's formula.
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::engine {

struct BenchShape {
  std::string name;
  int layers, heads, d_model, seq_len, vocab, batch;
};
std::vector<BenchShape> defaultBenchShapes();

struct BenchOptions {
  std::vector<int> threads = {1, 2};
  int warmupSteps = 1;
  int steps = 3;
  bool quick = false;  // only the smallest shape (smoke test)
};

// Prints a table to `out` and returns the numbers as JSON.
nlohmann::json runBench(const BenchOptions& options, std::ostream& out);

// Precision policies side by side (fp32, bf16, fp16, fp8, fp8-block, pure_bf16) on one shape
// (the smallest, or gpt-d512 without quick) and the first thread count: tokens/s and tracked
// peak memory per category, plus the CPU's F16C / AVX512-BF16 / AMX support
// (`trainscope-engine bench --precision`).
nlohmann::json runPrecisionBench(const BenchOptions& options, std::ostream& out);

// Best sgemm GFLOP/s over a few square products through the CPU backend's matmul.
double measureGemmPeak(int threads, int n = 1024);

}  // namespace ts::engine
