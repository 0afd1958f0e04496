// Run config: one schema description (visitSchema) drives both reading/validation and writing,
// so the parser, the unknown-key check and toJson can never disagree about the key set.
#include "trainscope/core/config/Config.h"

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace ts::core {
namespace {

using nlohmann::json;

// What a field accepts beyond its type. Empty members mean "no constraint".
struct Rule {
  std::optional<double> min, max;
  bool minOpen = false, maxOpen = false;  // exclusive bounds
  std::vector<std::string> oneOf;         // strings
  std::vector<int64_t> intOneOf;          // e.g. state_bits 32 | 8
  bool nonEmpty = false;                  // strings
};

Rule bounds(std::optional<double> lo, std::optional<double> hi, bool loOpen, bool hiOpen) {
  Rule r;
  r.min = lo;
  r.max = hi;
  r.minOpen = loOpen;
  r.maxOpen = hiOpen;
  return r;
}
Rule atLeast(double v) {
  return bounds(v, std::nullopt, false, false);
}
Rule above(double v) {
  return bounds(v, std::nullopt, true, false);
}
Rule closed(double a, double b) {
  return bounds(a, b, false, false);
}
Rule halfOpen(double a, double b) {
  return bounds(a, b, false, true);
}  // [a, b)
Rule openClosed(double a, double b) {
  return bounds(a, b, true, false);
}  // (a, b]
Rule open(double a, double b) {
  return bounds(a, b, true, true);
}
Rule oneOf(std::vector<std::string> v) {
  Rule r;
  r.oneOf = std::move(v);
  return r;
}
Rule intOneOf(std::vector<int64_t> v) {
  Rule r;
  r.intOneOf = std::move(v);
  return r;
}
Rule nonEmpty() {
  Rule r;
  r.nonEmpty = true;
  return r;
}
Rule any() {
  return Rule{};
}

// Integers print in full ("16777216", not "1.67772e+07"): a limit the user must type exactly.
std::string fmtNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15)
    return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string joinList(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

// Human text for "what is allowed": "an integer >= 1", "a number in [0, 1)", "one of: a, b".
std::string describe(const Rule& r, const char* type) {
  if (!r.oneOf.empty()) return std::string("one of: ") + joinList(r.oneOf);
  if (!r.intOneOf.empty()) {
    std::vector<std::string> s;
    for (auto v : r.intOneOf) s.push_back(std::to_string(v));
    return joinList(s, " or ");
  }
  std::string out = type;
  if (r.min && r.max) {
    out += " in " + std::string(r.minOpen ? "(" : "[") + fmtNumber(*r.min) + ", " +
           fmtNumber(*r.max) + (r.maxOpen ? ")" : "]");
  } else if (r.min) {
    out += std::string(r.minOpen ? " > " : " >= ") + fmtNumber(*r.min);
  } else if (r.max) {
    out += std::string(r.maxOpen ? " < " : " <= ") + fmtNumber(*r.max);
  }
  if (r.nonEmpty) out = "a non-empty " + std::string(type).substr(2);
  return out;
}

bool inRange(const Rule& r, double v) {
  if (r.min && (r.minOpen ? !(v > *r.min) : !(v >= *r.min))) return false;
  if (r.max && (r.maxOpen ? !(v < *r.max) : !(v <= *r.max))) return false;
  return true;
}

std::string valueText(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string joinPath(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// ---------------------------------------------------------------------------------------------
// Reader: validates a JSON document against the schema and fills a RunConfig.
class Reader {
 public:
  Reader(const json& root, std::vector<ConfigIssue>& issues, std::set<std::string>& bad)
      : issues_(issues), bad_(bad) {
    stack_.push_back(Frame{root.is_object() ? &root : nullptr, "", {}});
  }

  void finish() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    checkUnknown(f);
  }

  template <class F>
  void section(const char* key, F&& fn) {
    Frame& top = stack_.back();
    top.known.push_back(key);
    std::string path = joinPath(top.path, key);
    const json* sub = nullptr;
    const json* wrong = nullptr;  // present but not an object
    if (const json* v = lookup(top, key)) (v->is_object() ? sub : wrong) = v;
    stack_.push_back(Frame{sub, path, {}});
    fn();
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (wrong) {
      addIssue(path, valueText(*wrong), "must be an object with keys: " + joinList(f.known));
    } else {
      checkUnknown(f);
    }
  }

  void field(const char* key, std::string& out, const Rule& r) {
    const json* v = take(key);
    if (!v) return;
    std::string path = current(key);
    if (!v->is_string()) return typeIssue(path, *v, r.oneOf.empty() ? "a string" : describe(r, ""));
    std::string s = v->get<std::string>();
    if (!r.oneOf.empty() && std::find(r.oneOf.begin(), r.oneOf.end(), s) == r.oneOf.end()) {
      return typeIssue(path, *v, describe(r, "a string"));
    }
    if (r.nonEmpty && s.empty()) return typeIssue(path, *v, "a non-empty string");
    out = std::move(s);
  }

  void field(const char* key, bool& out, const Rule&) {
    const json* v = take(key);
    if (!v) return;
    if (!v->is_boolean()) return typeIssue(current(key), *v, "true or false");
    out = v->get<bool>();
  }

  void field(const char* key, double& out, const Rule& r) {
    const json* v = take(key);
    if (!v) return;
    double d = 0;
    if (!readDouble(current(key), *v, r, d)) return;
    out = d;
  }

  template <class I>
  requires std::is_integral_v<I>
  void field(const char* key, I& out, const Rule& r) {
    const json* v = take(key);
    if (!v) return;
    I i{};
    if (!readInt(current(key), *v, r, i)) return;
    out = i;
  }

  void field(const char* key, std::vector<double>& out, const Rule& r, size_t exactSize) {
    const json* v = take(key);
    if (!v) return;
    std::string path = current(key);
    std::string what = "an array of " + std::to_string(exactSize) + " numbers, each " +
                       describe(r, "a number").substr(9);
    if (!v->is_array() || v->size() != exactSize) return typeIssue(path, *v, what);
    std::vector<double> tmp;
    bool ok = true;
    for (size_t i = 0; i < v->size(); ++i) {
      double d = 0;
      ok &= readDouble(path + "[" + std::to_string(i) + "]", (*v)[i], r, d);
      tmp.push_back(d);
    }
    if (ok) out = std::move(tmp);
  }

  void field(const char* key, std::vector<std::string>& out, const Rule& r, size_t /*unused*/) {
    const json* v = take(key);
    if (!v) return;
    std::string path = current(key);
    std::string elem = r.oneOf.empty() ? "strings" : "strings from: " + joinList(r.oneOf);
    if (!v->is_array()) return typeIssue(path, *v, "an array of " + elem);
    std::vector<std::string> tmp;
    bool ok = true;
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      std::string p = path + "[" + std::to_string(i) + "]";
      if (!e.is_string()) {
        typeIssue(p, e, r.oneOf.empty() ? "a string" : describe(r, "a string"));
        ok = false;
        continue;
      }
      std::string s = e.get<std::string>();
      if (!r.oneOf.empty() && std::find(r.oneOf.begin(), r.oneOf.end(), s) == r.oneOf.end()) {
        typeIssue(p, e, describe(r, "a string"));
        ok = false;
        continue;
      }
      if (std::find(tmp.begin(), tmp.end(), s) != tmp.end()) {
        typeIssue(p, e, "each entry at most once");
        ok = false;
        continue;
      }
      tmp.push_back(std::move(s));
    }
    if (ok) out = std::move(tmp);
  }

 private:
  struct Frame {
    const json* obj;
    std::string path;
    std::vector<std::string> known;
  };

  const json* lookup(const Frame& f, const char* key) {
    if (!f.obj) return nullptr;
    auto it = f.obj->find(key);
    return it == f.obj->end() ? nullptr : &*it;
  }
  const json* take(const char* key) {
    Frame& f = stack_.back();
    f.known.push_back(key);
    return lookup(f, key);
  }
  std::string current(const char* key) const { return joinPath(stack_.back().path, key); }

  void addIssue(const std::string& path, std::string value, std::string message) {
    issues_.push_back(ConfigIssue{path, std::move(value), std::move(message)});
    bad_.insert(path);
  }
  void typeIssue(const std::string& path, const json& v, const std::string& allowed) {
    addIssue(path, valueText(v), "must be " + allowed);
  }

  bool readDouble(const std::string& path, const json& v, const Rule& r, double& out) {
    if (!v.is_number()) {
      typeIssue(path, v, describe(r, "a number"));
      return false;
    }
    double d = v.get<double>();
    if (!std::isfinite(d) || !inRange(r, d)) {
      typeIssue(path, v, describe(r, "a number"));
      return false;
    }
    out = d;
    return true;
  }

  template <class I>
  bool readInt(const std::string& path, const json& v, const Rule& r, I& out) {
    const char* type = std::is_unsigned_v<I> ? "a non-negative integer" : "an integer";
    bool ok = false;
    I value{};
    if (v.is_number_unsigned()) {
      auto u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<I>::max())) {
        value = static_cast<I>(u);
        ok = true;
      }
    } else if (v.is_number_integer()) {
      auto s = v.get<int64_t>();
      if (s >= 0 || std::is_signed_v<I>) {
        if (s >= static_cast<int64_t>(std::numeric_limits<I>::min()) &&
            (s < 0 ||
             static_cast<uint64_t>(s) <= static_cast<uint64_t>(std::numeric_limits<I>::max()))) {
          value = static_cast<I>(s);
          ok = true;
        }
      }
    } else if (v.is_number_float()) {
      // 1e3 is a fine way to write 1000 steps; 2.5 is not an integer.
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) &&
          d >= static_cast<double>(std::numeric_limits<I>::min()) &&
          d <= static_cast<double>(std::numeric_limits<I>::max()) && std::abs(d) < 9.0e15) {
        value = static_cast<I>(d);
        ok = true;
      }
    }
    if (ok && !r.intOneOf.empty()) {
      ok = std::find(r.intOneOf.begin(), r.intOneOf.end(), static_cast<int64_t>(value)) !=
           r.intOneOf.end();
    }
    if (ok) ok = inRange(r, static_cast<double>(value));
    if (!ok) {
      typeIssue(path, v, describe(r, type));
      return false;
    }
    out = value;
    return true;
  }

  void checkUnknown(const Frame& f) {
    if (!f.obj) return;
    for (auto it = f.obj->begin(); it != f.obj->end(); ++it) {
      const std::string& k = it.key();
      if (std::find(f.known.begin(), f.known.end(), k) != f.known.end()) continue;
      std::string msg = "unknown key";
      std::string best;
      size_t bestDist = 3;
      for (const auto& kn : f.known) {
        size_t d = editDistance(k, kn);
        if (d < bestDist) {
          bestDist = d;
          best = kn;
        }
      }
      if (!best.empty()) msg += " (did you mean \"" + best + "\"?)";
      std::string where = f.path.empty() ? "at the top level" : "in " + f.path;
      msg += "; allowed " + where + ": " + joinList(f.known);
      addIssue(joinPath(f.path, k), valueText(it.value()), msg);
    }
  }

  std::vector<ConfigIssue>& issues_;
  std::set<std::string>& bad_;
  std::vector<Frame> stack_;
};

// ---------------------------------------------------------------------------------------------
// Writer: the resolved document with every key.
class Writer {
 public:
  Writer() { stack_.push_back(&root_); }
  json take() { return std::move(root_); }

  template <class F>
  void section(const char* key, F&& fn) {
    json& s = (*stack_.back())[key] = json::object();
    stack_.push_back(&s);
    fn();
    stack_.pop_back();
  }
  template <class T>
  void field(const char* key, const T& v, const Rule&) {
    (*stack_.back())[key] = v;
  }
  template <class T>
  void field(const char* key, const std::vector<T>& v, const Rule&, size_t) {
    (*stack_.back())[key] = v;
  }
  void finish() {}

 private:
  json root_ = json::object();
  std::vector<json*> stack_;
};

// ---------------------------------------------------------------------------------------------
// The schema: every section and key, with its rule. docs/config.md mirrors this list.
const std::vector<std::string> kLoraShortTargets = {"q", "k", "v", "o", "fc", "proj"};
// The short names, then every family's module names.
const std::vector<std::string>& loraTargetNames() {
  static const std::vector<std::string> names = [] {
    auto v = kLoraShortTargets;
    for (const auto& m : allLoraModules()) v.push_back(m);
    return v;
  }();
  return names;
}

template <class C, class V>
void visitSchema(C& c, V& v) {
  v.field("name", c.name, nonEmpty());
  v.field("tags", c.tags, any(), 0);
  v.field("notes", c.notes, any());
  v.section("model", [&] {
    auto& m = c.model;
    v.field("arch", m.arch, oneOf(modelFamilyNames()));
    v.field("layers", m.layers, closed(1, 1024));
    v.field("heads", m.heads, closed(1, 1024));
    v.field("d_model", m.d_model, closed(1, 1 << 20));
    v.field("seq_len", m.seq_len, closed(2, 1 << 24));
    v.field("vocab", m.vocab, closed(0, 1 << 24));
    v.field("activation", m.activation, oneOf({"gelu", "relu"}));
    v.field("dropout", m.dropout, halfOpen(0, 1));
    v.field("mlp", m.mlp, oneOf({"gelu", "swiglu"}));
    v.field("norm", m.norm, oneOf({"layernorm", "rmsnorm"}));
    v.field("kv_heads", m.kv_heads, closed(0, 1024));
    v.field("d_ff", m.d_ff, closed(0, 1 << 22));
    v.field("rope_theta", m.rope_theta, closed(1.0, 1e12));
  });
  v.section("data", [&] {
    auto& d = c.data;
    v.field("source", d.source, oneOf({"synthetic", "text", "tokens", "jsonl"}));
    v.field("task", d.task, oneOf({"addition", "grammar", ""}));
    v.field("path", d.path, any());
    v.field("tokenizer", d.tokenizer, any());
    v.field("digits", d.digits, closed(1, 18));
    v.field("val_fraction", d.val_fraction, halfOpen(0, 1));
  });
  v.section("train", [&] {
    auto& t = c.train;
    v.field("steps", t.steps, atLeast(1));
    v.field("micro_batch", t.micro_batch, closed(1, 1 << 20));
    v.field("grad_accum", t.grad_accum, closed(1, 1 << 20));
    v.field("seed", t.seed, any());
    v.field("grad_clip", t.grad_clip, atLeast(0));
    v.field("eval_every", t.eval_every, atLeast(0));
    v.field("checkpoint_every", t.checkpoint_every, atLeast(0));
  });
  v.section("optimizer", [&] {
    auto& o = c.optimizer;
    v.field("type", o.type, oneOf({"adamw", "sgd"}));
    v.field("lr", o.lr, above(0));
    v.field("betas", o.betas, halfOpen(0, 1), 2);
    v.field("eps", o.eps, above(0));
    v.field("weight_decay", o.weight_decay, atLeast(0));
    v.field("momentum", o.momentum, halfOpen(0, 1));
    v.field("state_bits", o.state_bits, intOneOf({32, 8}));
  });
  v.section("schedule", [&] {
    auto& s = c.schedule;
    v.field("type", s.type, oneOf({"constant", "linear", "cosine"}));
    v.field("warmup_steps", s.warmup_steps, atLeast(0));
    v.field("min_lr", s.min_lr, atLeast(0));
  });
  v.section("precision", [&] {
    auto& p = c.precision;
    v.field("policy", p.policy, oneOf({"fp32", "bf16", "fp16", "fp8", "pure_bf16"}));
    v.field("gemm", p.gemm, oneOf({"auto", "fp32", "bf16"}));
    v.section("loss_scale", [&] {
      auto& l = p.loss_scale;
      v.field("mode", l.mode, oneOf({"dynamic", "static"}));
      v.field("init", l.init, above(0));
      v.field("growth_factor", l.growth_factor, above(1));
      v.field("backoff_factor", l.backoff_factor, open(0, 1));
      v.field("growth_interval", l.growth_interval, atLeast(1));
      v.field("static_scale", l.static_scale, above(0));
    });
    v.section("fp8", [&] {
      auto& f = p.fp8;
      v.field("recipe", f.recipe, oneOf({"delayed", "blockwise"}));
      v.field("amax_history", f.amax_history, closed(1, 1 << 20));
      v.field("margin", f.margin, closed(0, 64));
      v.field("format", f.format, oneOf({"hybrid", "e4m3"}));
    });
  });
  v.section("memory", [&] {
    auto& m = c.memory;
    v.field("checkpointing", m.checkpointing, oneOf({"none", "all", "every_k"}));
    v.field("checkpoint_every", m.checkpoint_every, closed(0, 1024));
    v.field("activation_compression", m.activation_compression, oneOf({"none", "int8", "sparse"}));
  });
  v.section("attention", [&] { v.field("impl", c.attention.impl, oneOf({"naive", "flash"})); });
  v.section("parallel", [&] {
    auto& p = c.parallel;
    v.field("ranks", p.ranks, closed(1, 1 << 20));
    v.field("zero_stage", p.zero_stage, closed(0, 3));
    v.field("offload_optimizer", p.offload_optimizer, oneOf({"none", "cpu", "nvme"}));
    v.field("offload_params", p.offload_params, oneOf({"none", "cpu", "nvme"}));
    v.field("nvme_path", p.nvme_path, any());
    v.field("hostfile", p.hostfile, any());
  });
  v.section("finetune", [&] {
    auto& f = c.finetune;
    v.field("base_checkpoint", f.base_checkpoint, any());
    v.section("lora", [&] {
      auto& l = f.lora;
      v.field("r", l.r, closed(0, 65536));
      v.field("alpha", l.alpha, above(0));
      v.field("dropout", l.dropout, halfOpen(0, 1));
      v.field("targets", l.targets, oneOf(loraTargetNames()), 0);
      v.field("use_rslora", l.use_rslora, any());
    });
    v.field("base_quant", f.base_quant, oneOf({"none", "nf4"}));
  });
  v.section("distill", [&] {
    auto& d = c.distill;
    v.field("teacher_checkpoint", d.teacher_checkpoint, any());
    v.field("temperature", d.temperature, above(0));
    v.field("alpha", d.alpha, closed(0, 1));
    v.field("teacher_dtype", d.teacher_dtype, oneOf({"auto", "fp32", "bf16", "nf4"}));
  });
  v.section("curriculum", [&] {
    auto& k = c.curriculum;
    v.field("type", k.type, oneOf({"none", "length", "difficulty"}));
    v.field("pacing", k.pacing, oneOf({"linear", "root", "step"}));
    v.field("full_at", k.full_at, openClosed(0, 1));
  });
  v.section("profile", [&] {
    auto& p = c.profile;
    v.field("enabled", p.enabled, any());
    v.field("wait", p.wait, atLeast(0));
    v.field("warmup", p.warmup, atLeast(0));
    v.field("active", p.active, atLeast(1));
    v.field("repeat", p.repeat, atLeast(0));
  });
  v.section("device", [&] {
    v.field("backend", c.device.backend, oneOf({"auto", "cpu", "cuda"}));
    v.field("threads", c.device.threads, closed(0, 4096));
  });
  v.finish();
}

// ---------------------------------------------------------------------------------------------
// Rules that involve more than one field. Each names the field the user most likely has to
// change, and is skipped when a field it reads already had its own problem.
void checkCrossField(const RunConfig& c, const ValidationContext& ctx,
                     const std::set<std::string>& bad, std::vector<ConfigIssue>& issues) {
  auto okPath = [&](const std::string& p) {
    // A field is usable unless it, or a section above it, was reported.
    for (std::string q = p;;) {
      if (bad.count(q)) return false;
      auto dot = q.rfind('.');
      if (dot == std::string::npos) return true;
      q.resize(dot);
    }
  };
  auto ok = [&](std::initializer_list<const char*> paths) {
    for (const char* p : paths) {
      if (!okPath(p)) return false;
    }
    return true;
  };
  auto add = [&](std::string path, const json& value, std::string msg) {
    issues.push_back(ConfigIssue{std::move(path), valueText(value), std::move(msg)});
  };

  const auto& m = c.model;
  if (ok({"model.d_model", "model.heads"}) && m.d_model % m.heads != 0) {
    add("model.d_model", m.d_model,
        "must be divisible by model.heads (" + std::to_string(m.heads) + ")");
  }
  if (ok({"model.kv_heads", "model.heads"}) && m.kv_heads > 0 && m.heads % m.kv_heads != 0) {
    add("model.kv_heads", m.kv_heads,
        "must be 0 or divide model.heads (" + std::to_string(m.heads) + ")");
  }
  if (ok({"model.vocab"}) && m.vocab == 1) {
    add("model.vocab", m.vocab, "must be 0 (from the data) or >= 2");
  }

  const auto& d = c.data;
  if (ok({"data.source", "data.path"}) && d.source != "synthetic" && d.path.empty()) {
    add("data.path", d.path, "must name a file when data.source is \"" + d.source + "\"");
  }
  if (ok({"data.source", "data.task"}) && d.source == "synthetic" && d.task.empty()) {
    add("data.task", d.task, "must be one of: addition, grammar when data.source is \"synthetic\"");
  }
  if (ok({"train.eval_every", "data.val_fraction"}) && c.train.eval_every > 0 &&
      d.val_fraction <= 0) {
    add("train.eval_every", c.train.eval_every,
        "must be 0 (no evaluation) when data.val_fraction is 0: there is no validation split");
  }

  if (ok({"schedule.min_lr", "optimizer.lr"}) && c.schedule.min_lr > c.optimizer.lr) {
    add("schedule.min_lr", c.schedule.min_lr,
        "must be <= optimizer.lr (" + fmtNumber(c.optimizer.lr) + ")");
  }

  const auto& p = c.precision;
  if (ok({"precision.gemm", "precision.policy"}) && p.gemm == "bf16" && p.policy != "bf16" &&
      p.policy != "pure_bf16") {
    add("precision.gemm", p.gemm,
        "bf16 GEMMs multiply the bf16 weights, so they need precision.policy bf16 or pure_bf16 "
        "(it is \"" +
            p.policy + "\"); allowed here: auto, fp32");
  }
  if (ok({"precision.policy", "device.backend"}) && p.policy == "fp8") {
    bool cudaPossible = ctx.cuda_available && c.device.backend != "cpu";
    bool cpuPossible = ctx.fp8_emulation && c.device.backend != "cuda";
    if (!cudaPossible && !cpuPossible) {
      add("precision.policy", p.policy,
          "fp8 needs a CUDA device with fp8 support or CPU emulation (device.backend \"" +
              c.device.backend + "\" offers neither here); allowed: fp32, bf16, fp16, pure_bf16");
    }
  }
  if (ctx.check_backend && ok({"device.backend"}) && c.device.backend == "cuda" &&
      !ctx.cuda_available) {
    add("device.backend", c.device.backend, "no CUDA device is available; allowed: auto, cpu");
  }

  const auto& mem = c.memory;
  if (ok({"memory.checkpointing", "memory.checkpoint_every", "model.layers"}) &&
      mem.checkpointing == "every_k" && mem.checkpoint_every > m.layers) {
    add("memory.checkpoint_every", mem.checkpoint_every,
        "must be 0 (sqrt(layers)) or <= model.layers (" + std::to_string(m.layers) + ")");
  }

  if (ok({"memory.activation_compression", "model.activation"}) &&
      mem.activation_compression == "sparse" && m.activation != "relu") {
    add("memory.activation_compression", mem.activation_compression,
        "\"sparse\" stores post-ReLU zeros as a bitmap, so it needs model.activation \"relu\" "
        "(it is \"" +
            m.activation + "\"); allowed here: none, int8");
  }

  const auto& par = c.parallel;
  if (ok({"parallel.zero_stage", "parallel.ranks"}) && par.zero_stage > 0 && par.ranks < 2) {
    add("parallel.zero_stage", par.zero_stage,
        "must be 0 when parallel.ranks is 1: ZeRO shards state across ranks (set ranks >= 2)");
  }
  if (ok({"parallel.offload_optimizer", "parallel.zero_stage"}) &&
      par.offload_optimizer != "none" && par.zero_stage < 1) {
    add("parallel.offload_optimizer", par.offload_optimizer,
        "must be \"none\" unless parallel.zero_stage >= 1");
  }
  if (ok({"parallel.offload_params", "parallel.zero_stage"}) && par.offload_params != "none" &&
      par.zero_stage != 3) {
    add("parallel.offload_params", par.offload_params,
        "must be \"none\" unless parallel.zero_stage is 3 (parameters are sharded only there)");
  }
  if (ok({"parallel.offload_optimizer", "parallel.offload_params", "parallel.nvme_path"}) &&
      (par.offload_optimizer == "nvme" || par.offload_params == "nvme") && par.nvme_path.empty()) {
    add("parallel.nvme_path", par.nvme_path, "must name a directory when offloading to nvme");
  }
  // A hostfile is handed to mpirun as a file name, never to a shell; it must be one.
  if (ctx.check_files && ok({"parallel.hostfile"}) && !par.hostfile.empty()) {
    std::ifstream probe(par.hostfile);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(par.hostfile, ec) || !probe)
      add("parallel.hostfile", par.hostfile,
          "must be a readable mpirun hostfile (a file of host names, one per line), or \"\" for "
          "this machine only; it is not a readable file");
  }

  const auto& ft = c.finetune;
  if (ok({"finetune.base_quant", "finetune.lora.r"}) && ft.base_quant == "nf4" && ft.lora.r == 0) {
    add("finetune.base_quant", ft.base_quant,
        "nf4 freezes the base weights, so it needs LoRA: set finetune.lora.r >= 1, or use "
        "\"none\"");
  }
  if (ok({"finetune.lora.r", "finetune.lora.targets"}) && ft.lora.r > 0 &&
      ft.lora.targets.empty()) {
    add("finetune.lora.targets", json::array(),
        "must list at least one of: " + joinList(loraTargetNames()) + " when finetune.lora.r >= 1");
  }
  if (ok({"finetune.lora.targets", "model.arch"}) && ft.lora.r > 0) {
    // A module name must be one of this architecture's modules.
    const auto modules = loraModules(archSpecOf(c.model, 2));
    for (const auto& t : ft.lora.targets)
      if (std::find(kLoraShortTargets.begin(), kLoraShortTargets.end(), t) ==
              kLoraShortTargets.end() &&
          std::find(modules.begin(), modules.end(), t) == modules.end())
        add("finetune.lora.targets", t,
            "is not a module of model.arch \"" + c.model.arch + "\" (its modules: " +
                joinList(modules) + "; or a short name: " + joinList(kLoraShortTargets) + ")");
  }

  if (ok({"curriculum.type", "data.source"}) && c.curriculum.type == "difficulty" &&
      d.source != "synthetic") {
    add("curriculum.type", c.curriculum.type,
        "\"difficulty\" needs data.source \"synthetic\" (only generated data knows its "
        "difficulty); allowed here: none, length");
  }
}

// nlohmann reports the 1-based offset of the last byte it read, i.e. the END of the offending
// token; users look for its start, so step back over a string or literal token.
void lineColumn(const std::string& text, size_t byte, size_t& line, size_t& col) {
  size_t end = std::min(byte, text.size());
  if (end > 0) --end;  // 0-based index of the last byte read
  if (end < text.size()) {
    auto literal = [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '+';
    };
    if (text[end] == '"' && end > 0) {
      size_t i = end;
      while (i > 0) {
        --i;
        if (text[i] == '\n') break;
        if (text[i] == '"' && (i == 0 || text[i - 1] != '\\')) {
          end = i;
          break;
        }
      }
    } else if (literal(text[end])) {
      while (end > 0 && literal(text[end - 1])) --end;
    }
  }
  line = 1;
  col = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
}

}  // namespace

std::string ConfigIssue::toString() const {
  if (path.empty()) return value.empty() ? message : message + " (got " + value + ")";
  std::string out = path;
  if (!value.empty()) out += " = " + value;
  out += ": " + message;
  return out;
}

ConfigResult parseConfigJson(const nlohmann::json& doc, const ValidationContext& ctx) {
  ConfigResult result;
  try {
    if (!doc.is_object()) {
      result.issues.push_back(
          ConfigIssue{"", valueText(doc), "the config must be a JSON object ({...})"});
      return result;
    }
    RunConfig cfg;
    std::set<std::string> bad;
    Reader reader(doc, result.issues, bad);
    visitSchema(cfg, reader);
    checkCrossField(cfg, ctx, bad, result.issues);
    if (result.issues.empty()) result.config = std::move(cfg);
  } catch (const std::exception& e) {
    // Defensive: the validator itself must never throw out of the API.
    result.issues.push_back(ConfigIssue{"", "", std::string("internal error: ") + e.what()});
    result.config.reset();
  }
  return result;
}

ConfigResult parseConfigText(const std::string& text, const ValidationContext& ctx) {
  try {
    return parseConfigJson(json::parse(text), ctx);
  } catch (const json::parse_error& e) {
    size_t line = 0, col = 0;
    lineColumn(text, e.byte, line, col);
    std::string what = e.what();
    // Strip nlohmann's "[json.exception.parse_error.101] parse error at line x, column y: ".
    auto pos = what.find(": ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    ConfigResult r;
    r.issues.push_back(ConfigIssue{"", "",
                                   "malformed JSON at line " + std::to_string(line) + ", column " +
                                       std::to_string(col) + ": " + what});
    return r;
  } catch (const std::exception& e) {
    ConfigResult r;
    r.issues.push_back(ConfigIssue{"", "", std::string("malformed JSON: ") + e.what()});
    return r;
  }
}

namespace {
// Reads the file; on failure returns an issue naming it.
std::optional<std::string> readFile(const std::string& path, std::vector<ConfigIssue>& issues) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    issues.push_back(
        ConfigIssue{"", "", "cannot open config file " + path + ": " + std::strerror(errno)});
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    issues.push_back(ConfigIssue{"", "", "cannot read config file " + path});
    return std::nullopt;
  }
  return ss.str();
}

// Document-level issues (malformed JSON, not an object) name the file; field issues carry a path.
void prefixFile(const std::string& path, std::vector<ConfigIssue>& issues) {
  for (auto& i : issues) {
    if (i.path.empty()) i.message = path + ": " + i.message;
  }
}
}  // namespace

ConfigResult loadConfigFile(const std::string& path, const ValidationContext& ctx) {
  return loadConfigWithOverrides(path, {}, ctx);
}

ConfigResult loadConfigWithOverrides(const std::string& path,
                                     const std::vector<std::string>& overrides,
                                     const ValidationContext& ctx) {
  ConfigResult result;
  try {
    auto text = readFile(path, result.issues);
    if (!text) return result;
    json doc;
    try {
      doc = json::parse(*text);
    } catch (const json::exception&) {
      result = parseConfigText(*text, ctx);  // produces the line/column message
      prefixFile(path, result.issues);
      return result;
    }
    std::vector<ConfigIssue> overrideIssues;
    for (const auto& o : overrides) {
      auto is = applyOverride(doc, o);
      overrideIssues.insert(overrideIssues.end(), is.begin(), is.end());
    }
    result = parseConfigJson(doc, ctx);
    prefixFile(path, result.issues);
    if (!overrideIssues.empty()) {
      result.issues.insert(result.issues.begin(), overrideIssues.begin(), overrideIssues.end());
      result.config.reset();
    }
  } catch (const std::exception& e) {
    result.config.reset();
    result.issues.push_back(ConfigIssue{"", path, std::string("internal error: ") + e.what()});
  }
  return result;
}

std::vector<ConfigIssue> applyOverride(nlohmann::json& doc, const std::string& assignment) {
  std::vector<ConfigIssue> issues;
  auto eqPos = assignment.find('=');
  std::string shownValue = eqPos == std::string::npos ? assignment : assignment.substr(eqPos + 1);
  auto bad = [&](std::string path, std::string msg) {
    issues.push_back(ConfigIssue{std::move(path), shownValue, "--set: " + std::move(msg)});
    return issues;
  };
  try {
    auto eq = assignment.find('=');
    if (eq == std::string::npos) {
      return bad("--set", "expected key.path=value, e.g. precision.policy=bf16 (no '=' found)");
    }
    std::string key = assignment.substr(0, eq);
    std::string text = assignment.substr(eq + 1);
    std::vector<std::string> parts;
    {
      std::string cur;
      for (char ch : key) {
        if (ch == '.') {
          parts.push_back(cur);
          cur.clear();
        } else {
          cur += ch;
        }
      }
      parts.push_back(cur);
    }
    for (const auto& p : parts) {
      bool valid = !p.empty() && std::all_of(p.begin(), p.end(), [](char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
               ch == '_';
      });
      if (!valid) {
        return bad(key.empty() ? "--set" : key,
                   "the key must be dot-separated names of letters, digits and '_' "
                   "(e.g. precision.loss_scale.init)");
      }
    }
    // The first name must be known; deeper names are checked by validation like the file.
    RunConfig defaults;
    json known = toJson(defaults);
    if (!known.contains(parts[0])) {
      std::vector<std::string> names;
      for (auto it = known.begin(); it != known.end(); ++it) names.push_back(it.key());
      return bad(key, "unknown section \"" + parts[0] + "\"; allowed: " + joinList(names));
    }
    if (!doc.is_object()) doc = json::object();
    json* node = &doc;
    std::string walked;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      walked = joinPath(walked, parts[i]);
      json& next = (*node)[parts[i]];
      if (next.is_null()) next = json::object();
      if (!next.is_object()) {
        return bad(key, walked + " is not a section (it holds " + valueText(next) + ")");
      }
      node = &next;
    }
    json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) value = text;  // bf16 -> "bf16"
    (*node)[parts.back()] = std::move(value);
  } catch (const std::exception& e) {
    return bad("--set", std::string("cannot apply override: ") + e.what());
  }
  return issues;
}

nlohmann::json toJson(const RunConfig& config) {
  Writer w;
  visitSchema(config, w);
  return w.take();
}

}  // namespace ts::core
