// The issue's learning criterion for bf16, on the built-in default preset (3-digit addition,
// 4000 steps): bf16 (fp32 GEMMs on upcast copies, and bf16 GEMMs) reaches the accuracy fp32
// reaches. A slow test (three whole runs, ~2 min on 2 cores; up to nine), labelled e2e so the
// sanitizer run skips it.
//
// Why up to 3 seeds per policy and not one: the task has loss plateaus whose exit step is
// chaotic, and oneDNN's kernels (so the trajectory) differ per CPU. A run of any policy can end
// on a plateau: seed 1337 bf16 ended at 94.5% on an AVX512-BF16 machine (100% on AVX2); on an
// AVX2 machine seed 1 with bf16 GEMMs stayed at val loss 0.46 from step 1500 (14.1%) and seed 4
// fp32 at 0.92 (0.0%), while the other seeds of 1337, 1..5 reached 98.4-100% under every policy.
// A broken policy misses on every seed, so it still fails; bench/accuracy.sh measures the mean and
// spread over 3 seeds (the issue's accuracy table), which CI cannot afford as a test.
#include <gtest/gtest.h>

#include <array>

#include "../support/TrainerHarness.h"
#include "trainscope/core/config/Config.h"

using ts::core::EventType;

namespace {

constexpr std::array<int, 3> kSeeds = {1337, 1, 2};

// "bf16-gemm": bf16 with precision.gemm bf16 (what "auto" picks where the native kernel is
// faster; emulated elsewhere).
ts::core::RunConfig defaultPreset(const std::string& policy, int seed) {
  const bool gemm = policy == "bf16-gemm";
  auto r = ts::core::loadConfigWithOverrides(
      std::string(TRAINSCOPE_PRESET_DIR) + "/default.json",
      {"precision.policy=" + std::string(gemm ? "bf16" : policy),
       "precision.gemm=" + std::string(gemm ? "bf16" : "fp32"), "device.threads=2",
       "train.eval_every=4000", "train.seed=" + std::to_string(seed)});
  if (!r.ok()) throw std::runtime_error("default preset: " + r.issues.front().message);
  return *r.config;
}

}  // namespace

TEST(PrecisionLearning, Bf16ReachesTheFp32AccuracyOnTheDefaultPresetInOneOfThreeSeeds) {
  // The preset's documented target is 100% exact match on held-out sums; a trained run wobbles
  // by a sum or two at its last step (seed 2 bf16 GEMMs: 100% at step 3500, 98.4% at 4000).
  constexpr double kTarget = 125.0 / 128.0;
  for (const char* policy : {"fp32", "bf16", "bf16-gemm"}) {
    std::string tried;
    bool reached = false;
    for (const int seed : kSeeds) {
      const auto dir = ts::testsupport::tempDir("precision_learning", policy);
      ts::testsupport::Recorded rec;
      ts::testsupport::RunOptions o;
      o.exactMatchSamples = 128;
      auto r = ts::testsupport::runTrainer(defaultPreset(policy, seed), rec, dir.string(), o);
      ASSERT_EQ(r.status, "completed") << policy << " seed " << seed << ": " << r.reason;
      const auto evals = rec.of(EventType::Eval);
      ASSERT_FALSE(evals.empty());
      const double acc = evals.back()["accuracy"].get<double>();
      tried += " seed " + std::to_string(seed) + ": " + std::to_string(acc);
      std::filesystem::remove_all(dir);
      if (acc >= kTarget) {
        reached = true;
        break;
      }
    }
    EXPECT_TRUE(reached) << policy << " reached no " << kTarget << " exact match:" << tried;
  }
}
