// The CPU kernels' working space is tracked workspace (issue 22 item 6): a model allocates one
// scratch region (core::savedState's "kernelScratch", one slice per thread) and binds it, and
// every lease a training run's kernels take comes from it (none short, none from the heap).
// The tracker's workspace grows by the region when the threads double, as the description
// says, and the estimator predicts the measured workspace to the byte.
#include <gtest/gtest.h>

#include <string>

#include "../../support/TrainerHarness.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/kernels/CpuScratch.h"

using namespace ts;
using core::MemoryCategory;
using core::MemoryTier;
namespace fs = std::filesystem;

namespace {

struct Variant {
  std::string name;
  std::function<void(core::RunConfig&)> apply;
};

core::RunConfig baseConfig() {
  auto c = testsupport::tinyAdditionConfig();
  c.model.d_model = 64;
  c.model.heads = 4;
  c.train.steps = 3;
  c.train.eval_every = 2;  // eval forwards lease too
  return c;
}

int64_t workspacePeak(const engine::TrainResult& r) {
  return r.memory.ranks.at(0).at(MemoryTier::Device, MemoryCategory::Workspace).peak;
}

}  // namespace

TEST(KernelScratch, EveryLeaseOfATrainingRunComesFromTheTrackedRegion) {
  const fs::path dir = testsupport::tempDir("kscratch", "runs");
  // A trained teacher for the distillation variant (its forward binds a region of its own).
  std::string teacher;
  {
    auto t = baseConfig();
    t.train.steps = 2;
    testsupport::Recorded rec;
    const auto r = testsupport::runTrainer(t, rec, (dir / "teacher").string());
    ASSERT_EQ(r.status, "completed") << r.reason;
    teacher = r.lastCheckpoint;
    ASSERT_FALSE(teacher.empty());
  }
  const std::vector<Variant> variants = {
      {"gpt2 naive", [](core::RunConfig&) {}},
      {"gpt2 flash", [](core::RunConfig& c) { c.attention.impl = "flash"; }},
      {"llama gqa flash",
       [](core::RunConfig& c) {
         c.model.arch = "llama";
         c.model.kv_heads = 2;
         c.attention.impl = "flash";
       }},
      {"bf16 gemm",
       [](core::RunConfig& c) {
         c.precision.policy = "bf16";
         c.precision.gemm = "bf16";
       }},
      {"distill flash",
       [&](core::RunConfig& c) {
         c.attention.impl = "flash";
         c.distill.teacher_checkpoint = teacher;
         c.distill.alpha = 0.5;
       }},
  };
  for (const auto& v : variants) {
    int64_t ws[3] = {0, 0, 0};
    for (int threads : {1, 2}) {
      auto c = baseConfig();
      v.apply(c);
      c.device.threads = threads;
      const auto s0 = kernels::cpu::scratchStats();
      testsupport::Recorded rec;
      const auto r = testsupport::runTrainer(
          c, rec, (dir / (v.name + std::to_string(threads))).string(), testsupport::RunOptions{});
      ASSERT_EQ(r.status, "completed") << v.name << ": " << r.reason;
      const auto s1 = kernels::cpu::scratchStats();
      EXPECT_GT(s1.regionLeases, s0.regionLeases) << v.name;
      EXPECT_EQ(s1.shortfalls, s0.shortfalls)
          << v.name << ", " << threads << " threads: a kernel leased more than the region holds ("
          << s1.shortfallFloats << " floats)";
      EXPECT_EQ(s1.unboundLeases, s0.unboundLeases)
          << v.name << ": a kernel ran with no region bound (untracked heap scratch)";
      ws[threads] = workspacePeak(r);

      // The estimator, told the backend's threads, predicts the tracker's workspace exactly.
      auto ec = c;
      ec.model.vocab = 14;
      core::EstimateOptions eo;
      eo.cpu_kernel_threads = threads;
      if (!c.distill.teacher_checkpoint.empty())
        eo.teacher_model = engine::modelConfigAt(c.distill.teacher_checkpoint);
      const auto est = core::estimateMemory(ec, eo);
      EXPECT_EQ(est.report.ranks.at(0).at(MemoryTier::Device, MemoryCategory::Workspace).peak,
                ws[threads])
          << v.name << ", " << threads << " threads";
    }
    // Doubling the threads adds one slice per thread of the region, as savedState sizes it.
    auto c = baseConfig();
    v.apply(c);
    const auto arch = core::archSpecOf(c.model, 14);
    auto slice = [&](int threads) {
      auto o = core::savedStateOptionsOf(c, arch.layers, c.precision.gemm == "bf16", threads);
      return core::kernelScratchPerThread(arch, o);
    };
    int64_t per1 = slice(1), per2 = slice(2);
    EXPECT_GT(per1, 0) << v.name;
    if (!c.distill.teacher_checkpoint.empty()) {  // the teacher's forward-only region counts too
      const auto ta = core::archSpecOf(engine::modelConfigAt(teacher), 14);
      core::SavedStateOptions to;
      to.flash = c.attention.impl == "flash";
      to.forwardOnly = true;
      for (int t : {1, 2}) {
        to.kernelThreads = t;
        (t == 1 ? per1 : per2) += core::kernelScratchPerThread(ta, to);
      }
    }
    EXPECT_EQ(ws[2] - ws[1], 4 * (2 * per2 - per1)) << v.name;
  }
  fs::remove_all(dir);
}
