// Golden test against transformers' LlamaForCausalLM (tools/make_llama_golden.py, outputs under
// tests/data/llama_tiny/: GQA with 4 heads on 2 kv heads, RoPE, RMSNorm, SwiGLU, untied head):
// the engine given the same weights reproduces the logits, the loss and every parameter
// gradient. The reference ran in float64 (rounded to fp32 when stored); the engine runs fp32.
// Tolerances: logits and loss 1e-4 relative (+1e-5 absolute), gradients 1e-3 of the tensor's
// max |g| per element (transformers' own fp32 run uses a quarter of the logit tolerance and
// 0.2% of the gradient tolerance, tests/data/llama_tiny/README.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;
namespace fs = std::filesystem;

namespace {

struct LlamaGolden {
  GptConfig cfg;
  SafetensorsFile weights, expected;
  std::vector<int32_t> inputs, targets;
  int B = 0, T = 0;
};

LlamaGolden loadGolden() {
  const fs::path dir = fs::path(TRAINSCOPE_TEST_DATA) / "llama_tiny";
  nlohmann::json hf;
  {
    std::ifstream in(dir / "config.json");
    hf = nlohmann::json::parse(in);
  }
  LlamaGolden g{GptConfig{},
                SafetensorsFile::load((dir / "model.safetensors").string()),
                SafetensorsFile::load((dir / "expected.safetensors").string()),
                {},
                {},
                0,
                0};
  GptConfig& c = g.cfg;
  c.architecture = "llama";
  c.layers = hf.at("num_hidden_layers");
  c.heads = hf.at("num_attention_heads");
  c.kvHeads = hf.at("num_key_value_heads");
  c.d_model = hf.at("hidden_size");
  c.dFf = hf.at("intermediate_size");
  c.vocab = hf.at("vocab_size");
  c.ropeTheta = hf.contains("rope_parameters")
                    ? hf["rope_parameters"].at("rope_theta").get<double>()
                    : hf.value("rope_theta", 10000.0);
  g.inputs = g.expected.i32("inputs");
  g.targets = g.expected.i32("targets");
  g.B = static_cast<int>(g.expected.entry("inputs").shape.at(0));
  g.T = static_cast<int>(g.expected.entry("inputs").shape.at(1));
  c.seq_len = g.T;
  return g;
}

void loadWeights(Gpt& model, SafetensorsFile& weights) {
  for (const auto& p : model.params()) {
    ASSERT_TRUE(weights.has(p.name)) << p.name;
    ASSERT_EQ(weights.entry(p.name).shape, p.shape) << p.name;
    weights.readF32(p.name, model.param(p), p.numel);
  }
}

}  // namespace

TEST(LlamaGolden, MatchesTransformers) {
  LlamaGolden g = loadGolden();
  for (bool flash : {false, true}) {
    SCOPED_TRACE(flash ? "flash attention" : "naive attention");
    GptConfig cfg = g.cfg;
    cfg.flash = flash;
    auto backend = ts::kernels::makeCpuBackend();
    MemoryTracker tracker;
    Gpt model(cfg, backend.get(), &tracker);
    ASSERT_EQ(model.params().size(), 21u);
    ASSERT_NO_FATAL_FAILURE(loadWeights(model, g.weights));
    model.allocate(g.B);
    const int V = cfg.vocab;
    model.forward(g.inputs.data(), nullptr, g.B, g.T, 0.f);
    const auto logits = g.expected.f32("logits");
    ASSERT_EQ(logits.size(), size_t(g.B) * g.T * V);
    std::vector<float> row(V);
    for (int b = 0; b < g.B; ++b)
      for (int t = 0; t < g.T; ++t) {
        model.logitsRow(b, t, row.data());
        for (int v = 0; v < V; ++v) {
          const float e = logits[(size_t(b) * g.T + t) * V + v];
          ASSERT_NEAR(row[v], e, 1e-5 + 1e-4 * std::abs(e))
              << "logit " << b << "," << t << "," << v;
        }
      }
    int64_t count = 0;
    for (int32_t t : g.targets) count += t >= 0;
    model.zeroGrad();
    int64_t n = 0;
    const double loss =
        model.forward(g.inputs.data(), g.targets.data(), g.B, g.T, 1.f / count, &n) / n;
    EXPECT_EQ(n, count);
    model.backward();
    const double expLoss = g.expected.f32("loss").at(0);
    EXPECT_NEAR(loss, expLoss, 1e-5 + 1e-4 * std::abs(expLoss));
    for (const auto& p : model.params()) {
      const std::string key = "grad." + p.name;
      ASSERT_TRUE(g.expected.has(key)) << key;
      const auto e = g.expected.f32(key);
      ASSERT_EQ(int64_t(e.size()), p.numel) << key;
      double gmax = 0;
      for (float x : e) gmax = std::max(gmax, double(std::abs(x)));
      ASSERT_GT(gmax, 0) << key;
      const float* mine = model.grad(p);
      for (int64_t i = 0; i < p.numel; ++i)
        ASSERT_NEAR(mine[i], e[i], 1e-7 + 1e-3 * gmax) << key << "[" << i << "]";
    }
  }
}
