// Golden test against PyTorch (tools/ script by the data helper, outputs under
// tests/data/golden/): same weights, same batch -> logits, loss and every parameter gradient.
// Tolerances (fp32 both sides, different summation orders): logits and loss 1e-4 relative
// (+1e-5 absolute), gradients 1e-3 of the tensor's max |g| per element.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;
namespace fs = std::filesystem;

TEST(Golden, MatchesPyTorch) {
  const fs::path dir = fs::path(TRAINSCOPE_TEST_DATA) / "golden";
  const fs::path wPath = dir / "tiny_gpt.safetensors",
                 ePath = dir / "tiny_gpt_expected.safetensors", jPath = dir / "tiny_gpt.json";
  if (!fs::exists(wPath) || !fs::exists(ePath) || !fs::exists(jPath))
    GTEST_SKIP() << "golden files not present under " << dir;
  nlohmann::json shape;
  {
    std::ifstream in(jPath);
    shape = nlohmann::json::parse(in, nullptr, false);
  }
  ASSERT_FALSE(shape.is_discarded()) << jPath << " is not valid JSON";
  // Accept the shape either at the top level or under "model".
  const nlohmann::json& m = shape.contains("model") ? shape["model"] : shape;
  auto pick = [&](std::initializer_list<const char*> keys) {
    for (auto k : keys)
      if (m.contains(k)) return m[k].get<int>();
    ADD_FAILURE() << "tiny_gpt.json lacks " << *keys.begin();
    return 0;
  };
  GptConfig cfg;
  cfg.layers = pick({"layers", "n_layer"});
  cfg.heads = pick({"heads", "n_head"});
  cfg.d_model = pick({"d_model", "n_embd"});
  cfg.seq_len = pick({"seq_len", "block_size", "n_positions"});
  cfg.vocab = pick({"vocab", "vocab_size"});
  if (m.contains("activation")) cfg.relu = m["activation"] == "relu";

  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  Gpt model(cfg, backend.get(), &tracker);
  auto weights = SafetensorsFile::load(wPath.string());
  for (const auto& p : model.params()) {
    ASSERT_TRUE(weights.has(p.name)) << p.name;
    EXPECT_EQ(weights.entry(p.name).shape, p.shape) << p.name;
    weights.readF32(p.name, model.param(p), p.numel);
  }
  auto expected = SafetensorsFile::load(ePath.string());
  const auto inputs = expected.i32("inputs");
  const auto& ishape = expected.entry("inputs").shape;
  ASSERT_EQ(ishape.size(), 2u);
  const int B = static_cast<int>(ishape[0]), T = static_cast<int>(ishape[1]);
  const auto targets = expected.i32("targets");
  model.allocate(B);
  int64_t count = 0;
  for (int32_t t : targets) count += t >= 0;

  // Logits first (a forward without targets keeps them), then the loss + gradients.
  model.forward(inputs.data(), nullptr, B, T, 0.f);
  const auto logits = expected.f32("logits");
  ASSERT_EQ(logits.size(), size_t(B) * T * cfg.vocab);
  std::vector<float> row(cfg.vocab);
  double maxErr = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      model.logitsRow(b, t, row.data());
      for (int v = 0; v < cfg.vocab; ++v) {
        const float e = logits[(size_t(b) * T + t) * cfg.vocab + v];
        maxErr = std::max(maxErr, double(std::abs(row[v] - e)));
        ASSERT_NEAR(row[v], e, 1e-5 + 1e-4 * std::abs(e)) << "logit " << b << "," << t << "," << v;
      }
    }
  model.zeroGrad();
  int64_t n = 0;
  const double loss = model.forward(inputs.data(), targets.data(), B, T, 1.f / count, &n) / n;
  model.backward();
  const double expLoss = expected.f32("loss").at(0);
  EXPECT_NEAR(loss, expLoss, 1e-5 + 1e-4 * std::abs(expLoss));
  int checked = 0;
  for (const auto& p : model.params()) {
    const std::string key = "grad." + p.name;
    ASSERT_TRUE(expected.has(key)) << key;
    const auto g = expected.f32(key);
    ASSERT_EQ(int64_t(g.size()), p.numel) << key;
    double gmax = 0;
    for (float x : g) gmax = std::max(gmax, double(std::abs(x)));
    const float* mine = model.grad(p);
    for (int64_t i = 0; i < p.numel; ++i)
      ASSERT_NEAR(mine[i], g[i], 1e-7 + 1e-3 * gmax) << key << "[" << i << "]";
    ++checked;
  }
  EXPECT_EQ(checked, int(model.params().size()));
}
