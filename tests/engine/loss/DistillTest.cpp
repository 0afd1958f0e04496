// Distillation (distill.*): a student trains on alpha T^2 KL(teacher || student) + (1 - alpha)
// CE against a frozen, forward-only teacher loaded from a checkpoint. Step events carry both
// terms and the objective is exactly their mix; alpha 0 is plain training (technique off); the
// teacher's memory (fp32, bf16 or NF4 storage, forward-only activations) is reported as its own
// and predicted exactly by the estimator; a teacher that does not fit is refused naming why. And
// the learning test: a small student distilled from a bigger trained teacher ends with a lower
// held-out loss than the same student trained alone for the same steps (3 seeds, both printed).
// The loss op itself is checked against fp64 and finite differences in
// tests/kernels/distill_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "../../support/TrainerHarness.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/io/ModelSource.h"

using namespace ts;
using core::EventType;
using core::MemoryCategory;
using core::MemoryTier;
using testsupport::Recorded;
namespace fs = std::filesystem;

namespace {
// A teacher: the tiny addition model, wider, trained `steps` steps; its last checkpoint.
std::string trainTeacher(const fs::path& dir, int steps, int dModel, int layers) {
  auto c = testsupport::tinyAdditionConfig();
  c.model.d_model = dModel;
  c.model.heads = 4;
  c.model.layers = layers;
  c.train.steps = steps;
  c.train.eval_every = 0;
  c.optimizer.lr = 3e-3;
  Recorded rec;
  const auto r = testsupport::runTrainer(c, rec, dir.string());
  EXPECT_EQ(r.status, "completed") << r.reason;
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", steps);
  return (dir / "checkpoints" / name).string();
}
}  // namespace

TEST(DistillTrainer, BothTermsInStepsAlphaZeroIsPlainAndTheTeachersMemoryIsPredicted) {
  const fs::path dir = testsupport::tempDir("distill", "basic");
  const std::string teacher = trainTeacher(dir / "teacher", 12, 64, 2);
  auto student = testsupport::tinyAdditionConfig();
  student.train.eval_every = 0;
  Recorded plainRec;
  ASSERT_EQ(testsupport::runTrainer(student, plainRec, (dir / "plain").string()).status,
            "completed");
  const auto plain = plainRec.of(EventType::Step);

  auto d = student;
  d.distill.teacher_checkpoint = teacher;
  d.distill.temperature = 2.0;
  d.distill.alpha = 0.0;
  Recorded zeroRec;
  auto res = testsupport::runTrainer(d, zeroRec, (dir / "alpha0").string());
  ASSERT_EQ(res.status, "completed") << res.reason;
  const auto zero = zeroRec.of(EventType::Step);
  ASSERT_EQ(zero.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    const double a = plain[i]["loss"].get<double>(), b = zero[i]["loss"].get<double>();
    EXPECT_NEAR(a, b, 1e-5 * a) << "alpha 0 is plain training, step " << i;
    EXPECT_NEAR(zero[i]["distill_ce"].get<double>(), a, 1e-5 * a);
  }

  const core::ModelConfig tm = engine::modelConfigAt(teacher);
  EXPECT_EQ(tm.d_model, 64);
  for (const char* dtype : {"fp32", "bf16", "nf4"}) {
    auto c = d;
    c.distill.alpha = 0.6;
    c.distill.teacher_dtype = dtype;
    Recorded rec;
    res = testsupport::runTrainer(c, rec, (dir / dtype).string());
    ASSERT_EQ(res.status, "completed") << dtype << ": " << res.reason;
    const auto steps = rec.of(EventType::Step);
    ASSERT_EQ(steps.size(), 12u);
    for (const auto& s : steps) {
      const double ce = s["distill_ce"], kl = s["distill_kl"], loss = s["loss"];
      EXPECT_GT(kl, 0.0);
      EXPECT_NEAR(loss, 0.4 * ce + 0.6 * 4.0 * kl, 1e-9 * loss) << dtype;
    }
    EXPECT_LT(steps.back()["distill_kl"].get<double>(), steps.front()["distill_kl"].get<double>())
        << dtype << ": the student moves towards the teacher";
    // The teacher's share, in the memory event and in the estimator's prediction.
    const auto mem = rec.of(EventType::Memory);
    ASSERT_FALSE(mem.empty());
    ASSERT_TRUE(mem.back().contains("teacher")) << dtype;
    const auto teacherMem = core::memoryReportFromJson(mem.back()["teacher"]);
    const int64_t tParams =
        teacherMem.ranks.at(0).at(MemoryTier::Device, MemoryCategory::Parameters).current;
    core::RunConfig pc = c;
    pc.model.vocab = 14;
    pc.precision.gemm = "fp32";
    core::EstimateOptions eo;
    eo.teacher_model = tm;
    const auto est = core::estimateMemory(pc, eo);
    const int64_t n = est.params.teacher;
    if (std::string(dtype) == "fp32") EXPECT_EQ(tParams, 4 * n);
    if (std::string(dtype) == "bf16") EXPECT_EQ(tParams, 2 * n);
    if (std::string(dtype) == "nf4") EXPECT_LT(tParams, 3 * n);  // 4.1 bits on the linears
    const auto& predicted = est.report;
    for (int k = 0; k < core::kMemoryCategoryCount; ++k) {
      const auto cat = static_cast<MemoryCategory>(k);
      EXPECT_EQ(predicted.ranks.at(0).at(MemoryTier::Device, cat).peak,
                res.memory.ranks.at(0).at(MemoryTier::Device, cat).peak)
          << dtype << " " << core::toString(cat);
    }
  }
  // A teacher of another vocabulary or too few positions is refused before training.
  auto bad = d;
  bad.model.seq_len = 32;
  bad.model.arch = "gpt2";
  Recorded badRec;
  res = testsupport::runTrainer(bad, badRec, (dir / "bad").string());
  EXPECT_EQ(res.status, "failed");
  EXPECT_TRUE(res.badInput);
  EXPECT_NE(res.reason.find("distill.teacher_checkpoint: the teacher has 16 positions"),
            std::string::npos)
      << res.reason;
  fs::remove_all(dir);
}

TEST(DistillLearning, ADistilledStudentBeatsTheSameStudentAlone) {
  const fs::path dir = testsupport::tempDir("distill", "learning");
  const std::string teacher = trainTeacher(dir / "teacher", 400, 64, 2);
  double sumAlone = 0, sumDistilled = 0;
  int wins = 0;
  for (int seed : {1, 2, 3}) {
    auto s = testsupport::tinyAdditionConfig();
    s.model.layers = 1;
    s.model.d_model = 32;
    s.train.steps = 150;
    s.train.eval_every = 0;
    s.train.seed = seed;
    s.optimizer.lr = 3e-3;
    Recorded a;
    const auto alone =
        testsupport::runTrainer(s, a, (dir / ("alone" + std::to_string(seed))).string());
    ASSERT_EQ(alone.status, "completed") << alone.reason;
    s.distill.teacher_checkpoint = teacher;
    s.distill.temperature = 2.0;
    s.distill.alpha = 0.5;
    Recorded b;
    const auto distilled =
        testsupport::runTrainer(s, b, (dir / ("distilled" + std::to_string(seed))).string());
    ASSERT_EQ(distilled.status, "completed") << distilled.reason;
    std::printf("seed %d: held-out CE alone %.4f, distilled %.4f\n", seed, alone.finalValLoss,
                distilled.finalValLoss);
    sumAlone += alone.finalValLoss;
    sumDistilled += distilled.finalValLoss;
    wins += distilled.finalValLoss < alone.finalValLoss;
  }
  std::printf("mean held-out CE: alone %.4f, distilled %.4f (%d of 3 seeds better)\n", sumAlone / 3,
              sumDistilled / 3, wins);
  EXPECT_LT(sumDistilled, sumAlone);
  EXPECT_GE(wins, 2);
  fs::remove_all(dir);
}
