// Planner: the three classic scenarios and the goal semantics.
#include <gtest/gtest.h>

#include <algorithm>

#include "trainscope/core/Planner.h"

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
    EXPECT_GT(p.cost.relative, 0.5);
  }
}
