// Training loop: learning on the addition task, bitwise resume, NaN handling, stop command. The
// tests that train, checkpoint and resume run on the CPU backend and on the guarded CPU backend
// (TestBackends.h), which proves they touch tensor memory only through the backend; a run on the
// guarded backend also equals the CPU run bit for bit, checkpoint files included.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "../../support/TrainerHarness.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/GuardedCpuBackend.h"

using namespace ts::engine;
using ts::core::EventType;
namespace fs = std::filesystem;

namespace {

fs::path tempDir(const std::string& name) {
  return ts::testsupport::tempDir("trainer_test", name);
}
using ts::testsupport::Recorded;

ts::core::RunConfig smallConfig() {
  return ts::testsupport::tinyAdditionConfig();
}

TrainResult runWith(const ts::core::RunConfig& c, Recorded& rec, const std::string& runDir,
                    const std::string& resume = "", std::function<void(Trainer&)> before = {},
                    int exactMatchSamples = 16, const std::string& backend = "cpu") {
  ts::testsupport::RunOptions o;
  o.backend = backend;
  o.resume = resume;
  o.before = std::move(before);
  o.exactMatchSamples = exactMatchSamples;
  return ts::testsupport::runTrainer(c, rec, runDir, o);
}

// Trainer tests that run on each test backend (GetParam(): "cpu", "cpu-guarded").
class TrainerOn : public ::testing::TestWithParam<std::string> {
 protected:
  std::string tag(const std::string& name) const {
    return name + "_" + ts::testsupport::backendTestName(GetParam());
  }
};

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The learning tests' model and optimizer: 4 heads, 64 wide, micro-batch 32, AdamW at 3e-3 on a
// cosine schedule down to 3e-4; one eval at the end.
ts::core::RunConfig learningConfig(int steps, int warmup) {
  auto c = smallConfig();
  c.model.heads = 4;
  c.model.d_model = 64;
  c.model.seq_len = 16;
  c.train.steps = steps;
  c.train.micro_batch = 32;
  c.train.grad_accum = 1;
  c.train.eval_every = steps;
  c.optimizer.lr = 3e-3;
  c.optimizer.weight_decay = 0.0;
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = warmup;
  c.schedule.min_lr = 3e-4;
  return c;
}

}  // namespace

// Learning test: 2-digit addition (answers exact-matched by greedy decoding on 64 held-out
// problems) reaches >= 90% exact match within 600 steps with this small model (it is at 100%
// from about step 400; ~5 s of CPU on one core).
TEST_P(TrainerOn, LearnsAdditionToStatedAccuracy) {
  auto c = learningConfig(600, 20);
  c.model.layers = 2;
  const fs::path dir = tempDir(tag("learn"));
  Recorded rec;
  auto r = runWith(c, rec, dir.string(), "", {}, 64, GetParam());
  ASSERT_EQ(r.status, "completed") << r.reason;
  auto evals = rec.of(EventType::Eval);
  ASSERT_FALSE(evals.empty());
  ASSERT_TRUE(evals.back().contains("accuracy"));
  EXPECT_GE(evals.back()["accuracy"].get<double>(), 0.9) << evals.back().dump();
  EXPECT_EQ(evals.back()["exact_match_samples"], 64);
  auto steps = rec.of(EventType::Step);
  ASSERT_EQ(steps.size(), 600u);
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() * 0.5);
  fs::remove_all(dir);
}

// The same learning test for the llama description (RMSNorm, RoPE, SwiGLU of width 176,
// grouped-query attention with 2 kv heads, untied head): >= 90% exact match in 2400 steps. It
// needs a third block and more steps than GPT-2 (measured: 2 blocks plateau near val loss 0.46;
// 3 blocks leave the plateau around step 600 and are at 89-94% by step 1200, 97% by 1600; the
// extra steps are margin for other CPUs' rounding): with rotary positions only, the digits'
// places are found relative to '+' and '=' instead of read off a position table.
TEST(Trainer, LlamaLearnsAdditionToStatedAccuracy) {
  // The default preset's optimizer and schedule (resources/presets/default.json).
  auto c = learningConfig(2400, 50);
  c.model.arch = "llama";
  c.model.layers = 3;
  c.model.kv_heads = 2;
  c.model.d_ff = 176;
  c.train.seed = 1337;
  c.train.grad_clip = 1.0;
  c.optimizer.betas = {0.9, 0.98};
  c.device.threads = 2;
  const fs::path dir = tempDir("learn_llama");
  Recorded rec;
  auto r = runWith(c, rec, dir.string(), "", {}, 64);
  ASSERT_EQ(r.status, "completed") << r.reason;
  auto evals = rec.of(EventType::Eval);
  ASSERT_FALSE(evals.empty());
  EXPECT_GE(evals.back().value("accuracy", 0.0), 0.9) << evals.back().dump();
  auto steps = rec.of(EventType::Step);
  ASSERT_EQ(steps.size(), 2400u);
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() * 0.5);
  fs::remove_all(dir);
}

TEST_P(TrainerOn, StepEventsHaveFieldsAndMemoryMatchesTracker) {
  auto c = smallConfig();
  const fs::path dir = tempDir(tag("fields"));
  Recorded rec;
  auto r = runWith(c, rec, dir.string(), "", {}, 16, GetParam());
  ASSERT_EQ(r.status, "completed") << r.reason;
  auto steps = rec.of(EventType::Step);
  ASSERT_EQ(steps.size(), 12u);
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    EXPECT_EQ(s["step"].get<int64_t>(), int64_t(i + 1));
    EXPECT_EQ(s["tokens"].get<int64_t>(), int64_t(i + 1) * 4 * 16 * 2);
    EXPECT_TRUE(std::isfinite(s["loss"].get<double>()));
    EXPECT_GT(s["grad_norm"].get<double>(), 0.0);
    EXPECT_GE(s["lr"].get<double>(), 0.0);
    EXPECT_GT(s["tokens_per_s"].get<double>(), 0.0);
    EXPECT_EQ(s["loss_scale"].get<double>(), 1.0);
    EXPECT_FALSE(s["skipped"].get<bool>());
  }
  // Evals at 5, 10 and the end; a checkpoint at the end.
  auto evals = rec.of(EventType::Eval);
  ASSERT_EQ(evals.size(), 3u);
  EXPECT_EQ(evals[0]["step"], 5);
  EXPECT_TRUE(evals[0].contains("val_loss"));
  EXPECT_TRUE(evals[0].contains("accuracy"));
  auto ck = rec.of(EventType::Checkpoint);
  ASSERT_EQ(ck.size(), 1u);
  EXPECT_EQ(ck[0]["step"], 12);
  EXPECT_TRUE(fs::exists(fs::path(ck[0]["path"].get<std::string>()) / "state.json"));
  auto mem = rec.of(EventType::Memory);
  ASSERT_GE(mem.size(), 1u);
  const auto report = ts::core::memoryReportFromJson(mem[0]);
  EXPECT_GT(report.ranks.at(0)
                .at(ts::core::MemoryTier::Device, ts::core::MemoryCategory::Activations)
                .peak,
            0);
  fs::remove_all(dir);
}

// A run resumed from its step-6 checkpoint reproduces steps 7..12 of the uninterrupted run
// bit for bit (same thread count).
// Every precision policy resumes bitwise (pure_bf16 keeps its Adam state in bf16, fp16 its loss
// scaler, fp8 its amax histories and the scales of its fp8 weights), on each test backend.
class ResumePolicy : public ::testing::TestWithParam<std::tuple<std::string, const char*>> {};

TEST_P(ResumePolicy, ResumeIsBitwiseIdentical) {
  auto c = smallConfig();
  const std::string backend = std::get<0>(GetParam());
  const std::string policy = std::get<1>(GetParam());
  c.precision.policy = policy == "fp8_blockwise" ? "fp8" : policy;
  if (policy == "fp8_blockwise") c.precision.fp8.recipe = "blockwise";
  // A short history so the amax ring has wrapped (position != 0) by the checkpoint.
  c.precision.fp8.amax_history = 4;
  c.train.checkpoint_every = 6;
  c.train.eval_every = 4;
  const std::string tag = "resume_" + policy + "_" + ts::testsupport::backendTestName(backend);
  const fs::path dirA = tempDir(tag + "A"), dirB = tempDir(tag + "B");
  Recorded full;
  ASSERT_EQ(runWith(c, full, dirA.string(), "", {}, 16, backend).status, "completed");
  const std::string ck6 = (dirA / "checkpoints" / "step_00000006").string();
  ASSERT_TRUE(fs::exists(ck6));
  Recorded resumed;
  auto r = runWith(c, resumed, dirB.string(), ck6, {}, 16, backend);
  ASSERT_EQ(r.status, "completed") << r.reason;
  auto a = full.of(EventType::Step), b = resumed.of(EventType::Step);
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const auto& x = a[6 + i];
    const auto& y = b[i];
    EXPECT_EQ(x["step"], y["step"]);
    EXPECT_EQ(x["tokens"], y["tokens"]);
    // Bitwise: compare the doubles exactly.
    EXPECT_EQ(x["loss"].get<double>(), y["loss"].get<double>()) << "step " << x["step"];
    EXPECT_EQ(x["grad_norm"].get<double>(), y["grad_norm"].get<double>()) << "step " << x["step"];
    EXPECT_EQ(x["lr"].get<double>(), y["lr"].get<double>());
  }
  auto ea = full.of(EventType::Eval), eb = resumed.of(EventType::Eval);
  ASSERT_FALSE(eb.empty());
  EXPECT_EQ(ea.back()["val_loss"].get<double>(), eb.back()["val_loss"].get<double>());
  fs::remove_all(dirA);
  fs::remove_all(dirB);
}

INSTANTIATE_TEST_SUITE_P(
    Trainer, ResumePolicy,
    ::testing::Combine(::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                       ::testing::Values("fp32", "bf16", "fp16", "pure_bf16", "fp8",
                                         "fp8_blockwise")),
    [](const auto& info) {
      return ts::testsupport::backendTestName(std::get<0>(info.param)) + "_" +
             std::get<1>(info.param);
    });

// model.dropout, for both architectures: masks keyed by the step, so a run resumed from its
// step-6 checkpoint reproduces steps 7..12 bit for bit (with gradient accumulation and
// checkpointing, whose recomputation draws the same masks); and it really drops: the losses
// differ from the same run without dropout, while evaluation (no dropout) still learns.
TEST(Trainer, DropoutRunsResumeBitwiseForBothArchitectures) {
  for (const char* arch : {"gpt2", "llama"}) {
    auto c = smallConfig();
    c.model.arch = arch;
    if (c.model.arch == "llama") c.model.kv_heads = c.model.heads / 2;
    c.model.dropout = 0.1;
    c.train.grad_accum = 2;
    c.memory.checkpointing = "all";
    c.train.checkpoint_every = 6;
    c.train.eval_every = 6;
    const std::string tag = std::string("dropout_") + arch;
    const fs::path dirA = tempDir(tag + "A"), dirB = tempDir(tag + "B"), dirC = tempDir(tag + "C");
    Recorded full, resumed, plain;
    ASSERT_EQ(runWith(c, full, dirA.string()).status, "completed") << arch;
    const std::string ck6 = (dirA / "checkpoints" / "step_00000006").string();
    auto r = runWith(c, resumed, dirB.string(), ck6);
    ASSERT_EQ(r.status, "completed") << r.reason;
    auto a = full.of(EventType::Step), b = resumed.of(EventType::Step);
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), 6u);
    for (size_t i = 0; i < 6; ++i) {
      EXPECT_EQ(a[6 + i]["loss"].get<double>(), b[i]["loss"].get<double>()) << arch << " " << i;
      EXPECT_EQ(a[6 + i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>());
    }
    c.model.dropout = 0.0;
    ASSERT_EQ(runWith(c, plain, dirC.string()).status, "completed");
    auto p = plain.of(EventType::Step);
    EXPECT_NE(p[0]["loss"].get<double>(), a[0]["loss"].get<double>()) << arch;
    for (const auto& d : {dirA, dirB, dirC}) fs::remove_all(d);
  }
}

// 8-bit AdamW (optimizer.state_bits 8) tracks 32-bit AdamW: 500 steps of the addition task on
// a model whose matrices are all >= 4096 elements (8-bit state), 3 seeds; the mean final loss
// (last 50 steps) within 15% of 32-bit's on every seed (measured: see the closing printout), and
// a run resumed from its step-250 checkpoint reproduces steps 251..500 bit for bit.
TEST(Trainer, EightBitAdamWTracksThirtyTwoBitAndResumesBitwise) {
  auto tail = [](const std::vector<nlohmann::json>& steps) {
    double s = 0;
    for (size_t i = steps.size() - 50; i < steps.size(); ++i) s += steps[i]["loss"].get<double>();
    return s / 50;
  };
  for (int seed : {1, 2, 3}) {
    auto c = smallConfig();
    c.model.d_model = 64;
    c.model.heads = 4;
    c.train.steps = 500;
    c.train.eval_every = 0;
    c.train.seed = seed;
    c.optimizer.lr = 3e-3;
    c.optimizer.weight_decay = 0.01;
    std::vector<double> finals;
    for (int bits : {32, 8}) {
      c.optimizer.state_bits = bits;
      c.train.checkpoint_every = bits == 8 ? 250 : 0;
      const fs::path dir = tempDir("adam" + std::to_string(bits) + "_" + std::to_string(seed));
      Recorded rec;
      auto r = runWith(c, rec, dir.string());
      ASSERT_EQ(r.status, "completed") << r.reason;
      const auto steps = rec.of(EventType::Step);
      ASSERT_EQ(steps.size(), 500u);
      finals.push_back(tail(steps));
      EXPECT_LT(finals.back(), steps.front()["loss"].get<double>() * 0.6) << bits << " learns";
      if (bits == 8 && seed == 1) {
        const fs::path dirB = tempDir("adam8_resume");
        Recorded resumed;
        auto rr =
            runWith(c, resumed, dirB.string(), (dir / "checkpoints" / "step_00000250").string());
        ASSERT_EQ(rr.status, "completed") << rr.reason;
        const auto b = resumed.of(EventType::Step);
        ASSERT_EQ(b.size(), 250u);
        for (size_t i = 0; i < b.size(); ++i)
          ASSERT_EQ(steps[250 + i]["loss"].get<double>(), b[i]["loss"].get<double>()) << i;
        fs::remove_all(dirB);
      }
      fs::remove_all(dir);
    }
    std::printf("seed %d: final loss 32-bit %.4f, 8-bit %.4f (ratio %.3f)\n", seed, finals[0],
                finals[1], finals[1] / finals[0]);
    EXPECT_NEAR(finals[1] / finals[0], 1.0, 0.15) << "seed " << seed;
  }
}

// The guarded backend runs the CPU kernels on the same values: every step, eval and checkpoint
// byte of a run on it equals the CPU run's, for every policy (the guard changes where memory may
// be touched, not what is computed). fp16 starts at a scale that overflows, so skipped steps and
// the inf/NaN check are in it too.
TEST(Trainer, GuardedBackendRunIsTheCpuRunBitForBit) {
  for (const char* policy : {"fp32", "fp16", "pure_bf16", "fp8", "fp8_blockwise", "bf16_gemm",
                             "fp32_int8", "fp16_int8", "bf16_int8_ckpt"}) {
    auto c = smallConfig();
    const std::string pol = policy;
    // int8 compression packs with backend ops (rows and, under 16-bit policies, the centered
    // residual stream), so it runs on the guarded backend too.
    const auto us = pol.find('_');
    if (pol.find("int8") != std::string::npos) {
      c.memory.activation_compression = "int8";
      c.precision.policy = pol.substr(0, us);
      if (pol.find("ckpt") != std::string::npos) {
        c.memory.checkpointing = "every_k";
        c.memory.checkpoint_every = 2;
      }
    } else {
      c.precision.policy = pol == "fp8_blockwise" ? "fp8" : pol == "bf16_gemm" ? "bf16" : pol;
    }
    if (pol == "fp8_blockwise") c.precision.fp8.recipe = "blockwise";
    if (pol == "bf16_gemm") c.precision.gemm = "bf16";
    if (pol == "fp16") c.precision.loss_scale.init = std::ldexp(1.0, 30);
    c.train.steps = 6;
    c.train.checkpoint_every = 3;
    std::vector<Recorded> recs(2);
    std::vector<fs::path> dirs;
    for (int i = 0; i < 2; ++i) {
      const std::string backend = ts::testsupport::engineTestBackends()[size_t(i)];
      dirs.push_back(tempDir("same_" + pol + "_" + ts::testsupport::backendTestName(backend)));
      ASSERT_EQ(runWith(c, recs[size_t(i)], dirs.back().string(), "", {}, 16, backend).status,
                "completed")
          << pol << " on " << backend;
    }
    auto a = recs[0].of(EventType::Step), b = recs[1].of(EventType::Step);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << pol << " step " << i;
      EXPECT_EQ(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()) << pol;
      EXPECT_EQ(a[i]["skipped"], b[i]["skipped"]) << pol;
    }
    if (pol == "fp16") EXPECT_TRUE(a[0]["skipped"].get<bool>()) << "no overflow exercised";
    EXPECT_EQ(recs[0].of(EventType::Eval).back()["val_loss"].get<double>(),
              recs[1].of(EventType::Eval).back()["val_loss"].get<double>())
        << pol;
    for (const char* step : {"step_00000003", "step_00000006"})
      for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
        const std::string x = readAll(dirs[0] / "checkpoints" / step / file);
        EXPECT_FALSE(x.empty()) << step << "/" << file;
        EXPECT_TRUE(x == readAll(dirs[1] / "checkpoints" / step / file))
            << pol << ": " << step << "/" << file << " differs";
      }
    for (const auto& d : dirs) fs::remove_all(d);
  }
}

// On a GPU every host read (a copy to the host, an op that returns a host value) waits for the
// stream, so a step's count of them must not grow with the number of tensors. Counted on the
// guarded backend as the difference between 4 and 2 steps of the same run (the final eval,
// the memory event and the final checkpoint are in both), for 2 and 4 layers. The 16-bit
// policies' gradient norm and fp16's overflow check used to read once per tensor.
TEST(Trainer, HostReadsPerStepDoNotGrowWithTheModel) {
  const std::set<std::string> reads = {"copyToHost",     "sumSquares",         "sumSquaresHalf",
                                       "countNonFinite", "countNonFiniteHalf", "amax"};
  auto perStep = [&](const std::string& policy, int layers) {
    int64_t n[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      auto c = smallConfig();
      c.precision.policy = policy;
      c.precision.loss_scale.init = 128;  // fp16: no overflow, so no step skips its norm
      c.model.layers = layers;
      c.train.steps = i == 0 ? 2 : 4;
      c.train.eval_every = 0;
      c.train.grad_clip = 1.0;
      Recorded rec;
      ts::testsupport::RunOptions o;
      o.backend = "cpu-guarded";
      o.after = [&](ts::kernels::Backend& b) {
        for (const auto& [name, count] : ts::kernels::guardedCallCounts(b))
          if (reads.count(name)) n[i] += count;
      };
      const auto dir = tempDir("reads_" + policy + "_" + std::to_string(layers));
      EXPECT_EQ(ts::testsupport::runTrainer(c, rec, dir.string(), o).status, "completed");
      for (const auto& s : rec.of(EventType::Step)) EXPECT_FALSE(s["skipped"].get<bool>());
      fs::remove_all(dir);
    }
    return double(n[1] - n[0]) / 2;
  };
  for (const std::string policy : {"fp32", "bf16", "fp16", "pure_bf16"}) {
    const double two = perStep(policy, 2), four = perStep(policy, 4);
    std::printf("%-9s host reads per step: %.1f (2 layers), %.1f (4 layers)\n", policy.c_str(), two,
                four);
    EXPECT_EQ(two, four) << policy;
    // A loss read per micro-batch, the gradient norm, fp16's overflow check.
    EXPECT_LE(four, smallConfig().train.grad_accum + 2) << policy;
  }
}

// Sparse compression packs on the host (CPU backend only): a backend whose memory is not the
// host's refuses it up front with the reason, instead of faulting mid-step.
TEST(Trainer, SparseCompressionOnAGuardedBackendIsRefusedWithTheReason) {
  auto c = smallConfig();
  c.model.activation = "relu";
  c.memory.activation_compression = "sparse";
  Recorded rec;
  auto r = runWith(c, rec, tempDir("comp_sparse").string(), "", {}, 16, "cpu-guarded");
  EXPECT_EQ(r.status, "failed");
  EXPECT_NE(r.reason.find("sparse activation compression runs on the cpu backend only"),
            std::string::npos)
      << r.reason;
  EXPECT_NE(r.reason.find("cpu-guarded"), std::string::npos) << r.reason;
  EXPECT_TRUE(rec.of(EventType::Step).empty());
}

// The 16-bit policies open their fp32 copies in windows whose pages go back: on a backend that
// cannot give pages back (CUDA without the driver's virtual memory management) the run is refused
// up front, naming the backend and what it lacks; fp32 needs no windows and runs.
TEST(Trainer, SixteenBitOnABackendThatCannotGivePagesBackSaysWhy) {
  auto c = smallConfig();
  c.precision.policy = "bf16";
  Recorded rec;
  auto r = runWith(c, rec, tempDir("nodiscard_bf16").string(), "", {}, 16, "cpu-no-discard");
  EXPECT_EQ(r.status, "failed");
  EXPECT_NE(r.reason.find("need a backend that can give pages back (cpu-no-discard cannot)"),
            std::string::npos)
      << r.reason;
  EXPECT_TRUE(rec.of(EventType::Step).empty());
  c.precision.policy = "fp32";
  Recorded rec32;
  EXPECT_EQ(
      runWith(c, rec32, tempDir("nodiscard_fp32").string(), "", {}, 16, "cpu-no-discard").status,
      "completed");
}

// An fp8 checkpoint resumed with a different amax history length is refused, naming the key.
TEST(Trainer, Fp8ResumeWithAnotherHistoryLengthSaysWhy) {
  auto c = smallConfig();
  c.precision.policy = "fp8";
  c.precision.fp8.amax_history = 4;
  c.train.steps = 6;
  c.train.checkpoint_every = 6;
  const fs::path dirA = tempDir("fp8histA"), dirB = tempDir("fp8histB");
  Recorded full;
  ASSERT_EQ(runWith(c, full, dirA.string()).status, "completed");
  c.precision.fp8.amax_history = 2;
  c.train.steps = 8;
  Recorded resumed;
  auto r = runWith(c, resumed, dirB.string(), (dirA / "checkpoints" / "step_00000006").string());
  EXPECT_EQ(r.status, "failed");
  EXPECT_NE(r.reason.find("precision.fp8.amax_history 2"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("h.0.attn.c_attn.weight"), std::string::npos) << r.reason;
  EXPECT_TRUE(resumed.of(EventType::Step).empty());
  fs::remove_all(dirA);
  fs::remove_all(dirB);
}

// A diverging run (huge SGD step, no clipping) stops with an error, status failed, and the
// checkpoint written before it stays the last good one.
TEST_P(TrainerOn, NanLossStopsWithErrorAndKeepsLastGoodCheckpoint) {
  auto c = smallConfig();
  c.train.steps = 40;
  c.train.checkpoint_every = 1;
  c.train.eval_every = 0;
  c.train.grad_clip = 0;
  c.optimizer.type = "sgd";
  c.optimizer.lr = 1e12;
  c.optimizer.momentum = 0.0;
  c.optimizer.weight_decay = 0.0;
  c.schedule.type = "constant";
  const fs::path dir = tempDir(tag("nan"));
  Recorded rec;
  auto r = runWith(c, rec, dir.string(), "", {}, 16, GetParam());
  EXPECT_EQ(r.status, "failed");
  EXPECT_NE(r.reason.find("non-finite"), std::string::npos) << r.reason;
  auto errors = rec.of(EventType::Error);
  ASSERT_EQ(errors.size(), 1u);
  const std::string msg = errors[0]["message"];
  EXPECT_NE(msg.find("last good checkpoint kept"), std::string::npos) << msg;
  auto steps = rec.of(EventType::Step);
  auto ck = rec.of(EventType::Checkpoint);
  ASSERT_FALSE(ck.empty());
  // No checkpoint after the failure; the last one is the last completed step and loads.
  EXPECT_EQ(ck.back()["step"].get<int64_t>(), int64_t(steps.size()));
  for (const auto& s : steps) EXPECT_TRUE(std::isfinite(s["loss"].get<double>()));
  EXPECT_TRUE(fs::exists(fs::path(ck.back()["path"].get<std::string>()) / "state.json"));
  fs::remove_all(dir);
}

TEST_P(TrainerOn, StopCommandEndsWithCheckpointAndStatusStopped) {
  auto c = smallConfig();
  c.train.steps = 1000;
  const fs::path dir = tempDir(tag("stop"));
  Recorded rec;
  ts::core::Command stop;
  stop.type = ts::core::CommandType::Stop;
  ts::core::Command pause;
  pause.type = ts::core::CommandType::Pause;
  // Posted before the run: pause then stop are handled at the first step boundary.
  auto r = runWith(
      c, rec, dir.string(), "",
      [&](Trainer& t) {
        t.post(pause);
        t.post(stop);
      },
      16, GetParam());
  EXPECT_EQ(r.status, "stopped");
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.steps, 0);
  ASSERT_EQ(rec.of(EventType::Checkpoint).size(), 1u);
  fs::remove_all(dir);
}

TEST(Trainer, BadInputIsReportedNotThrown) {
  auto c = smallConfig();
  c.data.source = "text";
  c.data.path = "/nonexistent/file.txt";
  Recorded rec;
  auto r = runWith(c, rec, tempDir("bad").string());
  EXPECT_EQ(r.status, "failed");
  EXPECT_TRUE(r.badInput);
  ASSERT_EQ(rec.of(EventType::Error).size(), 1u);
  EXPECT_NE(rec.of(EventType::Error)[0]["message"].get<std::string>().find("/nonexistent/file.txt"),
            std::string::npos);
  auto c2 = smallConfig();
  c2.precision.policy = "fp4";  // not a policy
  Recorded rec2;
  auto r2 = runWith(c2, rec2, tempDir("bad2").string());
  EXPECT_TRUE(r2.badInput);
  EXPECT_NE(r2.reason.find("precision.policy"), std::string::npos) << r2.reason;
}

// The `profile` command records the next steps and emits a kernel summary with the model's ops
// plus timeline batches.
TEST(Trainer, ProfileCommandEmitsKernelSummaryAndTimeline) {
  auto c = smallConfig();
  c.train.steps = 4;
  Recorded rec;
  ts::core::Command prof;
  prof.type = ts::core::CommandType::Profile;
  prof.steps = 2;
  auto r = runWith(c, rec, tempDir("profile").string(), "", [&](Trainer& t) { t.post(prof); });
  ASSERT_EQ(r.status, "completed") << r.reason;
  auto summaries = rec.of(EventType::KernelSummary);
  ASSERT_EQ(summaries.size(), 1u);
  std::set<std::string> names;
  for (const auto& op : summaries[0]["ops"]) names.insert(op["name"].get<std::string>());
  for (const char* n : {"linear_fwd", "linear_bwd", "attention_fwd", "attention_bwd",
                        "layernorm_fwd", "layernorm_bwd", "adamw", "cross_entropy"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(rec.of(EventType::Kernels).empty());
}

INSTANTIATE_TEST_SUITE_P(Backends, TrainerOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         ts::testsupport::backendParamName);
