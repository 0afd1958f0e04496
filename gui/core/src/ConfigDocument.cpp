#include "trainscope/gui/ConfigDocument.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <algorithm>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/plan/Estimator.h"

namespace ts::gui {

nlohmann::json::json_pointer pointerFor(std::string_view dottedPath) {
  std::string p;
  size_t start = 0;
  while (start <= dottedPath.size()) {
    size_t dot = dottedPath.find('.', start);
    if (dot == std::string_view::npos) dot = dottedPath.size();
    p += '/';
    p += dottedPath.substr(start, dot - start);
    start = dot + 1;
  }
  return nlohmann::json::json_pointer(p);
}

ConfigDocument::ConfigDocument(QObject* parent)
    : QObject(parent), defaults_(core::toJson(core::RunConfig{})) {
  revalidate();
}

void ConfigDocument::reset(nlohmann::json doc) {
  doc_ = doc.is_object() ? std::move(doc) : nlohmann::json::object();
  revalidate();
  emit changed();
}

nlohmann::json ConfigDocument::value(std::string_view path) const {
  auto ptr = pointerFor(path);
  if (doc_.contains(ptr)) return doc_.at(ptr);
  if (defaults_.contains(ptr)) return defaults_.at(ptr);
  return nullptr;
}

void ConfigDocument::setValue(std::string_view path, nlohmann::json v) {
  auto ptr = pointerFor(path);
  if (doc_.contains(ptr) && doc_.at(ptr) == v) return;
  // An element of an array the document does not hold yet (optimizer.betas.1): start from the
  // default array so the other elements keep their values.
  const auto parent = ptr.parent_pointer();
  if (!parent.empty() && !doc_.contains(parent) && defaults_.contains(parent) &&
      defaults_.at(parent).is_array())
    doc_[parent] = defaults_.at(parent);
  doc_[ptr] = std::move(v);
  revalidate();
  emit changed();
}

void ConfigDocument::setNativeBf16Gemm(bool native) {
  if (native == nativeBf16Gemm_) return;
  nativeBf16Gemm_ = native;
  revalidate();
  emit changed();
}

void ConfigDocument::revalidate() {
  ++revision_;
  core::ConfigResult r;
  try {
    r = core::parseConfigJson(doc_);
  } catch (const std::exception& e) {  // the validator promises not to throw; be safe anyway
    r.issues.push_back({"", "", std::string("validator error: ") + e.what()});
  }
  issues_ = r.issues;
  config_ = r.config;
  estimate_.reset();
  if (config_) {
    try {
      core::EstimateOptions eo;
      eo.native_bf16_gemm = nativeBf16Gemm_;
      estimate_ = core::estimateMemory(*config_, eo);
    } catch (const std::exception&) {
      estimate_.reset();
    }
  }
}

nlohmann::json ConfigDocument::resolved() const {
  if (config_) return core::toJson(*config_);
  return doc_;
}

nlohmann::json ConfigDocument::resolvedForFamily() const {
  nlohmann::json out = resolved();
  if (!config_) return out;
  const core::ModelFamily* family = core::findModelFamily(config_->model.arch);
  if (!family) return out;
  // Only keys some family reads are family keys; the shared ones (layers, heads, ...) stay.
  auto& model = out["model"];
  for (const auto* f : core::modelFamilies())
    for (const auto& k : f->modelKeys())
      if (!family->readsModelKey(k)) model.erase(k);
  return out;
}

namespace {

// The estimator's notes are written for its developers; these say the same for a user.
std::string plainNote(const std::string& n) {
  auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
  if (starts("one rank: the fp32 compute copies of a block's weights"))
    return "Counted as the engine runs it: with 16-bit training on one device, full-precision "
           "working copies of a layer's weights and gradients exist only while that layer runs, "
           "so they never all take memory at once.";
  if (starts("one rank: the fp32 gradients exist one block at a time"))
    return "Counted as the engine runs it: full-precision gradients exist one layer at a time; "
           "fp8 keeps a full-precision copy of all weights.";
  if (starts("bf16 GEMMs:"))
    return "Matrix multiplications run in bf16 (faster, slightly less precise); the estimate "
           "includes their scratch buffers.";
  return n;
}

}  // namespace

std::vector<std::string> ConfigDocument::estimateNotes() const {
  std::vector<std::string> out;
  if (estimate_)
    for (const auto& n : estimate_->notes) out.push_back(plainNote(n));
  return out;
}

std::vector<std::string> ConfigDocument::warnings(int64_t deviceCapacity) const {
  std::vector<std::string> out;
  if (!config_) return out;
  const auto& c = *config_;
  if (estimate_ && deviceCapacity > 0 && estimate_->peak_device > deviceCapacity) {
    out.push_back("Estimated peak memory on rank 0 (" +
                  core::formatBytes(static_cast<double>(estimate_->peak_device)) +
                  ") exceeds the device capacity (" +
                  core::formatBytes(static_cast<double>(deviceCapacity)) + ").");
  }
  if (c.schedule.warmup_steps >= c.train.steps && c.train.steps > 0)
    out.push_back("Warmup is as long as the whole run: the learning rate never reaches its peak.");
  if (c.precision.policy == "fp16" && c.precision.loss_scale.mode == "static" &&
      c.precision.loss_scale.static_scale <= 1.0)
    out.push_back("fp16 with a static loss scale of 1 may underflow small gradients.");
  if (c.parallel.ranks > 1 && c.parallel.zero_stage == 0)
    out.push_back("Several ranks without ZeRO: every rank holds a full copy of the model states.");
  if (c.train.eval_every > c.train.steps)
    out.push_back("eval_every is longer than the run: only the final evaluation happens.");
  if (c.finetune.lora.r > 0 && c.finetune.base_checkpoint.empty())
    out.push_back(
        "LoRA without a base model: the adapters train on top of frozen random weights, so the "
        "run learns little. Choose a base (a checkpoint or Hugging Face folder) on the "
        "Fine-tuning page, or set the LoRA rank to 0 to train every weight.");
  return out;
}

int64_t ConfigDocument::effectiveBatch() const {
  auto num = [&](std::string_view p, int64_t dflt) {
    auto v = value(p);
    return v.is_number_integer() ? v.get<int64_t>() : dflt;
  };
  return num("train.micro_batch", 1) * num("train.grad_accum", 1) * num("parallel.ranks", 1);
}

bool ConfigDocument::looksLikeDeepSpeed(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  static const char* keys[] = {"train_batch_size",
                               "train_micro_batch_size_per_gpu",
                               "gradient_accumulation_steps",
                               "zero_optimization",
                               "bf16",
                               "fp16",
                               "optimizer",
                               "scheduler"};
  return std::any_of(std::begin(keys), std::end(keys),
                     [&](const char* k) { return j.contains(k) && !j.contains("model"); });
}

nlohmann::json ConfigDocument::fromDeepSpeed(const nlohmann::json& ds, const nlohmann::json& base) {
  nlohmann::json d = base.is_object() ? base : nlohmann::json::object();
  auto getInt = [&](const nlohmann::json& o, const char* k) -> std::optional<int64_t> {
    if (o.contains(k) && o[k].is_number_integer()) return o[k].get<int64_t>();
    return std::nullopt;
  };
  if (auto v = getInt(ds, "train_micro_batch_size_per_gpu")) d["train"]["micro_batch"] = *v;
  if (auto v = getInt(ds, "gradient_accumulation_steps")) d["train"]["grad_accum"] = *v;
  if (ds.contains("gradient_clipping") && ds["gradient_clipping"].is_number())
    d["train"]["grad_clip"] = ds["gradient_clipping"];
  auto enabled = [&](const char* k) {
    return ds.contains(k) && ds[k].is_object() && ds[k].value("enabled", false);
  };
  if (enabled("bf16")) d["precision"]["policy"] = "bf16";
  if (enabled("fp16")) {
    d["precision"]["policy"] = "fp16";
    const auto& f = ds["fp16"];
    if (f.contains("loss_scale") && f["loss_scale"].is_number() &&
        f["loss_scale"].get<double>() > 0) {
      d["precision"]["loss_scale"]["mode"] = "static";
      d["precision"]["loss_scale"]["static_scale"] = f["loss_scale"];
    }
    if (auto p = getInt(f, "initial_scale_power"))
      d["precision"]["loss_scale"]["init"] = static_cast<double>(int64_t{1} << *p);
    if (auto w = getInt(f, "loss_scale_window"))
      d["precision"]["loss_scale"]["growth_interval"] = *w;
  }
  if (ds.contains("zero_optimization") && ds["zero_optimization"].is_object()) {
    const auto& z = ds["zero_optimization"];
    if (auto s = getInt(z, "stage")) d["parallel"]["zero_stage"] = *s;
    auto device = [](const nlohmann::json& o) -> std::string {
      if (!o.is_object()) return "none";
      std::string dev = o.value("device", "none");
      return dev == "cpu" || dev == "nvme" ? dev : "none";
    };
    if (z.contains("offload_optimizer")) {
      d["parallel"]["offload_optimizer"] = device(z["offload_optimizer"]);
      if (z["offload_optimizer"].is_object() && z["offload_optimizer"].contains("nvme_path"))
        d["parallel"]["nvme_path"] = z["offload_optimizer"]["nvme_path"];
    }
    if (z.contains("offload_param")) d["parallel"]["offload_params"] = device(z["offload_param"]);
  }
  if (ds.contains("optimizer") && ds["optimizer"].is_object()) {
    const auto& o = ds["optimizer"];
    std::string type = o.value("type", "");
    std::transform(type.begin(), type.end(), type.begin(), ::tolower);
    if (type == "adamw" || type == "adam") d["optimizer"]["type"] = "adamw";
    if (type == "sgd") d["optimizer"]["type"] = "sgd";
    if (o.contains("params") && o["params"].is_object()) {
      const auto& p = o["params"];
      if (p.contains("lr") && p["lr"].is_number()) d["optimizer"]["lr"] = p["lr"];
      if (p.contains("betas") && p["betas"].is_array()) d["optimizer"]["betas"] = p["betas"];
      if (p.contains("eps") && p["eps"].is_number()) d["optimizer"]["eps"] = p["eps"];
      if (p.contains("weight_decay") && p["weight_decay"].is_number())
        d["optimizer"]["weight_decay"] = p["weight_decay"];
    }
  }
  if (ds.contains("scheduler") && ds["scheduler"].is_object()) {
    const auto& s = ds["scheduler"];
    std::string type = s.value("type", "");
    const auto params = s.value("params", nlohmann::json::object());
    if (type == "WarmupCosineLR") d["schedule"]["type"] = "cosine";
    if (type == "WarmupDecayLR") d["schedule"]["type"] = "linear";
    if (type == "WarmupLR") d["schedule"]["type"] = "constant";
    if (auto w = getInt(params, "warmup_num_steps")) d["schedule"]["warmup_steps"] = *w;
    if (auto t = getInt(params, "total_num_steps")) d["train"]["steps"] = *t;
  }
  if (ds.contains("activation_checkpointing") && ds["activation_checkpointing"].is_object() &&
      ds["activation_checkpointing"].value("partition_activations", false))
    d["memory"]["checkpointing"] = "all";
  if (ds.contains("steps_per_print")) {
    // No equivalent: the engine reports every step.
  }
  return d;
}

std::string ConfigDocument::importText(const std::string& text) {
  nlohmann::json j;
  try {
    j = core::parseBoundedJson(text);
  } catch (const nlohmann::json::parse_error& e) {
    return std::string("not valid JSON: ") + e.what();
  }
  if (!j.is_object()) return "the file does not hold a JSON object";
  if (looksLikeDeepSpeed(j)) j = fromDeepSpeed(j, doc_);
  reset(std::move(j));
  return {};
}

}  // namespace ts::gui
