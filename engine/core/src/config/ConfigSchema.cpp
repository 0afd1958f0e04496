// The run config's schema: one description (visitSchema) drives both reading/validation and
// writing, so the parser, the unknown-key check and toJson can never disagree about the key set.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "ConfigInternal.h"
#include "trainscope/core/model/ModelFamily.h"

namespace ts::core {
namespace config {

using nlohmann::json;

// Integers print in full ("16777216", not "1.67772e+07"): a limit the user must type exactly.
std::string fmtNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9.0e15)
    return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

std::string joinList(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

std::string valueText(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string joinPath(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}

const std::vector<std::string>& loraShortTargets() {
  static const std::vector<std::string> names = {"q", "k", "v", "o", "fc", "proj"};
  return names;
}

const std::vector<std::string>& loraTargetNames() {
  static const std::vector<std::string> names = [] {
    auto v = loraShortTargets();
    for (const auto& m : allLoraModules()) v.push_back(m);
    return v;
  }();
  return names;
}

namespace {

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
    // exactSize 0: any length.
    std::string what = "an array of " + (exactSize ? std::to_string(exactSize) + " " : "") +
                       "numbers, each " + describe(r, "a number").substr(9);
    if (!v->is_array() || (exactSize && v->size() != exactSize)) return typeIssue(path, *v, what);
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
// The schema: every section and key, with its rule, one function per section (each a template
// over the visitor, Reader or Writer, and over the section's constness). docs/config.md mirrors
// this list; the order of the keys is the order of "allowed: ..." in messages and of toJson.
template <class M, class V>
void visitModel(M& m, V& v) {
  static const std::vector<std::string> archs = [] {
    auto v = modelFamilyNames();
    v.push_back("auto");  // the fine-tuning base's model (ConfigAutoArch.cpp)
    return v;
  }();
  v.field("arch", m.arch, oneOf(archs));
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
  v.field("head_dim", m.head_dim, closed(0, 1 << 16));
  v.field("norm_eps", m.norm_eps, closed(1e-12, 1.0));
  v.field("tie_embeddings", m.tie_embeddings, any());
  v.section("rope_scaling", [&] {
    auto& r = m.rope_scaling;
    v.field("type", r.type, oneOf({"default", "linear", "dynamic", "llama3", "yarn", "longrope"}));
    v.field("factor", r.factor, closed(1e-6, 1e6));
    v.field("low_freq_factor", r.low_freq_factor, closed(1e-6, 1e6));
    v.field("high_freq_factor", r.high_freq_factor, closed(1e-6, 1e6));
    v.field("original_max_position_embeddings", r.original_max_position_embeddings,
            closed(0, 1 << 26));
    v.field("attention_factor", r.attention_factor, closed(0.0, 1e6));
    v.field("beta_fast", r.beta_fast, closed(1e-6, 1e6));
    v.field("beta_slow", r.beta_slow, closed(1e-6, 1e6));
    v.field("short_factor", r.short_factor, closed(1e-6, 1e6), 0);
    v.field("long_factor", r.long_factor, closed(1e-6, 1e6), 0);
  });
  v.field("partial_rotary_factor", m.partial_rotary_factor, closed(1e-6, 1.0));
  v.field("max_positions", m.max_positions, closed(0, 1 << 26));
  v.field("sliding_window", m.sliding_window, closed(0, 1 << 26));
  v.field("sliding_window_pattern", m.sliding_window_pattern, closed(0, 1024));
  v.field("rope_local_theta", m.rope_local_theta, closed(0.0, 1e12));
  v.field("query_pre_attn_scalar", m.query_pre_attn_scalar, closed(0.0, 1e9));
  v.field("attn_softcap", m.attn_softcap, closed(0.0, 1e9));
  v.field("final_softcap", m.final_softcap, closed(0.0, 1e9));
}

template <class D, class V>
void visitData(D& d, V& v) {
  v.field("source", d.source, oneOf({"synthetic", "text", "tokens", "jsonl"}));
  v.field("task", d.task, oneOf({"addition", "grammar", ""}));
  v.field("path", d.path, any());
  v.field("tokenizer", d.tokenizer, any());
  v.field("digits", d.digits, closed(1, 18));
  v.field("val_fraction", d.val_fraction, halfOpen(0, 1));
}

template <class T, class V>
void visitTrain(T& t, V& v) {
  v.field("steps", t.steps, atLeast(1));
  v.field("micro_batch", t.micro_batch, closed(1, 1 << 20));
  v.field("grad_accum", t.grad_accum, closed(1, 1 << 20));
  v.field("seed", t.seed, any());
  v.field("grad_clip", t.grad_clip, atLeast(0));
  v.field("eval_every", t.eval_every, atLeast(0));
  v.field("checkpoint_every", t.checkpoint_every, atLeast(0));
}

template <class O, class V>
void visitOptimizer(O& o, V& v) {
  v.field("type", o.type, oneOf({"adamw", "sgd"}));
  v.field("lr", o.lr, above(0));
  v.field("betas", o.betas, halfOpen(0, 1), 2);
  v.field("eps", o.eps, above(0));
  v.field("weight_decay", o.weight_decay, atLeast(0));
  v.field("momentum", o.momentum, halfOpen(0, 1));
  v.field("state_bits", o.state_bits, intOneOf({32, 8}));
}

template <class S, class V>
void visitSchedule(S& s, V& v) {
  v.field("type", s.type, oneOf({"constant", "linear", "cosine"}));
  v.field("warmup_steps", s.warmup_steps, atLeast(0));
  v.field("min_lr", s.min_lr, atLeast(0));
}

template <class P, class V>
void visitPrecision(P& p, V& v) {
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
}

template <class M, class V>
void visitMemory(M& m, V& v) {
  v.field("checkpointing", m.checkpointing, oneOf({"none", "all", "every_k"}));
  v.field("checkpoint_every", m.checkpoint_every, closed(0, 1024));
  v.field("activation_compression", m.activation_compression, oneOf({"none", "int8", "sparse"}));
}

template <class P, class V>
void visitParallel(P& p, V& v) {
  v.field("ranks", p.ranks, closed(1, 1 << 20));
  v.field("zero_stage", p.zero_stage, closed(0, 3));
  v.field("offload_optimizer", p.offload_optimizer, oneOf({"none", "cpu", "nvme"}));
  v.field("offload_params", p.offload_params, oneOf({"none", "cpu", "nvme"}));
  v.field("nvme_path", p.nvme_path, any());
  v.field("hostfile", p.hostfile, any());
}

template <class F, class V>
void visitFinetune(F& f, V& v) {
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
}

template <class D, class V>
void visitDistill(D& d, V& v) {
  v.field("teacher_checkpoint", d.teacher_checkpoint, any());
  v.field("temperature", d.temperature, above(0));
  v.field("alpha", d.alpha, closed(0, 1));
  v.field("teacher_dtype", d.teacher_dtype, oneOf({"auto", "fp32", "bf16", "nf4"}));
}

template <class K, class V>
void visitCurriculum(K& k, V& v) {
  v.field("type", k.type, oneOf({"none", "length", "difficulty"}));
  v.field("pacing", k.pacing, oneOf({"linear", "root", "step"}));
  v.field("full_at", k.full_at, openClosed(0, 1));
}

template <class P, class V>
void visitProfile(P& p, V& v) {
  v.field("enabled", p.enabled, any());
  v.field("wait", p.wait, atLeast(0));
  v.field("warmup", p.warmup, atLeast(0));
  v.field("active", p.active, atLeast(1));
  v.field("repeat", p.repeat, atLeast(0));
}

template <class C, class V>
void visitSchema(C& c, V& v) {
  v.field("name", c.name, nonEmpty());
  v.field("tags", c.tags, any(), 0);
  v.field("notes", c.notes, any());
  v.section("model", [&] { visitModel(c.model, v); });
  v.section("data", [&] { visitData(c.data, v); });
  v.section("train", [&] { visitTrain(c.train, v); });
  v.section("optimizer", [&] { visitOptimizer(c.optimizer, v); });
  v.section("schedule", [&] { visitSchedule(c.schedule, v); });
  v.section("precision", [&] { visitPrecision(c.precision, v); });
  v.section("memory", [&] { visitMemory(c.memory, v); });
  v.section("attention", [&] { v.field("impl", c.attention.impl, oneOf({"naive", "flash"})); });
  v.section("parallel", [&] { visitParallel(c.parallel, v); });
  v.section("finetune", [&] { visitFinetune(c.finetune, v); });
  v.section("distill", [&] { visitDistill(c.distill, v); });
  v.section("curriculum", [&] { visitCurriculum(c.curriculum, v); });
  v.section("profile", [&] { visitProfile(c.profile, v); });
  v.section("device", [&] {
    v.field("backend", c.device.backend, oneOf({"auto", "cpu", "cuda"}));
    v.field("threads", c.device.threads, closed(0, 4096));
  });
  v.finish();
}

}  // namespace

void readSchema(const json& doc, RunConfig& config, std::vector<ConfigIssue>& issues,
                std::set<std::string>& bad) {
  Reader reader(doc, issues, bad);
  visitSchema(config, reader);
}

}  // namespace config

nlohmann::json toJson(const RunConfig& config) {
  config::Writer w;
  config::visitSchema(config, w);
  return w.take();
}

}  // namespace ts::core
