#include "trainscope/engine/train/Bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/platform/CpuFeatures.h"
#include "trainscope/engine/platform/GemmCalibration.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/Numeric.h"
#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using Clock = std::chrono::steady_clock;

namespace {
// Runs `step` `warmup` times untimed, then `steps` times; the fastest run, in seconds (the best
// of several is the least disturbed by other work on the machine).
template <class Step>
double bestSeconds(Step&& step, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) step();
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    step();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// A micro-batch of fixed tokens and targets for a shape.
struct BenchBatch {
  std::vector<int32_t> tokens, targets;
  explicit BenchBatch(const BenchShape& s) : tokens(s.batch * s.seq_len), targets(tokens.size()) {
    const int N = s.batch * s.seq_len;
    for (int i = 0; i < N; ++i)
      tokens[i] = (i * 31 + 7) % s.vocab, targets[i] = (i * 17 + 3) % s.vocab;
  }
};

// ---- runBench ----

// The time breakdown of one traced step by op: leaf ops only (blocks/forward/backward/step are
// containers), printed and returned.
nlohmann::json opBreakdown(const profiler::WindowSummary& summary, std::ostream& out) {
  char buf[512];
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& op : summary.ops) {
    if (op.category == profiler::SpanCategory::Block || op.category == profiler::SpanCategory::Step)
      continue;
    std::snprintf(buf, sizeof buf, "    %-16s %-11s %8.2f ms  %5.1f%%\n", op.name.c_str(),
                  profiler::toString(op.category), op.total_ns / 1e6, op.pct_of_step);
    out << buf;
    ops.push_back({{"name", op.name}, {"ms", op.total_ns / 1e6}, {"pct", op.pct_of_step}});
  }
  return ops;
}

// Peak memory per category vs docs/memory.md's formula for an fp32 GPT-2 of shape s.
nlohmann::json memoryVsFormula(const BenchShape& s, const MemoryTracker& tracker,
                               std::ostream& out) {
  char buf[512];
  const int64_t B = s.batch, T = s.seq_len, C = s.d_model, NH = s.heads, L = s.layers, V = s.vocab,
                Nn = B * T;
  const int64_t P = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  const std::map<core::MemoryCategory, int64_t> formula = {
      {core::MemoryCategory::Parameters, 4 * P},
      {core::MemoryCategory::Gradients, 4 * P},
      {core::MemoryCategory::OptimizerState, 8 * P},
      {core::MemoryCategory::Activations,
       4 * (2 * Nn + L * (16 * Nn * C + 4 * Nn + B * NH * T * T) + 2 * Nn * C + 3 * Nn + Nn * V)},
      {core::MemoryCategory::Workspace, 4 * (Nn + 13 * Nn * C + B * NH * T * T)}};
  nlohmann::json mem;
  out << "    peak memory:";
  for (const auto& [cat, bytes] : formula) {
    const int64_t measured = tracker.peak(core::MemoryTier::Device, cat);
    std::snprintf(buf, sizeof buf, " %s %.2f MiB%s", std::string(core::toString(cat)).c_str(),
                  measured / 1048576.0, measured == bytes ? " (=formula)" : " (FORMULA DIFFERS)");
    out << buf;
    mem[std::string(core::toString(cat))] = {{"measured", measured}, {"formula", bytes}};
  }
  out << "\n";
  return mem;
}

// One shape on `threads` threads: fp32 training steps timed, one more traced for the breakdown,
// the GEMM peak re-measured; the printed line, breakdown and memory, and the JSON row.
nlohmann::json benchShape(const BenchShape& s, int threads, double peak,
                          const BenchOptions& options, std::ostream& out) {
  auto backend = kernels::makeCpuBackend();
  backend->setThreads(threads);
  MemoryTracker tracker;
  GptConfig gc;
  gc.layers = s.layers;
  gc.heads = s.heads;
  gc.d_model = s.d_model;
  gc.seq_len = s.seq_len;
  gc.vocab = s.vocab;
  Gpt model(gc, backend.get(), &tracker);
  model.initWeights(1);
  model.allocate(s.batch);
  auto opt = makeOptimizer(core::OptimizerConfig{}, model.arena(), backend.get(), &tracker);
  const int N = s.batch * s.seq_len;
  BenchBatch batch(s);
  auto step = [&] {
    profiler::ScopedRange r("step", profiler::SpanCategory::Step);
    model.zeroGrad();
    model.forward(batch.tokens.data(), batch.targets.data(), s.batch, s.seq_len, 1.f / N);
    model.backward();
    clipGradNorm(model.arena(), backend.get(), 1.0);
    opt->step(1e-4f);
  };
  const double bestS = bestSeconds(step, options.warmupSteps, options.steps);
  // One extra traced step for the breakdown (tracing costs a little; not in the timing).
  auto& tracer = profiler::Tracer::instance();
  tracer.drain();
  tracer.setEnabled(true);
  step();
  tracer.setEnabled(false);
  auto summary = profiler::summarize(tracer.drain());

  // The GEMM peak is re-measured right after the shape and the higher of the two kept, so
  // load from other processes during the run biases the ratio down rather than up.
  const double shapePeak = std::max(peak, measureGemmPeak(threads));
  const double tokPerS = N / bestS;
  const double gflops = tokPerS * model.flopsPerToken(s.seq_len) / 1e9;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%-11s L=%d C=%d NH=%d T=%d V=%d B=%d params=%lld: %.0f tok/s, %.1f GFLOP/s "
                "= %.0f%% of sgemm peak %.1f (step %.1f ms)\n",
                s.name.c_str(), s.layers, s.d_model, s.heads, s.seq_len, s.vocab, s.batch,
                (long long)model.numParams(), tokPerS, gflops, 100 * gflops / shapePeak, shapePeak,
                bestS * 1000);
  out << buf;
  const nlohmann::json ops = opBreakdown(summary, out);
  const nlohmann::json mem = memoryVsFormula(s, tracker, out);
  return {{"shape", s.name},
          {"threads", threads},
          {"tokens_per_s", tokPerS},
          {"gflops", gflops},
          {"gemm_peak_gflops", shapePeak},
          {"ratio", gflops / shapePeak},
          {"step_ms", bestS * 1000},
          {"ops", ops},
          {"memory", mem}};
}

// ---- runPrecisionBench ----

// The policies compared, as row names: a precision.policy ("fp8-block": fp8 with the blockwise
// recipe), "-gemm" for precision.gemm bf16, "+int8" for int8 activation compression, "+flash"
// for flash attention.
constexpr const char* kPrecisionRows[] = {
    "fp32",       "bf16",       "bf16-gemm",      "fp16",      "fp8",
    "fp8-block",  "pure_bf16",  "pure_bf16-gemm", "fp32+int8", "bf16+int8",
    "fp32+flash", "bf16+flash", "fp32+flash+int8"};

// Measured per row, for the targets (docs/memory.md, issue 21).
struct PrecisionRow {
  double tokPerS = 0, act = 0, peak = 0;
};

// The run config of one row on shape s.
core::RunConfig precisionRunConfig(const BenchShape& s, const std::string& row, int threads) {
  core::RunConfig rc;
  rc.model.layers = s.layers;
  rc.model.heads = s.heads;
  rc.model.d_model = s.d_model;
  rc.model.seq_len = s.seq_len;
  rc.model.vocab = s.vocab;
  rc.train.micro_batch = s.batch;
  rc.device.threads = threads;  // the kernel scratch region has a slice each
  std::string pol = row;
  // "+int8": memory.activation_compression int8; "+flash": attention.impl flash.
  for (const char* suffix : {"+int8", "+flash"})
    for (size_t at; (at = pol.find(suffix)) != std::string::npos;) {
      if (std::string(suffix) == "+int8") rc.memory.activation_compression = "int8";
      if (std::string(suffix) == "+flash") rc.attention.impl = "flash";
      pol.erase(at, std::strlen(suffix));
    }
  // "-gemm": precision.gemm bf16 (oneDNN's bf16 kernel, or emulated where there is none).
  if (pol.size() > 5 && pol.substr(pol.size() - 5) == "-gemm") {
    rc.precision.gemm = "bf16";
    pol = pol.substr(0, pol.size() - 5);
  }
  rc.precision.policy = pol == "fp8-block" ? "fp8" : pol;
  if (pol == "fp8-block") rc.precision.fp8.recipe = "blockwise";
  return rc;
}

// The estimator from the same run config: exact when every category's peak is the tracker's
// to the byte.
bool estimatorExact(const core::RankMemory& plan, const MemoryTracker& tracker) {
  bool exact = true;
  for (int ci = 0; ci < core::kMemoryCategoryCount; ++ci) {
    const auto cat = static_cast<core::MemoryCategory>(ci);
    exact = exact && plan.at(core::MemoryTier::Device, cat).peak ==
                         tracker.peak(core::MemoryTier::Device, cat);
  }
  return exact;
}

// Running tallies of the policy rows.
struct PrecisionTally {
  double base = 0;  // fp32's tokens/s
  std::map<std::string, PrecisionRow> rows;
  int exactRows = 0, allRows = 0;
};

// One policy row: the trainer's step for the policy timed, peak memory per category next to
// the estimator's; printed, tallied and returned as a JSON row.
nlohmann::json benchPolicy(const BenchShape& s, const char* row, int threads, bool nativeBf16,
                           const BenchOptions& options, PrecisionTally& tally, std::ostream& out) {
  auto backend = kernels::makeCpuBackend();
  backend->setThreads(threads);
  MemoryTracker tracker;
  core::RunConfig rc = precisionRunConfig(s, row, backend->threads());
  const GptConfig gc = gptConfigFrom(rc, s.vocab, backend.get());
  const std::string gemm = gc.fp8 != GptConfig::Fp8Recipe::None ? "fp8-emul"
                           : !gc.bf16Gemm                       ? "fp32"
                           : nativeBf16                         ? "bf16"
                                                                : "bf16-emul";
  Gpt model(gc, backend.get(), &tracker);
  model.initWeights(1);
  model.allocate(s.batch);
  auto opt = makeOptimizer(core::OptimizerConfig{}, model.arena(), backend.get(), &tracker);
  const int N = s.batch * s.seq_len;
  BenchBatch batch(s);
  // The trainer's step for the policy (fp16: a fixed scale of 1024, unscaled in fp32).
  const float scale = rc.precision.policy == "fp16" ? 1024.f : 1.f;
  auto step = [&] {
    model.zeroGrad();
    model.forward(batch.tokens.data(), batch.targets.data(), s.batch, s.seq_len, scale / N);
    model.backward();
    model.roundGrads();
    if (scale != 1.f) model.arena().scaleGrads(1.f / scale);
    clipGradNorm(model.arena(), backend.get(), 1.0);
    opt->step(1e-4f);
  };
  const double bestS = bestSeconds(step, options.warmupSteps, options.steps);
  const double tokPerS = N / bestS;
  if (tally.base == 0) tally.base = tokPerS;
  auto mib = [&](core::MemoryCategory c) {
    return tracker.peak(core::MemoryTier::Device, c) / 1048576.0;
  };
  // (auto as the engine resolved it: the estimator cannot run the GEMM calibration)
  if (rc.precision.gemm == "auto") rc.precision.gemm = gc.bf16Gemm ? "bf16" : "fp32";
  const core::RankMemory plan = core::predictMemoryReport(rc).ranks.at(0);
  const bool exact = estimatorExact(plan, tracker);
  ++tally.allRows;
  tally.exactRows += exact;
  char est[32];
  std::snprintf(est, sizeof est, "%s%.2f", exact ? "=" : "!",
                plan.totalPeak(core::MemoryTier::Device) / 1048576.0);
  tally.rows[row] = {tokPerS, mib(core::MemoryCategory::Activations),
                     tracker.totalPeak() / 1048576.0};
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%-20s %-9s %8.0f %7.2fx %8.2f %8.2f %9.2f %9.2f %9.2f %9.2f %10s\n", row,
                gemm.c_str(), tokPerS, tokPerS / tally.base, mib(core::MemoryCategory::Parameters),
                mib(core::MemoryCategory::Gradients), mib(core::MemoryCategory::OptimizerState),
                mib(core::MemoryCategory::Workspace), mib(core::MemoryCategory::Activations),
                tracker.totalPeak() / 1048576.0, est);
  out << buf;
  auto peak = [&](core::MemoryCategory c) { return tracker.peak(core::MemoryTier::Device, c); };
  return {{"policy", row},
          {"gemm", gemm},
          {"tokens_per_s", tokPerS},
          {"step_ms", bestS * 1000},
          {"peak_bytes", tracker.totalPeak()},
          {"parameters", peak(core::MemoryCategory::Parameters)},
          {"gradients", peak(core::MemoryCategory::Gradients)},
          {"optimizer_state", peak(core::MemoryCategory::OptimizerState)},
          {"activations", peak(core::MemoryCategory::Activations)},
          {"workspace", peak(core::MemoryCategory::Workspace)},
          {"estimator_peak_bytes", plan.totalPeak(core::MemoryTier::Device)},
          {"estimator_exact", exact}};
}

// Issue 21's targets as ratios measured in this run (the bf16 rows use the bf16 GEMM where
// precision.gemm auto picks it; "bf16-gemm" forces it), appended to `results`.
void reportTargets(PrecisionTally& tally, bool nativeBf16, nlohmann::json& results,
                   std::ostream& out) {
  char buf[512];
  auto& rows = tally.rows;
  const std::string bf = nativeBf16 ? "bf16-gemm" : "bf16";
  auto ratio = [&](const std::string& a, const std::string& b, double PrecisionRow::*m) {
    return rows[a].*m / rows[b].*m;
  };
  struct Target {
    std::string what;
    double value, limit;
    bool atLeast;
  };
  const std::vector<Target> targets = {
      {bf + " tokens/s vs fp32", ratio(bf, "fp32", &PrecisionRow::tokPerS), 1.5, true},
      {bf + " activations vs fp32", ratio(bf, "fp32", &PrecisionRow::act), 0.55, false},
      {bf + " peak vs fp32", ratio(bf, "fp32", &PrecisionRow::peak), 0.82, false},
      {"pure_bf16 peak vs fp32", ratio("pure_bf16", "fp32", &PrecisionRow::peak), 0.6, false},
      {"int8 activations vs plain (naive)", ratio("fp32+int8", "fp32", &PrecisionRow::act), 0.55,
       false},
      {"int8 activations vs plain (flash)",
       ratio("fp32+flash+int8", "fp32+flash", &PrecisionRow::act), 0.55, false}};
  out << "targets (measured in this run):\n";
  for (const auto& t : targets) {
    const bool met = t.atLeast ? t.value >= t.limit : t.value <= t.limit;
    std::snprintf(buf, sizeof buf, "  %-38s %6.3fx  target %s %.2fx  %s\n", t.what.c_str(), t.value,
                  t.atLeast ? ">=" : "<=", t.limit, met ? "met" : "NOT MET");
    out << buf;
    results.push_back({{"target", t.what}, {"ratio", t.value}, {"limit", t.limit}, {"met", met}});
  }
  std::snprintf(buf, sizeof buf, "  estimator exact (every category, to the byte): %d of %d rows\n",
                tally.exactRows, tally.allRows);
  out << buf;
}

// The GEMM itself at the model's MLP shape: fp32 sgemm vs the bf16 GEMM (native / emulated).
nlohmann::json benchMlpGemm(const BenchShape& s, int threads, bool nativeBf16,
                            const std::string& bf16Impl, const BenchOptions& options,
                            std::ostream& out) {
  const int M = s.batch * s.seq_len, Nn = 4 * s.d_model, K = s.d_model;
  auto backend = kernels::makeCpuBackend();
  backend->setThreads(threads);
  std::vector<float> a(size_t(M) * K), b(size_t(Nn) * K), c(size_t(M) * Nn);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float((i * 37) % 101) / 101.f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float((i * 53) % 97) / 97.f - 0.5f;
  std::vector<uint16_t> a16(a.size()), w16(b.size());
  kernels::cpu::floatToBf16(a.data(), a16.data(), int64_t(a.size()));
  kernels::cpu::floatToBf16(b.data(), w16.data(), int64_t(b.size()));
  const double flops = 2.0 * M * Nn * K;
  const double f32 =
      flops /
      bestSeconds(
          [&] { backend->matmul(c.data(), a.data(), b.data(), M, Nn, K, false, true, 1.f, 0.f); },
          options.warmupSteps, options.steps * 4) /
      1e9;
  const double bf =
      flops /
      bestSeconds(
          [&] {
            backend->matmulBf16(c.data(), a16.data(), w16.data(), M, Nn, K, false, true, 1.f, 0.f);
          },
          options.warmupSteps, options.steps * 4) /
      1e9;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "GEMM %dx%dx%d (x W^T): fp32 sgemm %.1f GFLOP/s, bf16 %s %.1f GFLOP/s = %.2fx\n", M,
                Nn, K, f32, nativeBf16 ? ("oneDNN " + bf16Impl).c_str() : "emulated", bf, bf / f32);
  out << buf;
  return {{"gemm_shape", {M, Nn, K}},
          {"sgemm_gflops", f32},
          {"bf16_gemm_gflops", bf},
          {"bf16_gemm_native", nativeBf16},
          {"bf16_vs_fp32", bf / f32}};
}

// What the gemm column means, and this CPU's 16-bit support and GEMM choice.
void printPrecisionNotes(bool nativeBf16, const std::string& bf16Impl, std::ostream& out) {
  const CpuFeatures f = detectCpuFeatures();
  out << "bf16/fp16/pure_bf16 store 2-byte weights and gradients, fp8 adds 1-byte copies of the "
         "block linear weights (E4M3; gradients E5M2), emulated: quantize -> dequantize -> fp32 "
         "sgemm. gemm fp32: the block linear GEMMs run on fp32 copies upcast from the 16-bit "
         "weights; bf16: oneDNN's bf16 kernel on the bf16 weights and bf16-rounded inputs (fp32 "
         "accumulation); bf16-emul: the same operands widened to fp32 (no bf16 kernel here).\n"
         "CPU: F16C "
      << (kernels::cpu::hasF16cConversion() ? "yes (fp16 conversion vectorised)" : "no")
      << ", AVX512-BF16 " << (f.avx512_bf16 ? "yes" : "no") << ", AMX-BF16 "
      << (f.amx_bf16 ? "yes" : "no")
      << "; bf16 GEMM kernel: " << (nativeBf16 ? "oneDNN " + bf16Impl : bf16Impl)
      << ". precision.gemm auto picks "
      << (autoPicksBf16Gemm(kernels::makeCpuBackend().get()) ? "bf16" : "fp32") << " here ("
      << gemmCalibration().source << ": bf16 GEMM " << gemmCalibration().ratio() << "x sgemm).\n";
}
}  // namespace

std::vector<BenchShape> defaultBenchShapes() {
  return {{"small-d128", 2, 4, 128, 64, 256, 8},
          {"gpt-d512", 4, 8, 512, 128, 1024, 8},
          {"gpt-d768", 2, 12, 768, 128, 2048, 4}};
}

double measureGemmPeak(int threads, int n) {
  auto backend = kernels::makeCpuBackend();
  backend->setThreads(threads);
  std::vector<float> a(size_t(n) * n), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 13) * 0.01f, b[i] = float(i % 7) * 0.02f;
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = Clock::now();
    backend->matmul(c.data(), a.data(), b.data(), n, n, n, false, r % 2 == 1, 1.f, 0.f);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * n * n * n / s / 1e9);
  }
  return best;
}

nlohmann::json runBench(const BenchOptions& options, std::ostream& out) {
  nlohmann::json results = nlohmann::json::array();
  auto shapes = defaultBenchShapes();
  if (options.quick) shapes.resize(1);
  char buf[512];
  for (int threads : options.threads) {
    const double peak = measureGemmPeak(threads);
    std::snprintf(buf, sizeof buf, "\n== %d thread%s: measured sgemm peak %.1f GFLOP/s (1024^3)\n",
                  threads, threads == 1 ? "" : "s", peak);
    out << buf;
    for (const auto& s : shapes) {
      results.push_back(benchShape(s, threads, peak, options, out));
      out.flush();
    }
  }
  return results;
}

nlohmann::json runPrecisionBench(const BenchOptions& options, std::ostream& out) {
  nlohmann::json results = nlohmann::json::array();
  const auto shapes = defaultBenchShapes();
  const BenchShape s = options.quick ? shapes[0] : shapes[1];
  const int threads = options.threads.empty() ? 1 : options.threads.front();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\n== precision policies: %s L=%d C=%d T=%d V=%d B=%d, %d thread%s, AdamW\n"
                "%-20s %-9s %8s %8s %8s %8s %9s %9s %9s %9s %10s\n",
                s.name.c_str(), s.layers, s.d_model, s.seq_len, s.vocab, s.batch, threads,
                threads == 1 ? "" : "s", "policy", "gemm", "tok/s", "vs fp32", "params", "grads",
                "opt_state", "workspace", "activ.", "peak MiB", "estimator");
  out << buf;
  std::string bf16Impl;
  const bool nativeBf16 = kernels::cpu::matmulBf16Native(&bf16Impl);
  PrecisionTally tally;
  for (const char* row : kPrecisionRows) {
    results.push_back(benchPolicy(s, row, threads, nativeBf16, options, tally, out));
    out.flush();
  }
  reportTargets(tally, nativeBf16, results, out);
  results.push_back(benchMlpGemm(s, threads, nativeBf16, bf16Impl, options, out));
  printPrecisionNotes(nativeBf16, bf16Impl, out);
  return results;
}

}  // namespace ts::engine
