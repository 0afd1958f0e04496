// Planner: the three classic scenarios and the goal semantics.
#include <gtest/gtest.h>

#include <algorithm>

#include "trainscope/core/plan/Planner.h"

using namespace ts::core;

namespace {

constexpr int64_t GiB = 1LL << 30;

}  // namespace

// Consumer GPU: 24 GiB, 64 GiB of RAM, LLaMA-7B at 2048 tokens, micro-batch 4. Full training
// does not fit -> bf16 + checkpointing + 8-bit optimizer + LoRA (or QLoRA).
TEST(Planner, ConsumerGpuSevenBillion) {
  PlanRequest req;
  req.base.model = *modelPreset("llama-7b");
  req.base.train.micro_batch = 4;
  req.base.train.grad_accum = 4;
  req.device_memory = 24 * GiB;
  req.host_memory = 64 * GiB;
  req.goal = PlanGoal::Fit;
  auto r = planTraining(req);
  ASSERT_FALSE(r.plans.empty()) << r.message;
  const Plan& best = r.plans.front();
  SCOPED_TRACE(best.summary);
  EXPECT_EQ(best.plan_class, "adapters");
  EXPECT_EQ(best.config.precision.policy, "bf16");
  EXPECT_NE(best.config.memory.checkpointing, "none");
  EXPECT_EQ(best.config.optimizer.state_bits, 8);
  EXPECT_GT(best.config.finetune.lora.r, 0);
  EXPECT_EQ(best.config.train.micro_batch, 4);  // fit keeps the requested micro-batch
  EXPECT_LE(best.estimate.peak_device, 24 * GiB);
  // Every plan returned really fits (full per-rank estimate).
  for (const auto& p : r.plans) EXPECT_LE(p.estimate.peak_device, 24 * GiB) << p.summary;
}

// 8-GPU workstation: 8 x 80 GB, LLaMA-13B, 256 sequences per step, fastest ->
// bf16 + ZeRO-2/3 + flash + accumulation, full training.
TEST(Planner, WorkstationThirteenBillion) {
  PlanRequest req;
  req.base.model = *modelPreset("llama-13b");
  req.device_memory = 80'000'000'000;
  req.ranks = 8;
  req.global_batch = 256;
  req.goal = PlanGoal::Fastest;
  auto r = planTraining(req);
  ASSERT_FALSE(r.plans.empty()) << r.message;
  const Plan& best = r.plans.front();
  SCOPED_TRACE(best.summary);
  EXPECT_EQ(best.plan_class, "full");
  EXPECT_EQ(best.config.precision.policy, "bf16");
  EXPECT_GE(best.config.parallel.zero_stage, 2);
  EXPECT_EQ(best.config.attention.impl, "flash");
  EXPECT_GT(best.config.train.grad_accum, 1);
  EXPECT_EQ(best.estimate.effective_batch, 256);
  EXPECT_EQ(best.config.parallel.offload_optimizer, "none");
}

// Cluster: 64 x 80 GB, LLaMA-70B at 4096 tokens, 1024 sequences per step -> everything on:
// bf16 + ZeRO-3 + flash + checkpointing + accumulation.
TEST(Planner, ClusterSeventyBillion) {
  PlanRequest req;
  req.base.model = *modelPreset("llama-70b");
  req.device_memory = 80'000'000'000;
  req.ranks = 64;
  req.global_batch = 1024;
  req.goal = PlanGoal::Fastest;
  auto r = planTraining(req);
  ASSERT_FALSE(r.plans.empty()) << r.message;
  const Plan& best = r.plans.front();
  SCOPED_TRACE(best.summary);
  EXPECT_EQ(best.plan_class, "full");
  EXPECT_EQ(best.config.precision.policy, "bf16");
  EXPECT_EQ(best.config.parallel.zero_stage, 3);
  EXPECT_EQ(best.config.attention.impl, "flash");
  EXPECT_NE(best.config.memory.checkpointing, "none");
  EXPECT_GT(best.config.train.grad_accum, 1);
  EXPECT_EQ(best.estimate.report.ranks.size(), 64u);
}

// Largest batch: the micro-batch grows when the device grows; fit reports why nothing fits.
TEST(Planner, LargestBatchAndNothingFits) {
  PlanRequest req;
  req.base.model = *modelPreset("gpt2");
  req.global_batch = 512;
  req.goal = PlanGoal::LargestBatch;
  req.device_memory = 16 * GiB;
  auto small = planTraining(req);
  req.device_memory = 64 * GiB;
  auto big = planTraining(req);
  ASSERT_FALSE(small.plans.empty());
  ASSERT_FALSE(big.plans.empty());
  EXPECT_GT(big.plans.front().config.train.micro_batch,
            small.plans.front().config.train.micro_batch);
  // Micro-batches are non-increasing down the list within the same class.
  for (size_t i = 1; i < big.plans.size(); ++i) {
    if (big.plans[i].plan_class == big.plans[i - 1].plan_class) {
      EXPECT_LE(big.plans[i].config.train.micro_batch, big.plans[i - 1].config.train.micro_batch);
    }
  }
  req.base.model = *modelPreset("llama-70b");
  req.device_memory = 1 * GiB;
  req.allow_offload = false;
  req.goal = PlanGoal::Fit;
  auto none = planTraining(req);
  EXPECT_TRUE(none.plans.empty());
  EXPECT_NE(none.message.find("no combination fits"), std::string::npos);
  req.device_memory = 0;
  EXPECT_NE(planTraining(req).message.find("device memory"), std::string::npos);
}

// The relative cost moves as the cost model says: recomputation and offload cost time.
TEST(Planner, CostComponents) {
  PlanRequest req;
  req.base.model = *modelPreset("gpt2-xl");
  req.base.train.micro_batch = 8;
  req.device_memory = 80 * GiB;
  req.goal = PlanGoal::Fit;
  req.max_plans = 1000;
  auto r = planTraining(req);
  ASSERT_FALSE(r.plans.empty());
  for (const auto& p : r.plans) {
    EXPECT_EQ(p.cost.recompute_s > 0, p.config.memory.checkpointing != "none") << p.summary;
    EXPECT_EQ(p.cost.offload_s > 0, p.config.parallel.offload_optimizer != "none") << p.summary;
    EXPECT_GT(p.cost.relative_to_ideal, 0.5);
    EXPECT_NEAR(p.cost.relative, p.cost.total_s / r.baseline.total_s, 1e-12);
  }
}

namespace {
RunConfig defaultPreset() {
  auto c = loadConfigFile(std::string(TRAINSCOPE_PRESET_DIR) + "/default.json");
  EXPECT_TRUE(c.ok());
  return c.ok() ? *c.config : RunConfig{};
}
bool sameSetup(const RunConfig& a, const RunConfig& b) {
  return a.precision.policy == b.precision.policy &&
         a.memory.checkpointing == b.memory.checkpointing &&
         a.memory.activation_compression == b.memory.activation_compression &&
         a.attention.impl == b.attention.impl && a.parallel.zero_stage == b.parallel.zero_stage &&
         a.parallel.offload_optimizer == b.parallel.offload_optimizer &&
         a.parallel.offload_params == b.parallel.offload_params &&
         a.optimizer.state_bits == b.optimizer.state_bits &&
         a.finetune.lora.r == b.finetune.lora.r && a.train.micro_batch == b.train.micro_batch &&
         a.train.grad_accum == b.train.grad_accum;
}
}  // namespace

// Step time is relative to the setup as configured: that setup reads 1.00x (the default preset's
// tiny model is all overhead, so relative to the compute ideal it read 2480x).
TEST(Planner, StepTimeIsRelativeToTheConfiguredSetup) {
  PlanRequest req;
  req.base = defaultPreset();
  req.device_memory = 24 * GiB;
  req.max_plans = 1000;
  auto r = planTraining(req);
  ASSERT_FALSE(r.plans.empty()) << r.message;
  EXPECT_GT(r.baseline.total_s, 0);
  EXPECT_NE(r.baseline_summary.find("fp32"), std::string::npos) << r.baseline_summary;
  const Plan* asIs = nullptr;
  for (const auto& p : r.plans)
    if (sameSetup(p.config, req.base)) asIs = &p;
  ASSERT_NE(asIs, nullptr) << "the configured setup fits and should be among the plans";
  EXPECT_NEAR(asIs->cost.relative, 1.0, 1e-9);
  for (const auto& p : r.plans) {
    // A handful of techniques cannot make a step more than a few times faster or slower.
    EXPECT_GT(p.cost.relative, 0.2) << p.summary;
    EXPECT_LT(p.cost.relative, 5.0) << p.summary;
  }
  EXPECT_NE(formatPlans(r).find("relative to the setup as configured"), std::string::npos);
}

// The engine's limitations: each plan says why it cannot run; runnable_only leaves those out.
TEST(Planner, LimitationsMarkAndFilterPlans) {
  PlanRequest req;
  req.base.model = *modelPreset("gpt2-xl");
  req.base.train.micro_batch = 4;
  req.device_memory = 24 * GiB;
  req.max_plans = 50;
  req.limitations = [](const RunConfig& c) {
    std::vector<std::string> why;
    if (c.finetune.lora.r > 0) why.push_back("LoRA is not implemented");
    if (c.optimizer.state_bits != 32) why.push_back("8-bit optimizer state is not implemented");
    return why;
  };
  auto all = planTraining(req);
  ASSERT_FALSE(all.plans.empty());
  int refused = 0;
  for (const auto& p : all.plans) {
    const bool needs = p.config.finetune.lora.r > 0 || p.config.optimizer.state_bits != 32;
    EXPECT_EQ(!p.limitations.empty(), needs) << p.summary;
    refused += needs;
  }
  ASSERT_GT(refused, 0) << "gpt2-xl on 24 GiB: some plans use LoRA or 8-bit state";
  EXPECT_EQ(all.not_runnable, 0);

  req.runnable_only = true;
  auto runnable = planTraining(req);
  ASSERT_FALSE(runnable.plans.empty()) << runnable.message;
  EXPECT_GT(runnable.not_runnable, 0);
  for (const auto& p : runnable.plans) {
    EXPECT_TRUE(p.limitations.empty()) << p.summary;
    EXPECT_EQ(p.config.finetune.lora.r, 0) << p.summary;
    EXPECT_EQ(p.config.optimizer.state_bits, 32) << p.summary;
  }
  // Nothing runnable fits: the message says so instead of "no combination fits".
  req.limitations = [](const RunConfig&) { return std::vector<std::string>{"no device here"}; };
  auto none = planTraining(req);
  EXPECT_TRUE(none.plans.empty());
  EXPECT_NE(none.message.find("cannot run"), std::string::npos) << none.message;
  EXPECT_NE(none.message.find("no device here"), std::string::npos) << none.message;
}

// best_of_each_kind_first (what the GUI lists): LLaMA-7B on 24 GiB has hundreds of fits, the
// first ten of which are all LoRA in the goal's order; asked, each kind's best comes first, in
// the goal's order, then the rest as before.
TEST(Planner, BestOfEachKindFirst) {
  PlanRequest req;
  req.base.model = *modelPreset("llama-7b");
  req.base.train.micro_batch = 1;  // the desktop planner's setup around a model shape
  req.base.precision.policy = "bf16";
  req.device_memory = 24 * GiB;
  req.max_plans = 10;
  const auto plain = planTraining(req);
  ASSERT_EQ(plain.plans.size(), 10u);
  EXPECT_GT(plain.fitting, 100);
  for (const auto& p : plain.plans) EXPECT_EQ(p.kind, "LoRA") << p.summary;

  req.best_of_each_kind_first = true;
  const auto diverse = planTraining(req);
  ASSERT_EQ(diverse.plans.size(), 10u);
  EXPECT_EQ(diverse.fitting, plain.fitting);
  // The overall best stays first.
  EXPECT_EQ(diverse.plans.front().summary, plain.plans.front().summary);
  std::vector<std::string> kinds;
  for (const auto& p : diverse.plans)
    if (std::find(kinds.begin(), kinds.end(), p.kind) == kinds.end()) kinds.push_back(p.kind);
  const std::vector<std::string> expected = {"LoRA", "QLoRA", "full + offload", "LoRA + offload",
                                             "QLoRA + offload"};
  EXPECT_EQ(kinds, expected);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(diverse.plans[i].kind, expected[i]);
  // After the firsts: the goal's order again, which starts with the second-best LoRA plan.
  EXPECT_EQ(diverse.plans[expected.size()].summary, plain.plans[1].summary);
}
