#include "trainscope/core/config/ConfigExport.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "trainscope/core/model/ModelFamily.h"

namespace ts::core {
namespace {

bool isHalf(const std::string& p) {
  return p == "bf16" || p == "pure_bf16" || p == "fp8";
}

int checkpointsOf(const RunConfig& c) {
  const int L = std::max(1, c.model.layers);
  if (c.memory.checkpointing == "every_k") {
    int k = c.memory.checkpoint_every > 0
                ? c.memory.checkpoint_every
                : std::max(1, static_cast<int>(std::lround(std::sqrt(static_cast<double>(L)))));
    return (L + k - 1) / k;
  }
  return L;
}

// peft target_modules names for our LoRA target names.
std::vector<std::string> peftTargets(const RunConfig& c) {
  return modelFamily(archSpecOf(c.model, 2).arch).peftTargets(c);
}

}  // namespace

nlohmann::json toDeepSpeedConfig(const RunConfig& c) {
  using nlohmann::json;
  json ds;
  const int ranks = std::max(1, c.parallel.ranks);
  ds["train_micro_batch_size_per_gpu"] = c.train.micro_batch;
  ds["gradient_accumulation_steps"] = c.train.grad_accum;
  ds["train_batch_size"] = static_cast<int64_t>(c.train.micro_batch) * c.train.grad_accum * ranks;
  if (c.train.grad_clip > 0) ds["gradient_clipping"] = c.train.grad_clip;
  const std::string& p = c.precision.policy;
  if (isHalf(p)) ds["bf16"] = {{"enabled", true}};
  if (p == "fp16") {
    const auto& ls = c.precision.loss_scale;
    const bool dynamic = ls.mode != "static";
    ds["fp16"] = {
        {"enabled", true},
        {"loss_scale", dynamic ? 0.0 : ls.static_scale},  // 0 = dynamic
        {"initial_scale_power", static_cast<int>(std::lround(std::log2(std::max(1.0, ls.init))))},
        {"loss_scale_window", ls.growth_interval},
        {"hysteresis", 2},
        {"min_loss_scale", 1}};
  }
  json zero = {{"stage", c.parallel.zero_stage}};
  auto offload = [&](const std::string& where) {
    json o = {{"device", where}, {"pin_memory", true}};
    if (where == "nvme")
      o["nvme_path"] = c.parallel.nvme_path.empty() ? "/local_nvme" : c.parallel.nvme_path;
    return o;
  };
  if (c.parallel.offload_optimizer != "none") {
    zero["offload_optimizer"] = offload(c.parallel.offload_optimizer);
  }
  if (c.parallel.offload_params != "none")
    zero["offload_param"] = offload(c.parallel.offload_params);
  ds["zero_optimization"] = zero;
  const auto& o = c.optimizer;
  if (o.type == "sgd") {
    // Not a DeepSpeed built-in: the engine falls back to torch.optim.SGD by name.
    ds["optimizer"] = {
        {"type", "SGD"},
        {"params", {{"lr", o.lr}, {"momentum", o.momentum}, {"weight_decay", o.weight_decay}}}};
  } else {
    ds["optimizer"] = {
        {"type", "AdamW"},
        {"params",
         {{"lr", o.lr}, {"betas", o.betas}, {"eps", o.eps}, {"weight_decay", o.weight_decay}}}};
  }
  const auto& s = c.schedule;
  if (s.type == "cosine") {
    ds["scheduler"] = {{"type", "WarmupCosineLR"},
                       {"params",
                        {{"total_num_steps", c.train.steps},
                         {"warmup_num_steps", s.warmup_steps},
                         {"warmup_min_ratio", 0.0},
                         {"cos_min_ratio", o.lr > 0 ? s.min_lr / o.lr : 0.0},
                         {"warmup_type", "linear"}}}};
  } else if (s.type == "linear") {
    ds["scheduler"] = {{"type", "WarmupDecayLR"},
                       {"params",
                        {{"total_num_steps", c.train.steps},
                         {"warmup_min_lr", 0.0},
                         {"warmup_max_lr", o.lr},
                         {"warmup_num_steps", s.warmup_steps},
                         {"warmup_type", "linear"}}}};
  } else {
    ds["scheduler"] = {{"type", "WarmupLR"},
                       {"params",
                        {{"warmup_min_lr", s.warmup_steps > 0 ? 0.0 : o.lr},
                         {"warmup_max_lr", o.lr},
                         {"warmup_num_steps", s.warmup_steps},
                         {"warmup_type", "linear"}}}};
  }
  if (c.memory.checkpointing != "none") {
    ds["activation_checkpointing"] = {
        {"partition_activations", ranks > 1},       {"cpu_checkpointing", false},
        {"contiguous_memory_optimization", false},  {"number_checkpoints", checkpointsOf(c)},
        {"synchronize_checkpoint_boundary", false}, {"profile", false}};
  }
  return ds;
}

HuggingFaceExport toHuggingFace(const RunConfig& c, const std::string& deepspeedPath,
                                bool doubleQuant) {
  HuggingFaceExport e;
  auto& a = e.training_args;
  const std::string& p = c.precision.policy;
  a["bf16"] = isHalf(p);
  a["fp16"] = p == "fp16";
  if (p == "fp8") e.notes.push_back("fp8 has no TrainingArguments key: exported as bf16");
  if (p == "pure_bf16") {
    e.notes.push_back(
        "pure bf16 (no fp32 master weights): load the model in bfloat16 "
        "(torch_dtype=torch.bfloat16); bf16=True alone keeps fp32 weights");
  }
  a["per_device_train_batch_size"] = c.train.micro_batch;
  a["gradient_accumulation_steps"] = c.train.grad_accum;
  a["gradient_checkpointing"] = c.memory.checkpointing != "none";
  if (c.memory.checkpointing == "every_k") {
    e.notes.push_back(
        "memory.checkpointing every_k: HF gradient_checkpointing has no every-k option; it "
        "recomputes every block");
  }
  if (c.memory.activation_compression != "none") {
    e.notes.push_back("activation compression has no Trainer equivalent");
  }
  a["learning_rate"] = c.optimizer.lr;
  const auto& s = c.schedule;
  if (s.type == "cosine" && s.min_lr > 0) {
    a["lr_scheduler_type"] = "cosine_with_min_lr";
    a["lr_scheduler_kwargs"] = {{"min_lr", s.min_lr}};
  } else if (s.type == "cosine") {
    a["lr_scheduler_type"] = "cosine";
  } else if (s.type == "linear") {
    a["lr_scheduler_type"] = "linear";
  } else {
    a["lr_scheduler_type"] = s.warmup_steps > 0 ? "constant_with_warmup" : "constant";
  }
  a["warmup_steps"] = s.warmup_steps;
  a["max_steps"] = c.train.steps;
  a["weight_decay"] = c.optimizer.weight_decay;
  a["max_grad_norm"] = c.train.grad_clip;
  const auto& betas = c.optimizer.betas;
  a["adam_beta1"] = betas.size() > 0 ? betas[0] : 0.9;
  a["adam_beta2"] = betas.size() > 1 ? betas[1] : 0.999;
  a["adam_epsilon"] = c.optimizer.eps;
  const bool nf4 = c.finetune.base_quant == "nf4";
  if (c.optimizer.type == "sgd") {
    a["optim"] = "sgd";
    a["optim_args"] = "momentum=" + nlohmann::json(c.optimizer.momentum).dump();
  } else if (c.optimizer.state_bits == 8) {
    a["optim"] = nf4 ? "paged_adamw_8bit" : "adamw_bnb_8bit";  // QLoRA pages its state
  } else {
    a["optim"] = "adamw_torch";
  }
  if (c.parallel.zero_stage > 0 || c.parallel.offload_optimizer != "none" ||
      c.parallel.offload_params != "none") {
    a["deepspeed"] = deepspeedPath;
  }
  a["seed"] = c.train.seed;
  if (c.finetune.lora.r > 0) {
    e.lora_config = {{"r", c.finetune.lora.r},
                     {"lora_alpha", c.finetune.lora.alpha},
                     {"lora_dropout", c.finetune.lora.dropout},
                     {"target_modules", peftTargets(c)},
                     {"bias", "none"},
                     {"task_type", "CAUSAL_LM"}};
  }
  if (nf4) {
    e.bnb_config = {{"load_in_4bit", true},
                    {"bnb_4bit_quant_type", "nf4"},
                    {"bnb_4bit_use_double_quant", doubleQuant},
                    {"bnb_4bit_compute_dtype", p == "fp16" ? "float16" : "bfloat16"}};
  }
  if (!c.distill.teacher_checkpoint.empty()) {
    e.notes.push_back("distillation needs a custom Trainer.compute_loss (KL at temperature " +
                      nlohmann::json(c.distill.temperature).dump() + ")");
  }
  return e;
}

nlohmann::json toJson(const HuggingFaceExport& e) {
  return {{"training_args", e.training_args},
          {"lora_config", e.lora_config},
          {"bnb_config", e.bnb_config},
          {"notes", e.notes}};
}

namespace {

using nlohmann::json;

// Reads DeepSpeed values into a Trainscope config: one method per DeepSpeed section, in the
// order the import applies them (the scheduler reads the optimizer's lr, so it comes later).
class DeepSpeedReader {
 public:
  DeepSpeedReader(const json& ds, DeepSpeedImport& r) : ds_(ds), r_(r), c_(r.config) {}

  void readTopLevelKeys();
  void readBatch();
  void readBf16();
  void readFp16();
  void readZero();
  void readOptimizer();
  void readScheduler();
  void readCheckpointing();

 private:
  void issue(const std::string& path, const json& v, const std::string& msg) {
    r_.issues.push_back({path, v.dump(), msg});
  }
  // Keys of `obj` outside `keys` are listed as ignored.
  void known(const json& obj, const std::string& path, std::set<std::string> keys) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (!keys.count(it.key())) r_.ignored.push_back(path + "/" + it.key());
    }
  }
  // Reads a number / bool at `path`; "auto" (HF integration placeholder) is ignored.
  template <class T>
  bool num(const json& obj, const std::string& key, const std::string& path, T& out);
  template <class T>
  bool integer(const json& v, const std::string& path, T& out);
  void readFp16Fields(const json& f);
  void readOffload(const json& z, const char* key, std::string& target);

  const json& ds_;
  DeepSpeedImport& r_;
  RunConfig& c_;
};

template <class T>
bool DeepSpeedReader::num(const json& obj, const std::string& key, const std::string& path,
                          T& out) {
  if (!obj.contains(key)) return false;
  const json& v = obj[key];
  if (v.is_string() && v.get<std::string>() == "auto") {
    r_.ignored.push_back(path + " (\"auto\")");
    return false;
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) {
      issue(path, v, "expected true or false");
      return false;
    }
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    return integer(v, path, out);
  } else {
    if (!v.is_number()) {
      issue(path, v, "expected a number");
      return false;
    }
    out = v.get<double>();
  }
  return true;
}

template <class T>
bool DeepSpeedReader::integer(const json& v, const std::string& path, T& out) {
  if (!v.is_number_integer() &&
      !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))) {
    issue(path, v, "expected an integer");
    return false;
  }
  // In T's range before converting (a double outside it is undefined behaviour to cast).
  using L = std::numeric_limits<T>;
  const double limit = std::ldexp(1.0, L::digits);  // 2^31 for int: max + 1, exactly
  const bool inRange = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(L::max())
                       : v.is_number_integer()
                           ? v.get<int64_t>() >= static_cast<int64_t>(L::min()) &&
                                 v.get<int64_t>() <= static_cast<int64_t>(L::max())
                           : v.get<double>() >= -limit && v.get<double>() < limit;
  if (!inRange) {
    issue(path, v,
          "out of range: expected an integer in [" + std::to_string(L::min()) + ", " +
              std::to_string(L::max()) + "]");
    return false;
  }
  out = v.is_number_integer() ? static_cast<T>(v.get<int64_t>()) : static_cast<T>(v.get<double>());
  return true;
}

void DeepSpeedReader::readTopLevelKeys() {
  known(ds_, "",
        {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
         "gradient_clipping", "bf16", "bfloat16", "fp16", "zero_optimization", "optimizer",
         "scheduler", "activation_checkpointing", "steps_per_print", "wall_clock_breakdown"});
}

// Micro-batch, accumulation, train_batch_size (which derives a missing one) and clipping.
void DeepSpeedReader::readBatch() {
  int micro = 0, accum = 0;
  int64_t trainBatch = 0;
  const bool hasMicro =
      num(ds_, "train_micro_batch_size_per_gpu", "/train_micro_batch_size_per_gpu", micro);
  const bool hasAccum =
      num(ds_, "gradient_accumulation_steps", "/gradient_accumulation_steps", accum);
  const bool hasBatch = num(ds_, "train_batch_size", "/train_batch_size", trainBatch);
  if (hasMicro) {
    if (micro < 1)
      issue("/train_micro_batch_size_per_gpu", micro, "must be >= 1");
    else
      c_.train.micro_batch = micro;
  }
  if (hasAccum) {
    if (accum < 1)
      issue("/gradient_accumulation_steps", accum, "must be >= 1");
    else
      c_.train.grad_accum = accum;
  }
  const int ranks = std::max(1, c_.parallel.ranks);
  if (hasBatch && trainBatch >= 1) {
    // DeepSpeed: train_batch_size = micro * accum * world size; derive the missing one.
    // In 64 bits (int * int overflows), the derived value capped to int (the check below then
    // reports the mismatch).
    auto derive = [](int64_t n) {
      return static_cast<int>(std::clamp<int64_t>(n, 1, std::numeric_limits<int>::max()));
    };
    if (!hasAccum && hasMicro && micro >= 1) {
      c_.train.grad_accum = derive(trainBatch / (int64_t(micro) * ranks));
    } else if (!hasMicro && hasAccum && accum >= 1) {
      c_.train.micro_batch = derive(trainBatch / (int64_t(accum) * ranks));
    } else if (!hasMicro && !hasAccum) {
      c_.train.micro_batch = derive(trainBatch / ranks);
      c_.train.grad_accum = 1;
    }
    if (static_cast<__int128>(c_.train.micro_batch) * c_.train.grad_accum * ranks != trainBatch) {
      issue("/train_batch_size", trainBatch,
            "must equal train_micro_batch_size_per_gpu * gradient_accumulation_steps * ranks (" +
                std::to_string(ranks) + ")");
    }
  }
  double clip = 0;
  if (num(ds_, "gradient_clipping", "/gradient_clipping", clip)) c_.train.grad_clip = clip;
}

void DeepSpeedReader::readBf16() {
  for (const char* key : {"bf16", "bfloat16"}) {
    if (ds_.contains(key) && ds_[key].is_object()) {
      bool en = false;
      if (num(ds_[key], "enabled", std::string("/") + key + "/enabled", en) && en) {
        c_.precision.policy = "bf16";
      }
    }
  }
}

void DeepSpeedReader::readFp16() {
  if (!ds_.contains("fp16")) return;
  const json& f = ds_["fp16"];
  if (!f.is_object()) {
    issue("/fp16", f, "expected an object");
    return;
  }
  known(f, "/fp16",
        {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
         "min_loss_scale", "auto_cast", "consecutive_hysteresis"});
  bool en = false;
  if (num(f, "enabled", "/fp16/enabled", en) && en) readFp16Fields(f);
}

// An enabled fp16 section: the policy and its loss scaling.
void DeepSpeedReader::readFp16Fields(const json& f) {
  if (c_.precision.policy == "bf16") {
    issue("/fp16/enabled", true, "bf16 and fp16 cannot both be enabled");
  }
  c_.precision.policy = "fp16";
  auto& scale = c_.precision.loss_scale;
  double ls = 0;
  if (num(f, "loss_scale", "/fp16/loss_scale", ls)) {
    if (ls < 0)
      issue("/fp16/loss_scale", ls, "must be 0 (dynamic) or a positive scale");
    else if (ls == 0)
      scale.mode = "dynamic";
    else {
      scale.mode = "static";
      scale.static_scale = ls;
    }
  }
  int power = 0;
  if (num(f, "initial_scale_power", "/fp16/initial_scale_power", power)) {
    if (power < 0 || power > 126)
      issue("/fp16/initial_scale_power", power, "0..126");
    else
      scale.init = std::ldexp(1.0, power);
  }
  int64_t window = 0;
  if (num(f, "loss_scale_window", "/fp16/loss_scale_window", window)) {
    if (window < 1)
      issue("/fp16/loss_scale_window", window, "must be >= 1");
    else
      scale.growth_interval = window;
  }
}

// zero_optimization.offload_optimizer / offload_param: the device into `target`, the path.
void DeepSpeedReader::readOffload(const json& z, const char* key, std::string& target) {
  if (!z.contains(key)) return;
  const json& o = z[key];
  const std::string path = std::string("/zero_optimization/") + key;
  if (!o.is_object()) {
    issue(path, o, "expected an object");
    return;
  }
  if (o.contains("device")) {
    const json& d = o["device"];
    std::string dev = d.is_string() ? d.get<std::string>() : "";
    if (dev == "cpu" || dev == "nvme" || dev == "none")
      target = dev;
    else
      issue(path + "/device", d, "one of \"none\", \"cpu\", \"nvme\"");
  }
  if (o.contains("nvme_path")) {
    if (o["nvme_path"].is_string())
      c_.parallel.nvme_path = o["nvme_path"].get<std::string>();
    else
      issue(path + "/nvme_path", o["nvme_path"], "expected a path string");
  }
}

void DeepSpeedReader::readZero() {
  if (!ds_.contains("zero_optimization")) return;
  const json& z = ds_["zero_optimization"];
  if (!z.is_object()) {
    issue("/zero_optimization", z, "expected an object");
    return;
  }
  int stage = 0;
  if (num(z, "stage", "/zero_optimization/stage", stage)) {
    if (stage < 0 || stage > 3)
      issue("/zero_optimization/stage", stage, "0, 1, 2 or 3");
    else
      c_.parallel.zero_stage = stage;
  }
  readOffload(z, "offload_optimizer", c_.parallel.offload_optimizer);
  readOffload(z, "offload_param", c_.parallel.offload_params);
  // DeepSpeed's older spelling.
  bool cpuOffload = false;
  if (num(z, "cpu_offload", "/zero_optimization/cpu_offload", cpuOffload) && cpuOffload) {
    c_.parallel.offload_optimizer = "cpu";
  }
  known(z, "/zero_optimization", {"stage", "offload_optimizer", "offload_param", "cpu_offload"});
  if (c_.parallel.offload_params != "none" && c_.parallel.zero_stage != 3) {
    issue("/zero_optimization/offload_param", z["offload_param"],
          "parameter offload needs stage 3");
  }
}

void DeepSpeedReader::readOptimizer() {
  if (!ds_.contains("optimizer")) return;
  const json& o = ds_["optimizer"];
  if (!o.is_object() || !o.contains("type") || !o["type"].is_string()) {
    issue("/optimizer", o, "expected {\"type\": ..., \"params\": {...}}");
    return;
  }
  std::string type = o["type"].get<std::string>();
  std::transform(type.begin(), type.end(), type.begin(), ::tolower);
  if (type == "adamw" || type == "adam" || type == "fusedadam") {
    c_.optimizer.type = "adamw";
  } else if (type == "sgd") {
    c_.optimizer.type = "sgd";
  } else {
    issue("/optimizer/type", o["type"], "Trainscope supports AdamW, Adam and SGD");
  }
  if (!o.contains("params") || !o["params"].is_object()) return;
  const json& p = o["params"];
  num(p, "lr", "/optimizer/params/lr", c_.optimizer.lr);
  num(p, "eps", "/optimizer/params/eps", c_.optimizer.eps);
  num(p, "weight_decay", "/optimizer/params/weight_decay", c_.optimizer.weight_decay);
  num(p, "momentum", "/optimizer/params/momentum", c_.optimizer.momentum);
  if (p.contains("betas")) {
    const json& b = p["betas"];
    if (b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number()) {
      c_.optimizer.betas = {b[0].get<double>(), b[1].get<double>()};
    } else {
      issue("/optimizer/params/betas", b, "expected two numbers");
    }
  }
}

void DeepSpeedReader::readScheduler() {
  if (!ds_.contains("scheduler")) return;
  const json& s = ds_["scheduler"];
  if (!s.is_object() || !s.contains("type") || !s["type"].is_string()) {
    issue("/scheduler", s, "expected {\"type\": ..., \"params\": {...}}");
    return;
  }
  const std::string type = s["type"].get<std::string>();
  const json p = s.contains("params") && s["params"].is_object() ? s["params"] : json::object();
  num(p, "warmup_num_steps", "/scheduler/params/warmup_num_steps", c_.schedule.warmup_steps);
  num(p, "total_num_steps", "/scheduler/params/total_num_steps", c_.train.steps);
  if (type == "WarmupCosineLR") {
    c_.schedule.type = "cosine";
    double ratio = 0;
    if (num(p, "cos_min_ratio", "/scheduler/params/cos_min_ratio", ratio)) {
      c_.schedule.min_lr = ratio * c_.optimizer.lr;
    }
  } else if (type == "WarmupDecayLR") {
    c_.schedule.type = "linear";
    num(p, "warmup_max_lr", "/scheduler/params/warmup_max_lr", c_.optimizer.lr);
  } else if (type == "WarmupLR") {
    c_.schedule.type = "constant";
    num(p, "warmup_max_lr", "/scheduler/params/warmup_max_lr", c_.optimizer.lr);
  } else {
    issue("/scheduler/type", s["type"],
          "Trainscope supports WarmupCosineLR, WarmupDecayLR and WarmupLR");
  }
}

void DeepSpeedReader::readCheckpointing() {
  if (!ds_.contains("activation_checkpointing")) return;
  const json& a = ds_["activation_checkpointing"];
  if (!a.is_object()) {
    issue("/activation_checkpointing", a, "expected an object");
    return;
  }
  int n = 0;
  const int L = std::max(1, c_.model.layers);
  if (num(a, "number_checkpoints", "/activation_checkpointing/number_checkpoints", n) && n > 0 &&
      n < L) {
    c_.memory.checkpointing = "every_k";
    c_.memory.checkpoint_every = (L + n - 1) / n;
  } else {
    c_.memory.checkpointing = "all";
  }
}

}  // namespace

DeepSpeedImport importDeepSpeedConfig(const nlohmann::json& ds, const RunConfig& base) {
  DeepSpeedImport r;
  r.config = base;
  if (!ds.is_object()) {
    r.issues.push_back({"/", ds.dump(), "a DeepSpeed config must be a JSON object"});
    return r;
  }
  DeepSpeedReader reader(ds, r);
  reader.readTopLevelKeys();
  reader.readBatch();
  reader.readBf16();
  reader.readFp16();
  reader.readZero();
  reader.readOptimizer();
  reader.readScheduler();
  reader.readCheckpointing();
  return r;
}

}  // namespace ts::core
