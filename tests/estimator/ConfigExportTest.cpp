// DeepSpeed / Hugging Face export: documented key names and values per technique; DeepSpeed
// import back into run-config fields.
#include <gtest/gtest.h>

#include "trainscope/core/config/ConfigExport.h"

using namespace ts::core;
using nlohmann::json;

namespace {

RunConfig baseConfig() {
  RunConfig c;
  c.model.layers = 16;
  c.train.micro_batch = 4;
  c.train.grad_accum = 8;
  c.train.steps = 1000;
  c.train.grad_clip = 1.0;
  c.parallel.ranks = 2;
  c.optimizer.lr = 3e-4;
  c.optimizer.betas = {0.9, 0.95};
  c.optimizer.eps = 1e-8;
  c.optimizer.weight_decay = 0.1;
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = 100;
  c.schedule.min_lr = 3e-5;
  return c;
}

}  // namespace

TEST(DeepSpeedExport, BatchOptimizerSchedulerAndBf16) {
  RunConfig c = baseConfig();
  c.precision.policy = "bf16";
  json ds = toDeepSpeedConfig(c);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(ds["gradient_accumulation_steps"], 8);
  EXPECT_EQ(ds["train_batch_size"], 4 * 8 * 2);
  EXPECT_EQ(ds["gradient_clipping"], 1.0);
  EXPECT_EQ(ds["bf16"]["enabled"], true);
  EXPECT_FALSE(ds.contains("fp16"));
  EXPECT_EQ(ds["optimizer"]["type"], "AdamW");
  EXPECT_EQ(ds["optimizer"]["params"]["lr"], 3e-4);
  EXPECT_EQ(ds["optimizer"]["params"]["betas"], json({0.9, 0.95}));
  EXPECT_EQ(ds["optimizer"]["params"]["eps"], 1e-8);
  EXPECT_EQ(ds["optimizer"]["params"]["weight_decay"], 0.1);
  EXPECT_EQ(ds["scheduler"]["type"], "WarmupCosineLR");
  EXPECT_EQ(ds["scheduler"]["params"]["total_num_steps"], 1000);
  EXPECT_EQ(ds["scheduler"]["params"]["warmup_num_steps"], 100);
  EXPECT_NEAR(ds["scheduler"]["params"]["cos_min_ratio"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(ds["zero_optimization"]["stage"], 0);
  EXPECT_FALSE(ds.contains("activation_checkpointing"));
  c.schedule.type = "linear";
  EXPECT_EQ(toDeepSpeedConfig(c)["scheduler"]["type"], "WarmupDecayLR");
  EXPECT_EQ(toDeepSpeedConfig(c)["scheduler"]["params"]["warmup_max_lr"], 3e-4);
  c.schedule.type = "constant";
  EXPECT_EQ(toDeepSpeedConfig(c)["scheduler"]["type"], "WarmupLR");
}

TEST(DeepSpeedExport, Fp16LossScaling) {
  RunConfig c = baseConfig();
  c.precision.policy = "fp16";
  json f = toDeepSpeedConfig(c)["fp16"];
  EXPECT_EQ(f["enabled"], true);
  EXPECT_EQ(f["loss_scale"], 0.0);          // dynamic
  EXPECT_EQ(f["initial_scale_power"], 16);  // 65536
  EXPECT_EQ(f["loss_scale_window"], 2000);
  EXPECT_EQ(f["hysteresis"], 2);
  EXPECT_EQ(f["min_loss_scale"], 1);
  c.precision.loss_scale.mode = "static";
  c.precision.loss_scale.static_scale = 128;
  EXPECT_EQ(toDeepSpeedConfig(c)["fp16"]["loss_scale"], 128.0);
}

TEST(DeepSpeedExport, ZeroOffloadAndCheckpointing) {
  RunConfig c = baseConfig();
  c.parallel.zero_stage = 3;
  c.parallel.offload_optimizer = "nvme";
  c.parallel.offload_params = "cpu";
  c.parallel.nvme_path = "/mnt/nvme";
  c.memory.checkpointing = "every_k";
  c.memory.checkpoint_every = 4;
  json ds = toDeepSpeedConfig(c);
  const json& z = ds["zero_optimization"];
  EXPECT_EQ(z["stage"], 3);
  EXPECT_EQ(z["offload_optimizer"]["device"], "nvme");
  EXPECT_EQ(z["offload_optimizer"]["nvme_path"], "/mnt/nvme");
  EXPECT_EQ(z["offload_param"]["device"], "cpu");
  EXPECT_FALSE(z["offload_param"].contains("nvme_path"));
  EXPECT_EQ(ds["activation_checkpointing"]["number_checkpoints"], 4);  // 16 layers / 4
  EXPECT_EQ(ds["activation_checkpointing"]["partition_activations"], true);
  c.optimizer.type = "sgd";
  EXPECT_EQ(toDeepSpeedConfig(c)["optimizer"]["type"], "SGD");
  EXPECT_EQ(toDeepSpeedConfig(c)["optimizer"]["params"]["momentum"], 0.9);
}

TEST(HuggingFaceExport, TrainingArguments) {
  RunConfig c = baseConfig();
  c.precision.policy = "bf16";
  c.memory.checkpointing = "all";
  c.train.seed = 42;
  auto e = toHuggingFace(c);
  const json& a = e.training_args;
  EXPECT_EQ(a["bf16"], true);
  EXPECT_EQ(a["fp16"], false);
  EXPECT_EQ(a["per_device_train_batch_size"], 4);
  EXPECT_EQ(a["gradient_accumulation_steps"], 8);
  EXPECT_EQ(a["gradient_checkpointing"], true);
  EXPECT_EQ(a["learning_rate"], 3e-4);
  EXPECT_EQ(a["lr_scheduler_type"], "cosine_with_min_lr");
  EXPECT_EQ(a["lr_scheduler_kwargs"]["min_lr"], 3e-5);
  EXPECT_EQ(a["warmup_steps"], 100);
  EXPECT_EQ(a["max_steps"], 1000);
  EXPECT_EQ(a["weight_decay"], 0.1);
  EXPECT_EQ(a["max_grad_norm"], 1.0);
  EXPECT_EQ(a["adam_beta1"], 0.9);
  EXPECT_EQ(a["adam_beta2"], 0.95);
  EXPECT_EQ(a["adam_epsilon"], 1e-8);
  EXPECT_EQ(a["optim"], "adamw_torch");
  EXPECT_EQ(a["seed"], 42);
  EXPECT_FALSE(a.contains("deepspeed"));
  EXPECT_TRUE(e.lora_config.is_null());
  EXPECT_TRUE(e.bnb_config.is_null());
  c.schedule.min_lr = 0;
  EXPECT_EQ(toHuggingFace(c).training_args["lr_scheduler_type"], "cosine");
  c.precision.policy = "fp16";
  EXPECT_EQ(toHuggingFace(c).training_args["fp16"], true);
  EXPECT_EQ(toHuggingFace(c).training_args["bf16"], false);
  c.optimizer.state_bits = 8;
  EXPECT_EQ(toHuggingFace(c).training_args["optim"], "adamw_bnb_8bit");
  c.parallel.zero_stage = 2;
  EXPECT_EQ(toHuggingFace(c, "ds.json").training_args["deepspeed"], "ds.json");
}

TEST(HuggingFaceExport, QLoraKeys) {
  RunConfig c = baseConfig();
  c.model.arch = "llama";
  c.model.mlp = "swiglu";
  c.precision.policy = "bf16";
  c.optimizer.state_bits = 8;
  c.finetune.lora.r = 16;
  c.finetune.lora.alpha = 32;
  c.finetune.lora.dropout = 0.05;
  c.finetune.lora.targets = {"q", "v", "fc"};
  c.finetune.base_quant = "nf4";
  auto e = toHuggingFace(c, "ds.json", true);
  EXPECT_EQ(e.training_args["optim"], "paged_adamw_8bit");
  EXPECT_EQ(e.lora_config["r"], 16);
  EXPECT_EQ(e.lora_config["lora_alpha"], 32.0);
  EXPECT_EQ(e.lora_config["lora_dropout"], 0.05);
  EXPECT_EQ(e.lora_config["target_modules"], json({"q_proj", "v_proj", "gate_proj", "up_proj"}));
  EXPECT_EQ(e.bnb_config["load_in_4bit"], true);
  EXPECT_EQ(e.bnb_config["bnb_4bit_quant_type"], "nf4");
  EXPECT_EQ(e.bnb_config["bnb_4bit_use_double_quant"], true);
  EXPECT_EQ(e.bnb_config["bnb_4bit_compute_dtype"], "bfloat16");
  // GPT-2 keeps q, k, v in one c_attn module.
  c.model.arch = "gpt2";
  c.finetune.lora.targets = {"q", "v"};
  EXPECT_EQ(toHuggingFace(c).lora_config["target_modules"], json({"c_attn"}));
}

TEST(DeepSpeedImport, RoundTripAndErrors) {
  RunConfig c = baseConfig();
  c.precision.policy = "fp16";
  c.precision.loss_scale.init = 1024;
  c.precision.loss_scale.growth_interval = 500;
  c.parallel.zero_stage = 3;
  c.parallel.offload_optimizer = "cpu";
  c.parallel.offload_params = "nvme";
  c.parallel.nvme_path = "/nvme";
  c.memory.checkpointing = "all";
  RunConfig base;
  base.model.layers = 16;
  base.parallel.ranks = 2;
  auto imp = importDeepSpeedConfig(toDeepSpeedConfig(c), base);
  ASSERT_TRUE(imp.ok()) << imp.issues.front().toString();
  const RunConfig& r = imp.config;
  EXPECT_EQ(r.train.micro_batch, 4);
  EXPECT_EQ(r.train.grad_accum, 8);
  EXPECT_EQ(r.train.grad_clip, 1.0);
  EXPECT_EQ(r.train.steps, 1000);
  EXPECT_EQ(r.precision.policy, "fp16");
  EXPECT_EQ(r.precision.loss_scale.mode, "dynamic");
  EXPECT_EQ(r.precision.loss_scale.init, 1024.0);
  EXPECT_EQ(r.precision.loss_scale.growth_interval, 500);
  EXPECT_EQ(r.parallel.zero_stage, 3);
  EXPECT_EQ(r.parallel.offload_optimizer, "cpu");
  EXPECT_EQ(r.parallel.offload_params, "nvme");
  EXPECT_EQ(r.parallel.nvme_path, "/nvme");
  EXPECT_EQ(r.optimizer.type, "adamw");
  EXPECT_EQ(r.optimizer.lr, 3e-4);
  EXPECT_EQ(r.optimizer.betas, (std::vector<double>{0.9, 0.95}));
  EXPECT_EQ(r.schedule.type, "cosine");
  EXPECT_EQ(r.schedule.warmup_steps, 100);
  EXPECT_NEAR(r.schedule.min_lr, 3e-5, 1e-15);
  EXPECT_EQ(r.memory.checkpointing, "all");

  // A hand-written config: train_batch_size derives accumulation; "auto" is ignored.
  json ds = json::parse(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8,
      "bf16": {"enabled": true}, "gradient_clipping": "auto",
      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}, "flops_profiler": {}})");
  imp = importDeepSpeedConfig(ds, base);
  EXPECT_TRUE(imp.ok());
  EXPECT_EQ(imp.config.train.grad_accum, 4);  // 64 / (8 * 2 ranks)
  EXPECT_EQ(imp.config.precision.policy, "bf16");
  EXPECT_EQ(imp.config.parallel.zero_stage, 2);
  EXPECT_EQ(imp.config.optimizer.lr, 1e-4);
  EXPECT_EQ(imp.ignored.size(), 2u);  // gradient_clipping "auto", flops_profiler

  json bad = json::parse(R"({"train_micro_batch_size_per_gpu": "eight",
      "zero_optimization": {"stage": 5, "offload_optimizer": {"device": "tape"}},
      "fp16": {"enabled": true, "loss_scale": -1}, "optimizer": {"type": "Lion"}})");
  imp = importDeepSpeedConfig(bad, base);
  ASSERT_EQ(imp.issues.size(), 5u);
  EXPECT_EQ(imp.issues[0].path, "/train_micro_batch_size_per_gpu");
  EXPECT_EQ(importDeepSpeedConfig(json::array(), base).issues.size(), 1u);
}
