#include "trainscope/engine/platform/GemmCalibration.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <vector>

#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/engine/platform/CpuFeatures.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::engine {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// One MLP-up GEMM of a small GPT (rows of B*T tokens, 512 wide, 4x out): the shape the
// engine's bf16 GEMMs mostly have. Big enough to be compute bound, small enough to stay fast.
constexpr int kM = 512, kN = 1024, kK = 512;
constexpr int kRounds = 6;

std::string machineKey(const std::string& impl) {
  return cpuModelName() + " | " + impl + " | " + std::to_string(omp_get_max_threads()) + " threads";
}

void measure(GemmCalibration& c) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(size_t(kM) * kK), w(size_t(kN) * kK), out(size_t(kM) * kN);
  for (auto& x : a) x = u(rng);
  for (auto& x : w) x = u(rng);
  std::vector<uint16_t> a16(a.size()), w16(w.size());
  kernels::cpu::floatToBf16(w.data(), w16.data(), int64_t(w.size()));
  using Clock = std::chrono::steady_clock;
  auto secs = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Interleaved, best of kRounds each: a busy neighbour slows both alike.
  double best32 = 1e30, best16 = 1e30;
  for (int r = 0; r <= kRounds; ++r) {  // round 0 warms up (oneDNN builds its kernels)
    auto t0 = Clock::now();
    kernels::cpu::matmul(out.data(), a.data(), w.data(), kM, kN, kK, false, true, 1.f, 0.f);
    const double s32 = secs(t0);
    t0 = Clock::now();
    // What the engine does per bf16 GEMM: round the activation, multiply with stored weights.
    kernels::cpu::floatToBf16(a.data(), a16.data(), int64_t(a.size()));
    kernels::cpu::matmulBf16(out.data(), a16.data(), w16.data(), kM, kN, kK, false, true, 1.f, 0.f);
    const double s16 = secs(t0);
    if (r == 0) continue;
    best32 = std::min(best32, s32);
    best16 = std::min(best16, s16);
  }
  const double flops = 2.0 * kM * kN * kK;
  c.fp32Gflops = flops / best32 / 1e9;
  c.bf16Gflops = flops / best16 / 1e9;
}

bool readCache(const std::string& file, GemmCalibration& c) {
  std::ifstream in(file);
  if (!in) return false;
  try {
    const json j = core::parseBoundedJson(in);
    const json& e = j.at("machines").at(c.key);
    c.fp32Gflops = e.at("fp32_gflops").get<double>();
    c.bf16Gflops = e.at("bf16_gflops").get<double>();
    c.choice = e.at("choice").get<std::string>();
    if ((c.choice != "bf16" && c.choice != "fp32") || c.fp32Gflops <= 0 || c.bf16Gflops <= 0)
      throw std::runtime_error("entry out of range");
    return true;
  } catch (const json::out_of_range&) {
    return false;  // another machine's entry, or none yet
  } catch (const std::exception& e) {
    c.cacheProblem = file + ": ignored (" + e.what() + "), measured again";
    return false;
  }
}

// Adds this machine's entry; atomic (rename) so a reader never sees half a file. Where two
// processes race, the one whose entry landed first is the one every later reader sees.
void writeCache(const std::string& file, GemmCalibration& c) {
  json j = json::object();
  {
    std::ifstream in(file);
    if (in) try {
        j = core::parseBoundedJson(in);
        if (!j.is_object()) j = json::object();
      } catch (const std::exception&) {
        j = json::object();
      }
  }
  if (j.contains("machines") && j["machines"].is_object() && j["machines"].contains(c.key)) {
    GemmCalibration other = c;
    if (readCache(file, other)) {  // someone measured first: agree with them
      c = other;
      c.source = "cached";
      return;
    }
  }
  j["format"] = "trainscope gemm calibration 1";
  j["machines"][c.key] = {{"fp32_gflops", c.fp32Gflops},
                          {"bf16_gflops", c.bf16Gflops},
                          {"choice", c.choice},
                          {"shape", {kM, kN, kK}}};
  std::error_code ec;
  const fs::path p(file);
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  const std::string tmp = file + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) {
      c.cacheProblem = tmp + ": cannot write the GEMM calibration";
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    c.cacheProblem = file + ": " + ec.message();
    fs::remove(tmp, ec);
  }
}

}  // namespace

std::string chooseGemm(bool native, double fp32Gflops, double bf16Gflops) {
  return native && fp32Gflops > 0 && bf16Gflops >= kBf16GemmMinSpeedup * fp32Gflops ? "bf16"
                                                                                    : "fp32";
}

GemmCalibration calibrateGemm(const std::string& cacheFile) {
  GemmCalibration c;
  const bool native = kernels::cpu::matmulBf16Native(&c.impl);
  c.key = machineKey(native ? c.impl : "no native bf16");
  if (!native) {
    c.choice = "fp32";
    c.source = "no native kernel";
    return c;
  }
  if (!cacheFile.empty() && readCache(cacheFile, c)) {
    c.source = "cached";
    c.cacheFile = cacheFile;
    return c;
  }
  measure(c);
  c.choice = chooseGemm(true, c.fp32Gflops, c.bf16Gflops);
  c.source = "measured";
  if (!cacheFile.empty()) {
    c.cacheFile = cacheFile;
    writeCache(cacheFile, c);
  }
  return c;
}

std::string defaultGemmCalibrationFile() {
  return (fs::path(core::defaultDatabasePath()).parent_path() / "gemm-calibration.json").string();
}

const GemmCalibration& gemmCalibration() {
  static GemmCalibration c;
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* f = std::getenv("TRAINSCOPE_GEMM_AUTO"); f && *f) {
      const std::string forced = f;
      const bool native = kernels::cpu::matmulBf16Native(&c.impl);
      c.key = machineKey(native ? c.impl : "no native bf16");
      if (forced == "bf16" || forced == "fp32") {
        // bf16 without a native kernel would be the (slow) emulation: never what auto means.
        c.choice = native ? forced : "fp32";
        c.source = native || forced == "fp32" ? "forced" : "no native kernel";
        return;
      }
      c.cacheProblem = "TRAINSCOPE_GEMM_AUTO='" + forced + "' ignored (allowed: bf16, fp32)";
    }
    const std::string problem = c.cacheProblem;
    c = calibrateGemm(defaultGemmCalibrationFile());
    if (!problem.empty())
      c.cacheProblem = problem + (c.cacheProblem.empty() ? "" : "; ") + c.cacheProblem;
  });
  return c;
}

json toJson(const GemmCalibration& c) {
  json j = {{"choice", c.choice}, {"source", c.source}, {"key", c.key}, {"impl", c.impl}};
  if (c.fp32Gflops > 0) {
    j["fp32_gflops"] = c.fp32Gflops;
    j["bf16_gflops"] = c.bf16Gflops;
    j["ratio"] = c.ratio();
  }
  if (!c.cacheFile.empty()) j["cache"] = c.cacheFile;
  if (!c.cacheProblem.empty()) j["cache_problem"] = c.cacheProblem;
  return j;
}

}  // namespace ts::engine
