#pragma once
// What precision.gemm "auto" means on this CPU: bf16 GEMMs where oneDNN has a native bf16
// kernel (AMX, AVX512-BF16) that measures faster than its fp32 sgemm here, fp32 elsewhere.
// The measurement (a few GEMMs of a transformer's shape, interleaved, best of several) takes
// well under a second and is cached per CPU model, kernel and thread count in the data
// directory (gemm-calibration.json beside runs.db), so every process of a machine agrees.
// TRAINSCOPE_GEMM_AUTO=bf16|fp32 forces the choice (reproducible benchmarks, tests).
#include <string>

#include <nlohmann/json.hpp>

namespace ts::engine {

struct GemmCalibration {
  std::string choice = "fp32";  // what "auto" resolves to: "bf16" | "fp32"
  std::string source;           // "measured" | "cached" | "forced" | "no native kernel"
  std::string key;              // CPU model | bf16 kernel | threads
  std::string impl;             // oneDNN's bf16 kernel, or why there is none
  double fp32Gflops = 0;        // sgemm
  double bf16Gflops = 0;        // the activation's fp32 -> bf16 conversion plus the bf16 GEMM
  std::string cacheFile;        // where it was read or written ("" when not cached)
  std::string cacheProblem;     // why the cache could not be read or written ("" when fine)
  double ratio() const { return fp32Gflops > 0 ? bf16Gflops / fp32Gflops : 0; }
};

// bf16 is picked only when clearly faster: measured noise on a busy machine must not flip it.
inline constexpr double kBf16GemmMinSpeedup = 1.15;
// The rule on measured rates (pure, for tests).
std::string chooseGemm(bool native, double fp32Gflops, double bf16Gflops);

// Measures, or reads `cacheFile` when it holds this machine's key; writes the result there
// (first writer wins: a process that measured adopts a result another wrote meanwhile).
// An unreadable or foreign cache entry is measured again, never trusted.
GemmCalibration calibrateGemm(const std::string& cacheFile);
// The data directory's cache file (beside defaultDatabasePath()).
std::string defaultGemmCalibrationFile();
// Process-wide: calibrateGemm(defaultGemmCalibrationFile()) once, or the forced choice.
const GemmCalibration& gemmCalibration();

// {"choice", "source", "key", "impl", "fp32_gflops", "bf16_gflops", "ratio", "cache"} for
// `capabilities` and the hello event.
nlohmann::json toJson(const GemmCalibration& c);

}  // namespace ts::engine
