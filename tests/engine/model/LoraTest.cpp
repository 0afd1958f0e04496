// LoRA against PEFT (tools/make_lora_golden.py, tests/data/lora_tiny/: PEFT's adapters on a
// tiny LlamaForCausalLM and GPT-2, float64 reference): the engine given the base weights and
// the adapter files reproduces the logits, the loss, every adapter gradient (the script checked
// them against central differences) and the merged weights. Then what PEFT's semantics promise:
// a fresh adapter (B = 0) leaves the base's logits bit for bit; the frozen base has no gradient
// and no optimizer state; merged weights give the adapter's logits; dropout is on the adapter
// input only. Tolerances as LlamaGoldenTest (the script's fp32 run uses < 20% of them).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "../../support/TestBackends.h"
#include "../../support/TrainerHarness.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/HfExport.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;
using ts::testsupport::hostCopy;
namespace fs = std::filesystem;

namespace {

const fs::path kData = fs::path(TRAINSCOPE_TEST_DATA);

nlohmann::json readJson(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// The engine config of a golden case: the base model's shape and the adapter_config.json.
struct Golden {
  GptConfig cfg;
  fs::path base, dir;
  std::string keyPrefix;  // PEFT key = keyPrefix + engine name
};

Golden golden(const std::string& name) {
  Golden g;
  g.dir = kData / "lora_tiny" / name;
  const bool gpt2 = name.rfind("gpt2", 0) == 0;
  // The base is a Hugging Face folder: its shape from config.json (HfModel.h).
  g.base = gpt2 ? kData / "lora_tiny" / "gpt2_base" : kData / "llama_tiny";
  g.keyPrefix = gpt2 ? "base_model.model.transformer." : "base_model.model.";
  ts::core::RunConfig rc;
  rc.model = openHfModel(g.base.string()).model;
  g.cfg = gptConfigFrom(rc, rc.model.vocab);
  GptConfig& c = g.cfg;
  // PEFT's adapter_config.json is what the engine's finetune.lora says.
  const auto ac = readJson(g.dir / "adapter_config.json");
  EXPECT_EQ(ac.at("peft_type"), "LORA");
  c.lora.r = ac.at("r");
  c.lora.alpha = ac.at("lora_alpha");
  c.lora.dropout = ac.at("lora_dropout");
  c.lora.use_rslora = ac.value("use_rslora", false);
  c.lora.targets = ac.at("target_modules").get<std::vector<std::string>>();
  const auto e = SafetensorsFile::load((g.dir / "expected.safetensors").string());
  c.seq_len = static_cast<int>(e.entry("inputs").shape.at(1));
  return g;
}

// Writes every tensor of `file` the model has (name mapped by `key`) into it; returns how many.
int loadInto(Gpt& m, SafetensorsFile& file,
             const std::function<std::string(const ParamInfo&)>& key) {
  auto host = hostCopy(m.paramBuffer());
  int n = 0;
  for (const auto& p : m.params()) {
    const std::string k = key(p);
    if (!file.has(k)) continue;
    EXPECT_EQ(file.entry(k).shape, p.shape) << k;
    file.readF32(k, host.data() + p.offset, p.numel);
    ++n;
  }
  m.paramBuffer().copyFromHost(host.data());
  return n;
}

bool isAdapter(const ParamInfo& p) {
  return p.spec.role == ts::core::TensorRole::LoraA || p.spec.role == ts::core::TensorRole::LoraB;
}

class LoraGolden : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(LoraGolden, MatchesPeft) {
  Golden g = golden(GetParam());
  auto expected = SafetensorsFile::load((g.dir / "expected.safetensors").string());
  auto adapters = SafetensorsFile::load((g.dir / "adapter_model.safetensors").string());
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt model(g.cfg, backend.get(), &tracker);
  int nAdapters = 0, nBase = 0;
  for (const auto& p : model.params()) (isAdapter(p) ? nAdapters : nBase)++;
  // Every adapter tensor PEFT wrote is one of the model's, and the other way round.
  EXPECT_EQ(size_t(nAdapters), adapters.entries().size());
  EXPECT_EQ(loadHfWeights(openHfModel(g.base.string()), model.arena()).size(), size_t(nBase));
  EXPECT_EQ(loadInto(model, adapters, [&](const ParamInfo& p) { return g.keyPrefix + p.name; }),
            nAdapters);
  const auto inputs = expected.i32("inputs"), targets = expected.i32("targets");
  const int B = static_cast<int>(expected.entry("inputs").shape.at(0)), T = g.cfg.seq_len;
  const int V = g.cfg.vocab;
  model.allocate(B);
  model.forward(inputs.data(), nullptr, B, T, 0.f);
  const auto logits = expected.f32("logits"), baseLogits = expected.f32("base_logits");
  std::vector<float> row(V);
  double moved = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      model.logitsRow(b, t, row.data());
      for (int v = 0; v < V; ++v) {
        const size_t i = (size_t(b) * T + t) * V + v;
        ASSERT_NEAR(row[v], logits[i], 1e-5 + 1e-4 * std::abs(logits[i])) << b << "," << t;
        moved = std::max(moved, double(std::abs(logits[i] - baseLogits[i])));
      }
    }
  EXPECT_GT(moved, 0.5) << "the golden adapters change the model";
  int64_t count = 0;
  for (int32_t t : targets) count += t >= 0;
  model.zeroGrad();
  int64_t n = 0;
  const double loss = model.forward(inputs.data(), targets.data(), B, T, 1.f / count, &n) / n;
  model.backward();
  const double expLoss = expected.f32("loss").at(0);
  EXPECT_NEAR(loss, expLoss, 1e-5 + 1e-4 * std::abs(expLoss));
  const auto grads = hostCopy(model.gradBuffer());
  for (const auto& p : model.params()) {
    if (!isAdapter(p)) {
      EXPECT_FALSE(p.trainable()) << p.name << ": the base is frozen";
      continue;
    }
    const auto e = expected.f32("grad." + g.keyPrefix + p.name);
    ASSERT_EQ(int64_t(e.size()), p.numel) << p.name;
    double gmax = 0;
    for (float x : e) gmax = std::max(gmax, double(std::abs(x)));
    ASSERT_GT(gmax, 0) << p.name;
    for (int64_t i = 0; i < p.numel; ++i)
      ASSERT_NEAR(grads[size_t(p.gradOffset + i)], e[size_t(i)], 1e-7 + 1e-3 * gmax)
          << p.name << "[" << i << "]";
  }
  // Merged weights, W + scaling B A, against PEFT's merge_and_unload (GPT-2's Conv1D stores
  // them transposed, (in, out)).
  const auto merged = model.mergedWeights();
  EXPECT_FALSE(merged.empty());
  for (const auto& [name, w] : merged) {
    const ParamInfo* p = model.find(name);
    const bool conv1d = g.cfg.architecture == "gpt2";
    const auto e = expected.f32("merged." + (conv1d ? "transformer." + name : name));
    ASSERT_EQ(e.size(), w.size()) << name;
    const int64_t out = p->shape[0], in = p->shape[1];
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) {
        const float want = conv1d ? e[size_t(i * out + o)] : e[size_t(o * in + i)];
        ASSERT_NEAR(w[size_t(o * in + i)], want, 1e-6) << name << "[" << o << "," << i << "]";
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraGolden, ::testing::Values("r4_all", "r8_rslora_qv", "gpt2_r4"));

namespace {

GptConfig tiny(const std::string& arch) {
  GptConfig c;
  c.architecture = arch;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = arch == "llama" ? 2 : 0;
  c.d_model = 16;
  c.dFf = arch == "llama" ? 24 : 0;
  c.seq_len = 8;
  c.vocab = 11;
  return c;
}

std::vector<std::string> allTargets(const std::string& arch) {
  if (arch == "llama")
    return {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return {"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"};
}

const std::vector<int32_t> kTok = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6, 7, 8, 9, 10, 2, 1};
constexpr int kB = 2, kT = 8;

std::vector<float> logitsOf(Gpt& m) {
  m.forward(kTok.data(), nullptr, kB, kT, 0.f);
  std::vector<float> out(size_t(kB) * kT * m.config().vocab);
  for (int b = 0; b < kB; ++b)
    for (int t = 0; t < kT; ++t)
      m.logitsRow(b, t, out.data() + (size_t(b) * kT + t) * m.config().vocab);
  return out;
}

class LoraOn : public ::testing::TestWithParam<std::string> {};

}  // namespace

// A fresh adapter (B = 0) leaves the model exactly the base: the same seed gives the same base
// weights with or without LoRA, and the step-0 logits are bitwise the base model's, for every
// policy that keeps fp32 compute copies.
TEST_P(LoraOn, FreshAdaptersGiveTheBaseLogitsBitwise) {
  for (const std::string arch : {"gpt2", "llama"})
    for (DType working : {DType::F32, DType::BF16}) {
      auto be = ts::testsupport::makeTestBackend(GetParam());
      MemoryTracker t0, t1;
      GptConfig c = tiny(arch);
      c.working = working;
      Gpt base(c, be.get(), &t0);
      c.lora.r = 4;
      c.lora.alpha = 8;
      c.lora.targets = allTargets(arch);
      Gpt lora(c, be.get(), &t1);
      base.initWeights(3);
      lora.initWeights(3);
      for (const auto& p : base.params()) {
        const ParamInfo* q = lora.find(p.name);
        ASSERT_NE(q, nullptr) << p.name;
        EXPECT_EQ(hostCopy(*be, base.param(p), p.numel), hostCopy(*be, lora.param(*q), q->numel))
            << p.name;
      }
      base.allocate(kB);
      lora.allocate(kB);
      EXPECT_EQ(logitsOf(base), logitsOf(lora)) << arch;
    }
}

// The frozen base has no gradient and no optimizer state: both are exactly the adapters' size
// (fp32 AdamW: 4 bytes of gradient, 8 of state per adapter element); training changes only the
// adapters.
TEST_P(LoraOn, FrozenBaseHasNoGradientNorStateAndDoesNotMove) {
  for (const std::string arch : {"gpt2", "llama"}) {
    auto be = ts::testsupport::makeTestBackend(GetParam());
    MemoryTracker t;
    GptConfig c = tiny(arch);
    c.lora.r = 2;
    c.lora.targets = {"q", "v", "fc"};
    Gpt m(c, be.get(), &t);
    m.initWeights(5);
    m.allocate(kB);
    int64_t adapterElems = 0;
    std::set<std::string> modules;
    for (const auto& p : m.params())
      if (isAdapter(p)) {
        adapterElems += p.numel;
        modules.insert(p.spec.module);
      } else {
        EXPECT_FALSE(p.trainable()) << p.name;
      }
    // Short names map onto the real modules: gpt2's q and v are both c_attn.
    const std::set<std::string> want =
        arch == "gpt2" ? std::set<std::string>{"c_attn", "c_fc"}
                       : std::set<std::string>{"q_proj", "v_proj", "gate_proj", "up_proj"};
    EXPECT_EQ(modules, want);
    EXPECT_EQ(m.arena().trainableParams(), adapterElems);
    EXPECT_EQ(t.current(MemoryTier::Device, MemoryCategory::Gradients), 4 * adapterElems);
    auto opt = makeOptimizer(ts::core::OptimizerConfig{}, m.arena(), be.get(), &t);
    EXPECT_EQ(t.current(MemoryTier::Device, MemoryCategory::OptimizerState), 8 * adapterElems);
    const auto before = hostCopy(m.paramBuffer());
    std::vector<int32_t> tg(kTok.begin() + 1, kTok.end());
    tg.push_back(0);
    for (int s = 0; s < 3; ++s) {
      m.zeroGrad();
      m.forward(kTok.data(), tg.data(), kB, kT, 1.f / 16.f);
      m.backward();
      opt->step(1e-2f);
    }
    const auto after = hostCopy(m.paramBuffer());
    for (const auto& p : m.params()) {
      const std::vector<float> a(before.begin() + p.offset, before.begin() + p.offset + p.numel);
      const std::vector<float> b(after.begin() + p.offset, after.begin() + p.offset + p.numel);
      if (isAdapter(p))
        EXPECT_NE(a, b) << p.name << " trains";
      else
        EXPECT_EQ(a, b) << p.name << " is frozen";
    }
  }
}

// Merged weights (W + scaling B A) in a model without adapters give the adapter model's logits,
// and those differ from the base's: a merge that exports the unmodified base fails here.
TEST_P(LoraOn, MergedWeightsGiveTheAdapterModelsLogits) {
  for (const std::string arch : {"gpt2", "llama"})
    for (bool rslora : {false, true}) {
      auto be = ts::testsupport::makeTestBackend(GetParam());
      MemoryTracker t0, t1;
      GptConfig c = tiny(arch);
      Gpt plain(c, be.get(), &t0);
      c.lora.r = 4;
      c.lora.alpha = 6;
      c.lora.use_rslora = rslora;
      c.lora.targets = allTargets(arch);
      Gpt lora(c, be.get(), &t1);
      plain.initWeights(7);
      lora.initWeights(7);
      // Nonzero B: as if trained.
      auto host = hostCopy(lora.paramBuffer());
      uint64_t z = 1;
      for (const auto& p : lora.params())
        if (p.spec.role == ts::core::TensorRole::LoraB)
          for (int64_t i = 0; i < p.numel; ++i) {
            z = z * 6364136223846793005ull + 1442695040888963407ull;
            host[size_t(p.offset + i)] = float(int64_t(z >> 40) % 2001 - 1000) * 1e-4f;
          }
      lora.paramBuffer().copyFromHost(host.data());
      plain.allocate(kB);
      lora.allocate(kB);
      const auto baseLogits = logitsOf(plain);
      const auto want = logitsOf(lora);
      auto ph = hostCopy(plain.paramBuffer());
      const auto merged = lora.mergedWeights();
      EXPECT_EQ(merged.size(), size_t(c.layers) * (arch == "llama" ? 7 : 4));
      for (const auto& [name, w] : merged) {
        const ParamInfo* p = plain.find(name);
        ASSERT_NE(p, nullptr) << name;
        std::copy(w.begin(), w.end(), ph.begin() + p->offset);
      }
      plain.paramBuffer().copyFromHost(ph.data());
      const auto got = logitsOf(plain);
      double moved = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::abs(want[i])) << arch << " " << i;
        moved = std::max(moved, double(std::abs(want[i] - baseLogits[i])));
      }
      EXPECT_GT(moved, 1e-3) << arch << ": the adapters changed the model";
    }
}

// Dropout is on the adapter input only: evaluation is the adapter model without it; in
// training the logits move while a model with B = 0 (the adapters add nothing) stays the base
// bit for bit whatever the mask.
TEST_P(LoraOn, DropoutIsOnTheAdapterInputOnly) {
  auto be = ts::testsupport::makeTestBackend(GetParam());
  MemoryTracker t0, t1;
  GptConfig c = tiny("llama");
  c.lora.r = 4;
  c.lora.targets = allTargets("llama");
  Gpt noDrop(c, be.get(), &t0);
  c.lora.dropout = 0.5;
  Gpt drop(c, be.get(), &t1);
  noDrop.initWeights(2);
  drop.initWeights(2);
  noDrop.allocate(kB);
  drop.allocate(kB);
  EXPECT_EQ(logitsOf(drop), logitsOf(noDrop)) << "B = 0: nothing to drop";
  auto host = hostCopy(drop.paramBuffer());
  for (const auto& p : drop.params())
    if (p.spec.role == ts::core::TensorRole::LoraB)
      for (int64_t i = 0; i < p.numel; ++i) host[size_t(p.offset + i)] = 0.01f * float(i % 7 - 3);
  drop.paramBuffer().copyFromHost(host.data());
  noDrop.paramBuffer().copyFromHost(host.data());
  const auto trained = logitsOf(noDrop);
  EXPECT_NE(logitsOf(drop), trained);
  drop.setTraining(false);
  EXPECT_EQ(logitsOf(drop), trained);
}

INSTANTIATE_TEST_SUITE_P(Backends, LoraOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         [](const auto& info) {
                           return ts::testsupport::backendTestName(info.param);
                         });

// The whole fine-tuning loop through the Trainer: a base trained and checkpointed; LoRA runs
// on it (base from finetune.base_checkpoint) learn, write checkpoints that hold only the
// adapters (their size proportional to r), resume bit for bit, and refuse to resume on a
// different base. A Hugging Face folder of another architecture is refused, named.
TEST(LoraTrainer, FineTunesABaseWithAdapterCheckpointsThatResumeBitwise) {
  using ts::core::EventType;
  using ts::testsupport::Recorded;
  for (const char* arch : {"gpt2", "llama"}) {
    auto c = ts::testsupport::tinyAdditionConfig();
    c.model.arch = arch;
    if (c.model.arch == "llama") c.model.kv_heads = 1;
    const fs::path baseDir = ts::testsupport::tempDir("lora_base", arch);
    Recorded baseRec;
    ASSERT_EQ(ts::testsupport::runTrainer(c, baseRec, baseDir.string()).status, "completed");
    const std::string base = (baseDir / "checkpoints" / "step_00000012").string();
    ASSERT_TRUE(fs::exists(base));
    std::map<int, int64_t> payload;  // r -> model.safetensors tensor bytes
    for (int r : {2, 4, 8}) {
      auto f = c;
      f.finetune.base_checkpoint = base;
      f.finetune.lora.r = r;
      f.finetune.lora.alpha = 2.0 * r;
      f.finetune.lora.targets = {"q", "v", "o", "fc", "proj"};
      f.optimizer.lr = 3e-3;
      f.train.checkpoint_every = 6;
      const fs::path dirA = ts::testsupport::tempDir("lora_a" + std::to_string(r), arch);
      Recorded full;
      auto res = ts::testsupport::runTrainer(f, full, dirA.string());
      ASSERT_EQ(res.status, "completed") << res.reason;
      const auto steps = full.of(EventType::Step);
      ASSERT_EQ(steps.size(), 12u);
      EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>()) << arch;
      const fs::path ck6 = dirA / "checkpoints" / "step_00000006";
      auto mf = SafetensorsFile::load((ck6 / "model.safetensors").string());
      int64_t bytes = 0;
      for (const auto& [name, e] : mf.entries()) {
        EXPECT_NE(name.find(".lora_"), std::string::npos) << name << ": only adapters are written";
        bytes += int64_t(e.end - e.begin);
      }
      payload[r] = bytes;
      // Resumed from step 6 on the same base: steps 7..12 bit for bit.
      const fs::path dirB = ts::testsupport::tempDir("lora_b" + std::to_string(r), arch);
      Recorded resumed;
      ts::testsupport::RunOptions ro;
      ro.resume = ck6.string();
      ASSERT_EQ(ts::testsupport::runTrainer(f, resumed, dirB.string(), ro).status, "completed");
      const auto rs = resumed.of(EventType::Step);
      ASSERT_EQ(rs.size(), 6u);
      for (size_t i = 0; i < 6; ++i)
        EXPECT_EQ(steps[6 + i]["loss"].get<double>(), rs[i]["loss"].get<double>()) << arch << i;
      if (r == 4) {
        // Another base (the base run's step-6 checkpoint would do; here: none at all).
        auto other = f;
        other.finetune.base_checkpoint.clear();
        Recorded rec;
        auto bad = ts::testsupport::runTrainer(other, rec, dirB.string() + "_x", ro);
        EXPECT_EQ(bad.status, "failed");
        EXPECT_NE(bad.reason.find("trained on the base"), std::string::npos) << bad.reason;
        fs::remove_all(dirB.string() + "_x");
      }
      fs::remove_all(dirA);
      fs::remove_all(dirB);
    }
    EXPECT_EQ(payload[4], 2 * payload[2]) << arch << ": adapter bytes proportional to r";
    EXPECT_EQ(payload[8], 2 * payload[4]) << arch;
    // A Hugging Face folder of an architecture the engine does not have is named as such.
    const fs::path hf = ts::testsupport::tempDir("lora_hf", arch);
    fs::create_directories(hf);
    std::ofstream(hf / "config.json") << R"({"architectures": ["BertModel"]})";
    auto f = c;
    f.finetune.base_checkpoint = hf.string();
    f.finetune.lora.r = 2;
    Recorded rec;
    auto res = ts::testsupport::runTrainer(f, rec, (hf / "run").string());
    EXPECT_EQ(res.status, "failed");
    EXPECT_TRUE(res.badInput);
    EXPECT_NE(res.reason.find("'BertModel' is not supported"), std::string::npos) << res.reason;
    EXPECT_NE(res.reason.find("config.json"), std::string::npos) << res.reason;
    fs::remove_all(hf);
    fs::remove_all(baseDir);
  }
}

// Bases that cannot be: each refused naming the file and what is wrong, the model untouched.
// And a LoRA run without a base has nothing to export its adapters for.
TEST(LoraTrainer, UnusableBasesAreRefusedNamingTheProblem) {
  using ts::core::EventType;
  auto c = ts::testsupport::tinyAdditionConfig();
  c.train.steps = 2;
  const fs::path dir = ts::testsupport::tempDir("lora_bad_base", "gpt2");
  ts::testsupport::Recorded rec;
  ASSERT_EQ(ts::testsupport::runTrainer(c, rec, (dir / "base").string()).status, "completed");
  const std::string base = (dir / "base" / "checkpoints" / "step_00000002").string();
  auto lora = c;
  lora.finetune.lora.r = 2;
  ASSERT_EQ(ts::testsupport::runTrainer(lora, rec, (dir / "adapters").string()).status,
            "completed");
  const std::string adapters = (dir / "adapters" / "checkpoints" / "step_00000002").string();
  fs::create_directories(dir / "empty");
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker t;
  auto wider = c;
  wider.model.d_model = 64;
  wider.finetune.lora.r = 2;
  Gpt m(gptConfigFrom(wider, 14), backend.get(), &t);
  const auto before = hostCopy(m.paramBuffer());
  auto error = [&](const std::string& path) {
    try {
      loadBaseWeights(path, m.arena());
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(adapters).find("holds only trainable tensors (an adapter checkpoint)"),
            std::string::npos);
  EXPECT_NE(error((dir / "empty").string()).find("is not a checkpoint directory"),
            std::string::npos);
  const std::string shape = error(base);
  EXPECT_NE(
      shape.find("model.safetensors: tensor 'wte' has shape [14,32], the model needs [14,64]"),
      std::string::npos)
      << shape;
  EXPECT_EQ(hostCopy(m.paramBuffer()), before) << "nothing loaded on a refusal";
  // export-hf of adapters trained on a random base: refused, saying why.
  try {
    exportHf(adapters, (dir / "export").string());
    ADD_FAILURE() << "exported adapters without a base";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("randomly initialised base"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "export"));
  fs::remove_all(dir);
}
