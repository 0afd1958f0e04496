// The issue's learning criterion for bf16, on the built-in default preset (3-digit addition,
// 4000 steps): bf16 (fp32 GEMMs on upcast copies, and bf16 GEMMs) reaches the accuracy fp32
// reaches. A slow test (three whole runs, ~2 min on 2 cores), labelled e2e so the sanitizer run
// skips it. The preset trains 4000 steps because at 3000 fp32 itself ended at 96.9% on an AVX2
// machine (oneDNN's kernels differ per CPU, and so does the trajectory); at 4000 the held-out
// loss is ~0 from step 3500 on. The 600-step configs of the unit tests sit on a loss plateau whose
// exit step is chaotic (fp32 itself reaches 0.08-1.0 accuracy over seeds 1-5), so the accuracy
// comparison needs a run that trains past it.
#include <gtest/gtest.h>

#include "../support/TrainerHarness.h"
#include "trainscope/core/Config.h"

using ts::core::EventType;

namespace {

// "bf16-gemm": bf16 with precision.gemm bf16 (what "auto" picks on AMX; emulated elsewhere).
ts::core::RunConfig defaultPreset(const std::string& policy) {
  const bool gemm = policy == "bf16-gemm";
  auto r =
      ts::core::loadConfigWithOverrides(std::string(TRAINSCOPE_PRESET_DIR) + "/default.json",
                                        {"precision.policy=" + std::string(gemm ? "bf16" : policy),
                                         "precision.gemm=" + std::string(gemm ? "bf16" : "fp32"),
                                         "device.threads=2", "train.eval_every=4000"});
  if (!r.ok()) throw std::runtime_error("default preset: " + r.issues.front().message);
  return *r.config;
}

}  // namespace

TEST(PrecisionLearning, Bf16ReachesTheFp32AccuracyOnTheDefaultPreset) {
  double acc[3] = {0, 0, 0};
  const char* policies[3] = {"fp32", "bf16", "bf16-gemm"};
  for (int i = 0; i < 3; ++i) {
    const auto dir = ts::testsupport::tempDir("precision_learning", policies[i]);
    ts::testsupport::Recorded rec;
    ts::testsupport::RunOptions o;
    o.exactMatchSamples = 128;
    auto r = ts::testsupport::runTrainer(defaultPreset(policies[i]), rec, dir.string(), o);
    ASSERT_EQ(r.status, "completed") << policies[i] << ": " << r.reason;
    const auto evals = rec.of(EventType::Eval);
    ASSERT_FALSE(evals.empty());
    acc[i] = evals.back()["accuracy"].get<double>();
    std::filesystem::remove_all(dir);
  }
  // The preset's documented target: 100% exact match on held-out sums; allow one miss in 128.
  EXPECT_GE(acc[0], 127.0 / 128.0) << "fp32 accuracy " << acc[0];
  EXPECT_GE(acc[1], 127.0 / 128.0) << "bf16 accuracy " << acc[1] << " vs fp32 " << acc[0];
  EXPECT_GE(acc[2], 127.0 / 128.0) << "bf16 GEMMs accuracy " << acc[2] << " vs fp32 " << acc[0];
}
