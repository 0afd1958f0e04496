// Hugging Face model folders (HfModel.h): the committed tiny LlamaForCausalLM
// (tests/data/llama_tiny) and GPT2LMHeadModel (tests/data/lora_tiny/gpt2_base) load into the
// engine and reproduce transformers' logits; BF16 shards behind an index load to the exact
// widened values; and each kind of bad folder is refused naming the file and what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../../support/TrainerHarness.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/io/HfExport.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/train/Evaluate.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::engine;
namespace fs = std::filesystem;
using ts::testsupport::errorOf;
using ts::testsupport::scratchDir;

namespace {

const fs::path kData = fs::path(TRAINSCOPE_TEST_DATA);

GptConfig configOf(const HfModel& hf, int T) {
  ts::core::RunConfig rc;
  rc.model = hf.model;
  rc.model.seq_len = T;
  return gptConfigFrom(rc, hf.model.vocab);
}

// Logits of the golden batch against `expected` (1e-5 + 1e-4 relative, as the golden tests).
void expectLogits(Gpt& m, const SafetensorsFile& expected, const char* key = "logits") {
  const auto in = expected.i32("inputs");
  const int B = int(expected.entry("inputs").shape[0]), T = int(expected.entry("inputs").shape[1]);
  const int V = m.config().vocab;
  m.allocate(B);
  m.forward(in.data(), nullptr, B, T, 0.f);
  const auto want = expected.f32(key);
  std::vector<float> row(V);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      m.logitsRow(b, t, row.data());
      for (int v = 0; v < V; ++v) {
        const float e = want[(size_t(b) * T + t) * V + v];
        ASSERT_NEAR(row[v], e, 1e-5 + 1e-4 * std::abs(e)) << b << "," << t << "," << v;
      }
    }
}

// A LoRA run (r 4, lr 1e-2) on the committed Hugging Face llama, its model.* from the folder.
ts::core::RunConfig llamaLoraRun(std::vector<std::string> targets, int steps) {
  const std::string base = (kData / "llama_tiny").string();
  auto c = ts::testsupport::tinyAdditionConfig();
  c.model = openHfModel(base).model;
  c.model.seq_len = 16;
  c.finetune.base_checkpoint = base;
  c.finetune.lora.r = 4;
  c.finetune.lora.targets = std::move(targets);
  c.optimizer.lr = 1e-2;
  c.train.steps = steps;
  return c;
}

}  // namespace

TEST(HfModel, LlamaFolderReproducesTransformersLogits) {
  const auto hf = openHfModel((kData / "llama_tiny").string());
  EXPECT_EQ(hf.architecture, "LlamaForCausalLM");
  EXPECT_EQ(hf.model.arch, "llama");
  EXPECT_EQ(hf.model.layers, 2);
  EXPECT_EQ(hf.model.kv_heads, 2);
  EXPECT_EQ(hf.model.d_ff, 88);
  EXPECT_EQ(hf.model.vocab, 200);
  auto expected = SafetensorsFile::load((kData / "llama_tiny" / "expected.safetensors").string());
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(configOf(hf, int(expected.entry("inputs").shape[1])), backend.get(), &tracker);
  EXPECT_EQ(loadHfWeights(hf, m.arena()).size(), m.params().size());
  expectLogits(m, expected);
}

// GPT-2's Conv1D weights are stored (in, out): loaded transposed, exactly the engine-layout copy
// of the same weights, and the logits are the golden GPT-2's.
TEST(HfModel, Gpt2FolderTransposesConv1DAndReproducesTheGoldenLogits) {
  const fs::path dir = kData / "lora_tiny" / "gpt2_base";
  const auto hf = openHfModel(dir.string());
  EXPECT_EQ(hf.architecture, "GPT2LMHeadModel");
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(configOf(hf, hf.model.seq_len), backend.get(), &tracker);
  loadHfWeights(hf, m.arena());
  auto engineLayout = SafetensorsFile::load((dir / "engine.safetensors").string());
  for (const auto& p : m.params()) {
    std::vector<float> got(size_t(p.numel));
    backend->copyToHost(got.data(), m.param(p), got.size() * sizeof(float));
    EXPECT_EQ(got, engineLayout.f32(p.name)) << p.name;
  }
  expectLogits(
      m, SafetensorsFile::load((kData / "golden" / "tiny_gpt_expected.safetensors").string()));
}

// BF16 tensors in two shards behind model.safetensors.index.json: each loads as its exact fp32
// widening.
TEST(HfModel, Bf16ShardsBehindAnIndexLoadExactly) {
  const fs::path src = kData / "llama_tiny";
  const fs::path dir = scratchDir("shards");
  fs::copy_file(src / "config.json", dir / "config.json");
  auto full = SafetensorsFile::load((src / "model.safetensors").string());
  SafetensorsWriter w[2];
  nlohmann::json map = nlohmann::json::object();
  std::map<std::string, std::vector<float>> widened;
  int i = 0;
  for (const auto& [name, e] : full.entries()) {
    auto v = full.f32(name);
    std::vector<uint16_t> h(v.size());
    std::vector<float> back(v.size());
    for (size_t k = 0; k < v.size(); ++k) {
      h[k] = ts::kernels::floatToBf16(v[k]);
      back[k] = ts::kernels::bf16ToFloat(h[k]);
    }
    widened[name] = back;
    const int shard = i++ % 2;
    w[shard].add(name, "BF16", e.shape, h.data(), h.size() * 2);
    map[name] = "model-0000" + std::to_string(shard + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s) {
    std::ofstream(dir / ("model-0000" + std::to_string(s + 1) + "-of-00002.safetensors"),
                  std::ios::binary)
        << w[s].serialize();
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::json({{"weight_map", map}}).dump();
  const auto hf = openHfModel(dir.string());
  EXPECT_EQ(hf.files.size(), 2u);
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt m(configOf(hf, 8), backend.get(), &tracker);
  loadHfWeights(hf, m.arena());
  for (const auto& p : m.params()) {
    std::vector<float> got(size_t(p.numel));
    backend->copyToHost(got.data(), m.param(p), got.size() * sizeof(float));
    EXPECT_EQ(got, widened.at(p.name)) << p.name;
  }
  // A shard gone: the index and the shard are named.
  fs::remove(dir / "model-00002-of-00002.safetensors");
  const std::string err = errorOf([&] { openHfModel(dir.string()); });
  EXPECT_NE(err.find("model.safetensors.index.json"), std::string::npos) << err;
  EXPECT_NE(err.find("model-00002-of-00002.safetensors is missing"), std::string::npos) << err;
  fs::remove_all(dir);
}

// Bad folders: each refused, naming the file and the field or tensor.
TEST(HfModel, BadFoldersAreRefusedNamingFileAndField) {
  const fs::path src = kData / "llama_tiny";
  auto config = [&] {
    std::ifstream in(src / "config.json");
    return nlohmann::json::parse(in);
  };
  auto folder = [&](const std::string& name, const nlohmann::json& cfg,
                    const std::string& weights) {
    const fs::path d = scratchDir(name);
    std::ofstream(d / "config.json") << cfg.dump();
    if (!weights.empty()) std::ofstream(d / "model.safetensors", std::ios::binary) << weights;
    return d;
  };
  std::string bytes;
  {
    std::ifstream in(src / "model.safetensors", std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  struct Case {
    std::string name;
    nlohmann::json cfg;
    std::string weights, expect;
  };
  auto cfg = config();
  std::vector<Case> cases;
  {
    auto c = cfg;
    c["architectures"] = {"MixtralForCausalLM"};
    cases.push_back({"arch", c, bytes, "'MixtralForCausalLM' is not supported"});
  }
  {
    auto c = cfg;
    c["rope_scaling"] = {{"rope_type", "mrope"}, {"factor", 8.0}};
    cases.push_back({"rope", c, bytes, "rope_type 'mrope' is not supported"});
  }
  {
    auto c = cfg;
    c["attention_bias"] = true;
    cases.push_back({"bias", c, bytes, "attention_bias must be false"});
  }
  {
    auto c = cfg;
    c["rms_norm_eps"] = -1e-6;
    cases.push_back({"eps", c, bytes, "rms_norm_eps must be positive"});
  }
  {
    auto c = cfg;
    c.erase("num_hidden_layers");
    cases.push_back({"field", c, bytes, "field 'num_hidden_layers' is missing"});
  }
  cases.push_back({"truncated", cfg, bytes.substr(0, bytes.size() / 2), "outside the file"});
  {
    // A header that lies: two tensors claim the same bytes.
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    auto header = nlohmann::json::parse(bytes.substr(8, n));
    std::vector<std::string> names;
    for (const auto& [k, v] : header.items())
      if (k != "__metadata__") names.push_back(k);
    const auto& a = header[names[0]];
    auto& b = header[names[1]];
    // Same size, overlapping offsets (b moved onto a).
    if (a["data_offsets"][1].get<uint64_t>() - a["data_offsets"][0].get<uint64_t>() ==
        b["data_offsets"][1].get<uint64_t>() - b["data_offsets"][0].get<uint64_t>())
      b["data_offsets"] = a["data_offsets"];
    else
      b["data_offsets"] = {
          a["data_offsets"][0].get<uint64_t>(),
          a["data_offsets"][0].get<uint64_t>() +
              (b["data_offsets"][1].get<uint64_t>() - b["data_offsets"][0].get<uint64_t>())};
    std::string h = header.dump();
    h.resize(n, ' ');  // same header length keeps the data where it was
    ASSERT_LE(header.dump().size(), size_t(n));
    std::string lied = bytes.substr(0, 8) + h + bytes.substr(8 + n);
    cases.push_back({"overlap", cfg, lied, "overlap (data_offsets lie)"});
  }
  cases.push_back({"noweights", cfg, "", "has neither model.safetensors"});
  for (const auto& c : cases) {
    const fs::path d = folder(c.name, c.cfg, c.weights);
    const std::string err = errorOf([&] { openHfModel(d.string()); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_NE(err.find(d.string()), std::string::npos) << c.name << " names the folder: " << err;
    fs::remove_all(d);
  }
  // A run whose model does not describe the folder: every differing key listed.
  const auto hf = openHfModel(src.string());
  ts::core::ModelConfig run = hf.model;
  run.layers = 3;
  run.d_ff = 64;
  const auto mism = hfShapeMismatches(hf, run, 14);
  ASSERT_EQ(mism.size(), 3u);
  EXPECT_NE(mism[0].find("model.layers: the run has 3"), std::string::npos) << mism[0];
  EXPECT_NE(mism[1].find("model.vocab: the run has 14"), std::string::npos) << mism[1];
  EXPECT_NE(mism[2].find("model.d_ff"), std::string::npos) << mism[2];
}

// LoRA fine-tuning of the Hugging Face llama through the Trainer: the base from the folder
// (step 1's loss is the base model's, and the loss falls), an adapter checkpoint tied to the
// folder; a run whose shape does not fit the folder is refused with the keys that differ.
TEST(HfModel, LoraFineTunesAFolderBase) {
  const std::string base = (kData / "llama_tiny").string();
  const auto hf = openHfModel(base);
  auto c = llamaLoraRun({"q_proj", "v_proj"}, 20);
  const fs::path dir = ts::testsupport::tempDir("hf_lora", "llama");
  ts::testsupport::Recorded rec;
  auto r = ts::testsupport::runTrainer(c, rec, dir.string());
  ASSERT_EQ(r.status, "completed") << r.reason;
  const auto steps = rec.of(ts::core::EventType::Step);
  ASSERT_EQ(steps.size(), 20u);
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>());
  // The checkpoint holds the adapters and names its base.
  std::ifstream st(dir / "checkpoints" / "step_00000020" / "state.json");
  const auto s = nlohmann::json::parse(st);
  EXPECT_EQ(s["weights"], "trainable");
  EXPECT_EQ(s["extra"]["base_checkpoint"]["path"], base);
  EXPECT_EQ(s["extra"]["base_checkpoint"]["checksum"], hfFingerprint(hf));
  fs::remove_all(dir);
  c.model.layers = 3;
  ts::testsupport::Recorded rec2;
  auto bad = ts::testsupport::runTrainer(c, rec2, dir.string());
  EXPECT_EQ(bad.status, "failed");
  EXPECT_TRUE(bad.badInput);
  EXPECT_NE(bad.reason.find("model.layers: the run has 3"), std::string::npos) << bad.reason;
  fs::remove_all(dir);
}

// import-hf: the folder as a trainscope checkpoint. A LoRA run on the imported checkpoint is the
// run on the folder itself, bit for bit (same base weights, same adapters, same data).
TEST(HfModel, ImportedCheckpointIsTheSameBase) {
  const std::string folder = (kData / "llama_tiny").string();
  const fs::path out = scratchDir("import") / "llama_tiny";
  EXPECT_EQ(importHfModel(folder, out.string()), 21u);
  std::ifstream st(out / "state.json");
  const auto s = nlohmann::json::parse(st);
  EXPECT_EQ(s["optimizer"]["type"], "none");
  EXPECT_EQ(s["config"]["model"]["arch"], "llama");
  EXPECT_EQ(s["extra"]["imported_from"]["architecture"], "LlamaForCausalLM");
  EXPECT_TRUE(ts::core::parseConfigJson(s["config"]).ok()) << "a run config a run can start from";
  const auto hf = openHfModel(folder);
  auto c = ts::testsupport::tinyAdditionConfig();
  c.model = hf.model;
  c.model.seq_len = 16;
  c.finetune.lora.r = 2;
  c.finetune.lora.targets = {"q", "v", "fc"};
  c.train.steps = 6;
  std::vector<std::vector<double>> losses;
  for (const std::string& base : {folder, out.string()}) {
    c.finetune.base_checkpoint = base;
    const fs::path dir = scratchDir("import_run");
    ts::testsupport::Recorded rec;
    auto r = ts::testsupport::runTrainer(c, rec, dir.string());
    ASSERT_EQ(r.status, "completed") << r.reason;
    losses.emplace_back();
    for (const auto& e : rec.of(ts::core::EventType::Step)) losses.back().push_back(e["loss"]);
    fs::remove_all(dir);
  }
  EXPECT_EQ(losses[0], losses[1]);
  fs::remove_all(out.parent_path());
}

namespace {
// A trained tiny run's last checkpoint.
std::string trainedCheckpoint(ts::core::RunConfig c, const fs::path& dir) {
  ts::testsupport::Recorded rec;
  auto r = ts::testsupport::runTrainer(c, rec, dir.string());
  EXPECT_EQ(r.status, "completed") << r.reason;
  return r.lastCheckpoint;
}
std::vector<float> hostValues(Gpt& m, const ParamInfo& p) {
  std::vector<float> v(size_t(p.numel));
  ts::testsupport::hostCopy(m.paramBuffer()).swap(v);
  return std::vector<float>(v.begin() + p.offset, v.begin() + p.offset + p.numel);
}
}  // namespace

// export-hf of full checkpoints, both architectures: the folder loads back (HfModel.h reads it
// as transformers would lay it out) to exactly the checkpoint's weights; with a small shard size
// it is sharded behind an index and still loads back exactly.
TEST(HfExport, FullCheckpointsRoundTripExactlySingleAndSharded) {
  for (const char* arch : {"gpt2", "llama"}) {
    auto c = ts::testsupport::tinyAdditionConfig();
    c.model.arch = arch;
    if (c.model.arch == "llama") c.model.kv_heads = 1;
    c.train.steps = 3;
    const fs::path dir = scratchDir(std::string("export_") + arch);
    const std::string ck = trainedCheckpoint(c, dir / "run");
    auto backend = ts::kernels::makeCpuBackend();
    MemoryTracker t;
    Gpt ref(gptConfigFrom(c, 14), backend.get(), &t);
    loadCheckpoint(ck, ref.arena(), nullptr);
    for (int64_t shard : {int64_t(1) << 30, int64_t(20000)}) {
      HfExportOptions o;
      o.shardBytes = shard;
      const fs::path out = dir / ("hf_" + std::to_string(shard));
      const auto r = exportHf(ck, out.string(), o);
      EXPECT_FALSE(r.adapter);
      EXPECT_EQ(fs::exists(out / "model.safetensors.index.json"), shard < 100000) << arch;
      const auto hf = openHfModel(out.string());
      EXPECT_EQ(hf.model.arch, c.model.arch);
      EXPECT_EQ(hf.model.layers, c.model.layers);
      EXPECT_EQ(hf.model.vocab, 14);
      Gpt back(gptConfigFrom(c, 14), backend.get(), &t);
      loadHfWeights(hf, back.arena());
      for (const auto& p : ref.params())
        EXPECT_EQ(hostValues(back, p), hostValues(ref, p)) << p.name;
    }
  }
}

// export-hf of a LoRA run: PEFT's files (keys base_model.model.<module path>.lora_A.weight,
// adapter_config.json as PEFT reads it), whose adapters on the base reproduce the run's model;
// with --merge a full model whose logits are the adapter model's and not the base's.
TEST(HfExport, LoraRunsExportPeftAdaptersOrTheMergedModel) {
  const std::string base = (kData / "llama_tiny").string();
  const auto hf = openHfModel(base);
  auto c = llamaLoraRun({"q_proj", "v_proj", "down_proj"}, 5);
  c.finetune.lora.alpha = 8;
  const fs::path dir = scratchDir("export_lora");
  const std::string ck = trainedCheckpoint(c, dir / "run");
  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker t;
  // The run's model: base + trained adapters.
  Gpt lora(gptConfigFrom(c, hf.model.vocab), backend.get(), &t);
  loadHfWeights(hf, lora.arena());
  loadCheckpoint(ck, lora.arena(), nullptr);
  // Adapter files.
  const auto r = exportHf(ck, (dir / "adapter").string());
  EXPECT_TRUE(r.adapter);
  EXPECT_EQ(r.tensors, 2 * 3 * c.model.layers);
  const auto ac = nlohmann::json::parse(std::ifstream(dir / "adapter" / "adapter_config.json"));
  EXPECT_EQ(ac["peft_type"], "LORA");
  EXPECT_EQ(ac["r"], 4);
  EXPECT_EQ(ac["lora_alpha"], 8.0);
  EXPECT_EQ(ac["fan_in_fan_out"], false);
  EXPECT_EQ(ac["base_model_name_or_path"], base);
  EXPECT_EQ(ac["target_modules"], nlohmann::json({"down_proj", "q_proj", "v_proj"}));
  auto adapters = SafetensorsFile::load((dir / "adapter" / "adapter_model.safetensors").string());
  EXPECT_TRUE(adapters.has("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(adapters.has("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"));
  // Read back as PEFT would apply them (the LoraGolden loader's mapping): the same model.
  Gpt again(gptConfigFrom(c, hf.model.vocab), backend.get(), &t);
  loadHfWeights(hf, again.arena());
  auto host = ts::testsupport::hostCopy(again.paramBuffer());
  for (const auto& p : again.params())
    if (adapters.has("base_model.model." + p.name))
      adapters.readF32("base_model.model." + p.name, host.data() + p.offset, p.numel);
  again.paramBuffer().copyFromHost(host.data());
  for (const auto& p : lora.params())
    EXPECT_EQ(hostValues(again, p), hostValues(lora, p)) << p.name;
  // Merged: logits of the adapter model, not the base's.
  exportHf(ck, (dir / "merged").string(), HfExportOptions{true, int64_t(1) << 30});
  const auto mhf = openHfModel((dir / "merged").string());
  auto plainCfg = c;
  plainCfg.finetune = {};
  Gpt merged(gptConfigFrom(plainCfg, hf.model.vocab), backend.get(), &t);
  loadHfWeights(mhf, merged.arena());
  Gpt baseModel(gptConfigFrom(plainCfg, hf.model.vocab), backend.get(), &t);
  loadHfWeights(hf, baseModel.arena());
  const std::vector<int32_t> tok = {1, 5, 9, 2, 7, 3, 3, 11, 0, 4, 8, 6, 13, 2, 1, 10};
  auto logits = [&](Gpt& m) {
    m.allocate(1);
    m.forward(tok.data(), nullptr, 1, 16, 0.f);
    std::vector<float> all, row(size_t(hf.model.vocab));
    for (int i = 0; i < 16; ++i) {
      m.logitsRow(0, i, row.data());
      all.insert(all.end(), row.begin(), row.end());
    }
    return all;
  };
  const auto want = logits(lora), got = logits(merged), plain = logits(baseModel);
  double moved = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << i;
    moved = std::max(moved, double(std::abs(want[i] - plain[i])));
  }
  EXPECT_GT(moved, 1e-3) << "the merged export is not the unmodified base";
  fs::remove_all(dir);
}

// evaluate: the mean cross-entropy over consecutive windows equals transformers' on the same
// windows (tools/make_eval_golden.py, float64), for both folders; for a checkpoint (the
// imported llama) the same number; errors name what is wrong.
TEST(Evaluate, MatchesTransformersOnTheSameWindows) {
  const auto expected = nlohmann::json::parse(std::ifstream(kData / "eval" / "expected.json"));
  auto backend = ts::kernels::makeCpuBackend();
  for (const auto& [name, e] : expected.items()) {
    const std::string folder = (kData / ".." / ".." / e["folder"].get<std::string>()).string();
    const auto tokens =
        readTokenFile((kData / "eval" / e["tokens_file"].get<std::string>()).string());
    const auto r = evaluateModel(folder, tokens, e["seq"].get<int>(), backend.get(), 4);
    const double want = e["loss"];
    EXPECT_NEAR(r.loss, want, 1e-5 * want) << name;
    EXPECT_EQ(r.tokens, e["tokens"].get<int64_t>()) << name;
    EXPECT_EQ(r.windows, e["windows"].get<int64_t>()) << name;
    EXPECT_NEAR(r.perplexity, e["perplexity"].get<double>(), 1e-4 * e["perplexity"].get<double>());
  }
  // The imported checkpoint of the llama folder gives the same loss.
  const fs::path out = scratchDir("eval_import") / "ckpt";
  importHfModel((kData / "llama_tiny").string(), out.string());
  const auto& e = expected["llama"];
  const auto tokens = readTokenFile((kData / "eval" / "tokens_llama.bin").string());
  EXPECT_NEAR(evaluateModel(out.string(), tokens, 16, backend.get()).loss, e["loss"].get<double>(),
              1e-5 * e["loss"].get<double>());
  // Too short, a token outside the vocabulary, an odd-sized token file.
  EXPECT_NE(errorOf([&] {
              evaluateModel(out.string(), {1, 2, 3}, 16, backend.get());
            }).find("fewer than one window"),
            std::string::npos);
  std::vector<int32_t> bad(40, 3);
  bad[17] = 999;
  EXPECT_NE(errorOf([&] {
              evaluateModel(out.string(), bad, 16, backend.get());
            }).find("token 999 at position 17 is outside the model's vocabulary of 200"),
            std::string::npos);
  std::ofstream(out.parent_path() / "odd.bin") << "abc";
  EXPECT_NE(errorOf([&] {
              readTokenFile((out.parent_path() / "odd.bin").string());
            }).find("not a whole number of uint16"),
            std::string::npos);
  fs::remove_all(out.parent_path());
}

// evaluate --tokens reads the file at the model's width (uint16 for these tiny vocabularies:
// the same loss as the ids read by hand); readTokenFile reads uint32 above 65,536 ids and names
// the file, the offset and the id of one outside the vocabulary.
TEST(Evaluate, TokenFilesAreReadAtTheModelsWidth) {
  const auto expected = nlohmann::json::parse(std::ifstream(kData / "eval" / "expected.json"));
  auto backend = ts::kernels::makeCpuBackend();
  const auto& e = expected["llama"];
  const std::string folder = (kData / ".." / ".." / e["folder"].get<std::string>()).string();
  const std::string file = (kData / "eval" / e["tokens_file"].get<std::string>()).string();
  EXPECT_NEAR(evaluateTokenFile(folder, file, e["seq"].get<int>(), backend.get()).loss,
              e["loss"].get<double>(), 1e-5 * e["loss"].get<double>());
  const fs::path dir = scratchDir("eval_u32");
  std::string bytes;
  for (uint32_t id : {5u, 70000u, 151935u, 0u})
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xFF));
  std::ofstream(dir / "u32.bin", std::ios::binary) << bytes;
  EXPECT_EQ(readTokenFile((dir / "u32.bin").string(), 151936),
            (std::vector<int32_t>{5, 70000, 151935, 0}));
  const std::string m = errorOf([&] { readTokenFile((dir / "u32.bin").string(), 100000); });
  EXPECT_NE(m.find("u32.bin': token 2 at byte offset 8 has id 151935, not below the model's "
                   "vocabulary 100000"),
            std::string::npos)
      << m;
  std::ofstream(dir / "odd.bin", std::ios::binary) << bytes << "abc";
  EXPECT_NE(errorOf([&] {
              readTokenFile((dir / "odd.bin").string(), 151936);
            }).find("has a length of 19 bytes: not a whole number of uint32 token ids"),
            std::string::npos);
  fs::remove_all(dir);
}

// export-hf never removes what it did not write: a folder holding the user's files is refused
// before anything is written and keeps every file; a file at --out too. An empty folder and a
// previous export (marked) are replaced, the previous export by an atomic exchange that leaves
// no file of the old export behind; a file added to a previous export by hand is refused too.
TEST(HfExport, RefusesAFolderItDidNotWriteAndReplacesOnlyItsOwn) {
  auto c = ts::testsupport::tinyAdditionConfig();
  c.train.steps = 1;
  const fs::path dir = scratchDir("export_target");
  const std::string ck = trainedCheckpoint(c, dir / "run");
  auto errorOf = [&](const fs::path& out) {
    try {
      exportHf(ck, out.string());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };

  const fs::path user = dir / "user";
  fs::create_directories(user / "sub");
  std::ofstream(user / "notes.txt") << "mine";
  std::ofstream(user / "sub" / "data.bin") << "also mine";
  const std::string why = errorOf(user);
  EXPECT_NE(why.find("is not empty and is not a folder export-hf wrote"), std::string::npos) << why;
  EXPECT_NE(why.find(user.string()), std::string::npos) << why;
  EXPECT_TRUE(fs::exists(user / "notes.txt"));
  EXPECT_TRUE(fs::exists(user / "sub" / "data.bin"));
  EXPECT_FALSE(fs::exists(user / "config.json"));
  for (const auto& e : fs::directory_iterator(dir))  // no temporary folder left either
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();

  const fs::path file = dir / "a_file";
  std::ofstream(file) << "x";
  EXPECT_NE(errorOf(file).find("exists and is not a folder"), std::string::npos);
  EXPECT_TRUE(fs::is_regular_file(file));

  const fs::path empty = dir / "empty";
  fs::create_directories(empty);
  EXPECT_EQ(errorOf(empty), "");
  EXPECT_TRUE(fs::exists(empty / "config.json"));
  EXPECT_TRUE(fs::exists(empty / ".trainscope-export"));

  // A previous export (sharded: more files) replaced by one that writes fewer.
  HfExportOptions sharded;
  sharded.shardBytes = 20000;
  const fs::path again = dir / "again";
  exportHf(ck, again.string(), sharded);
  ASSERT_TRUE(fs::exists(again / "model.safetensors.index.json"));
  // A file added to it by hand is the user's: refused, naming it, and kept.
  std::ofstream(again / "stale.txt") << "left by hand in the old export";
  const std::string added = errorOf(again);
  EXPECT_NE(added.find("stale.txt was not written by it"), std::string::npos) << added;
  EXPECT_TRUE(fs::exists(again / "stale.txt"));
  fs::rename(again / "stale.txt", dir / "stale.txt");
  exportHf(ck, again.string());
  EXPECT_TRUE(fs::exists(again / "model.safetensors"));
  EXPECT_FALSE(fs::exists(again / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(again / "stale.txt"));
  EXPECT_EQ(openHfModel(again.string()).model.layers, c.model.layers);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}
