// The whole model trained on CUDA against the same run on the CPU (label gpu; skipped with the
// reason where no GPU answers): per policy, 50 steps whose losses track the CPU's within a
// stated tolerance, and checkpoints that move between the two backends. The CPU side of each
// comparison is the reference; the strict CPU test backend (cpu-guarded) runs the same engine
// paths in the unit tests (TrainerTest GuardedBackendRunIsTheCpuRunBitForBit).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../../support/TestBackends.h"
#include "../../support/TrainerHarness.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts;
using ts::core::EventType;
using ts::testsupport::Recorded;

namespace {

// engine_emu_tests runs these bodies on the CUDA twins' kernels under emulation (label unit;
// tests/kernels/CudaEmulation.h), fewer steps: the emulation runs each CUDA thread in turn.
#ifdef TS_EMULATED_CUDA
constexpr const char* kGpu = "cuda-emulated";
constexpr int kSteps = 8, kDriftSteps = 3, kEvalBatches = 1, kExactMatch = 4;
#else
constexpr const char* kGpu = "cuda";
constexpr int kSteps = 50, kDriftSteps = 10, kEvalBatches = 8, kExactMatch = 16;
#endif
// The runs' options: evals as small as the emulation needs them.
ts::testsupport::RunOptions runOptions(const char* backend) {
  ts::testsupport::RunOptions o;
  o.backend = backend;
  o.evalBatches = kEvalBatches;
  o.exactMatchSamples = kExactMatch;
  return o;
}

class CudaTrain : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef TS_EMULATED_CUDA
    std::string why;
    if (!ts::testsupport::cudaAvailable(&why)) GTEST_SKIP() << "no CUDA backend: " << why;
#endif
  }
};

core::RunConfig fiftySteps() {
  auto c = ts::testsupport::tinyAdditionConfig();
  c.model.heads = 4;
  c.model.d_model = 64;
  c.train.steps = kSteps;
  c.train.eval_every = kSteps;
  return c;
}

std::vector<double> losses(const Recorded& r) {
  std::vector<double> out;
  for (const auto& s : r.of(EventType::Step)) out.push_back(s["loss"].get<double>());
  return out;
}

}  // namespace

// Tolerances (relative, per step): fp32 differs only in summation order (cuBLAS, the kernels'
// reductions); the 16-bit and fp8 policies round the same values on both sides but may round a
// different fp32 sum the other way, and those differences grow over 50 steps of training. The
// mean relative difference over the last 10 steps bounds the drift.
TEST_F(CudaTrain, TracksTheCpuLossForFiftyStepsPerPolicy) {
  struct Case {
    const char* name;
    const char* policy;
    const char* gemm;
    const char* attention;
    const char* compression;
    double tol;
    int heads = 4, dModel = 64;  // head dim 16; 64 takes the bf16 tensor-core flash kernel
  };
  const Case cases[] = {{"fp32", "fp32", "auto", "naive", "none", 1e-3},
                        {"fp32 flash", "fp32", "auto", "flash", "none", 1e-3},
                        {"bf16 (bf16 GEMMs)", "bf16", "bf16", "flash", "none", 3e-2},
                        {"bf16 tensor-core flash", "bf16", "bf16", "flash", "none", 3e-2, 2, 128},
                        {"bf16 (fp32 GEMMs)", "bf16", "fp32", "naive", "none", 3e-2},
                        {"fp16", "fp16", "auto", "naive", "none", 3e-2},
                        {"fp8", "fp8", "auto", "naive", "none", 5e-2},
                        {"pure_bf16", "pure_bf16", "bf16", "naive", "none", 5e-2},
                        {"fp32 int8", "fp32", "auto", "naive", "int8", 3e-2}};
  for (const Case& k : cases) {
    auto c = fiftySteps();
    c.precision.policy = k.policy;
    c.precision.gemm = k.gemm;
    c.attention.impl = k.attention;
    c.memory.activation_compression = k.compression;
    c.model.heads = k.heads;
    c.model.d_model = k.dModel;
    Recorded cpu, gpu;
    auto o = runOptions("cpu");
    auto dir = ts::testsupport::tempDir("cudatrain", "cpu");
    ASSERT_EQ(ts::testsupport::runTrainer(c, cpu, dir.string(), o).status, "completed") << k.name;
    o.backend = kGpu;
    dir = ts::testsupport::tempDir("cudatrain", "gpu");
    const auto r = ts::testsupport::runTrainer(c, gpu, dir.string(), o);
    ASSERT_EQ(r.status, "completed") << k.name << ": " << r.reason;
    // Which flash kernel ran: the tensor-core one exactly for bf16 at head dim 64 (CUDA only).
    auto saysTensorCores = [](const Recorded& r) {
      for (const auto& e : r.of(EventType::Log))
        if (e["message"].get<std::string>().find("bf16 tensor cores") != std::string::npos)
          return true;
      return false;
    };
    EXPECT_FALSE(saysTensorCores(cpu)) << k.name;
    EXPECT_EQ(saysTensorCores(gpu), std::string(k.attention) == "flash" &&
                                        std::string(k.policy) == "bf16" && k.dModel / k.heads == 64)
        << k.name;
    const auto a = losses(cpu), b = losses(gpu);
    ASSERT_EQ(a.size(), b.size()) << k.name;
    ASSERT_EQ(a.size(), size_t(kSteps));
    double drift = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << k.name << " step " << i;
      if (i >= a.size() - kDriftSteps) drift += std::fabs(b[i] - a[i]) / a[i] / kDriftSteps;
    }
    // The device's own count beside the tracker's: the GPU holds at least what is tracked
    // (cudaMemGetInfo adds the context and library workspaces), and the CPU reports none.
    for (const auto& m : gpu.of(EventType::Memory)) {
      ASSERT_TRUE(m.contains("device_memory")) << k.name;
      const auto& d = m["device_memory"];
      EXPECT_GE(d["used"].get<int64_t>(), d["tracked"].get<int64_t>()) << k.name;
      EXPECT_GT(d["tracked"].get<int64_t>(), 0) << k.name;
      EXPECT_LE(d["used"].get<int64_t>(), d["total"].get<int64_t>()) << k.name;
    }
    for (const auto& m : cpu.of(EventType::Memory)) EXPECT_FALSE(m.contains("device_memory"));
    EXPECT_LT(std::fabs(b[0] - a[0]) / a[0], k.tol / 10) << k.name << ": first step";
    EXPECT_LT(drift, k.tol) << k.name << ": last 10 steps";
    std::printf("%-20s first %.6f vs %.6f, last %.6f vs %.6f (cpu vs cuda), drift %.2e\n", k.name,
                a[0], b[0], a.back(), b.back(), drift);
  }
}

// A checkpoint written on one backend resumes on the other: the resumed run's weights at the
// end equal (to fp32 summation order) those of the run that stayed where it started.
TEST_F(CudaTrain, CheckpointsMoveBetweenGpuAndCpu) {
  for (const auto& [from, to] : {std::pair{kGpu, "cpu"}, std::pair{"cpu", kGpu}}) {
    auto c = fiftySteps();
    c.train.steps = 8;
    c.train.checkpoint_every = 4;
    Recorded whole, resumed;
    auto o = runOptions(from);
    const auto dirA = ts::testsupport::tempDir("cudackpt", std::string(from) + "_whole");
    ASSERT_EQ(ts::testsupport::runTrainer(c, whole, dirA.string(), o).status, "completed");
    o.backend = to;
    o.resume = (dirA / "checkpoints" / "step_00000004").string();
    const auto dirB = ts::testsupport::tempDir("cudackpt", std::string(to) + "_resumed");
    const auto r = ts::testsupport::runTrainer(c, resumed, dirB.string(), o);
    ASSERT_EQ(r.status, "completed") << from << " -> " << to << ": " << r.reason;
    const auto fa = engine::SafetensorsFile::load(
        (dirA / "checkpoints" / "step_00000008" / "model.safetensors").string());
    const auto fb = engine::SafetensorsFile::load(
        (dirB / "checkpoints" / "step_00000008" / "model.safetensors").string());
    ASSERT_EQ(fa.entries().size(), fb.entries().size());
    for (const auto& [name, e] : fa.entries()) {
      const auto x = fa.f32(name), y = fb.f32(name);
      ASSERT_EQ(x.size(), y.size()) << name;
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(x[i], y[i], 1e-4 + 1e-3 * std::fabs(x[i]))
            << from << " -> " << to << ": " << name << "[" << i << "]";
    }
  }
}
