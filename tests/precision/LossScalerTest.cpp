// LossScaler against an independent simulation of PyTorch GradScaler's update rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "trainscope/engine/optim/LossScaler.h"

namespace {

using ts::core::LossScaleConfig;
using ts::engine::LossScaler;

// GradScaler.update, written from its documentation: on inf/NaN multiply by backoff and
// restart counting; otherwise count, and at growth_interval consecutive clean steps multiply
// by growth (kept only if finite) and restart counting. Scale in fp32, as torch keeps it.
struct RefScaler {
  float scale;
  double growth, backoff;
  long interval, clean = 0, skipped = 0;
  bool step(bool inf) {
    if (inf) {
      scale = float(double(scale) * backoff);
      clean = 0;
      ++skipped;
      return false;
    }
    if (++clean == interval) {
      const float grown = float(double(scale) * growth);
      if (!std::isinf(grown)) scale = grown;
      clean = 0;
    }
    return true;
  }
};

LossScaleConfig cfg(double init, double growth, double backoff, int64_t interval) {
  LossScaleConfig c;
  c.init = init;
  c.growth_factor = growth;
  c.backoff_factor = backoff;
  c.growth_interval = interval;
  return c;
}

void expectSameSequence(const LossScaleConfig& c, const std::vector<bool>& infs) {
  LossScaler s(c);
  RefScaler ref{float(c.init), c.growth_factor, c.backoff_factor, c.growth_interval};
  ASSERT_EQ(s.scale(), ref.scale);
  for (size_t i = 0; i < infs.size(); ++i) {
    const bool applied = s.update(infs[i]);
    const bool refApplied = ref.step(infs[i]);
    ASSERT_EQ(applied, refApplied) << "step " << i;
    ASSERT_EQ(s.scale(), ref.scale) << "step " << i;
    ASSERT_EQ(s.skippedSteps(), ref.skipped) << "step " << i;
    ASSERT_EQ(s.growthTracker(), ref.clean) << "step " << i;
  }
}

TEST(LossScaler, DefaultsAreGradScalers) {
  LossScaler s;
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.scale(), 65536.0f);
  // 1999 clean steps: unchanged; the 2000th doubles.
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 131072.0f);
  // An overflow halves it, is skipped and restarts the count.
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.skippedSteps(), 1);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0f);
}

TEST(LossScaler, ScriptedPatternMatchesReferenceSimulation) {
  // Huge start: a burst of overflows backs off, then clean runs of various lengths.
  std::vector<bool> infs(12, true);
  for (int run : {1, 2, 3, 4, 5, 9, 0, 0, 3, 7, 2, 16}) {
    infs.insert(infs.end(), size_t(run), false);
    infs.push_back(true);
  }
  infs.insert(infs.end(), 40, false);
  expectSameSequence(cfg(std::ldexp(1.0, 24), 2.0, 0.5, 3), infs);
  expectSameSequence(cfg(1000.0, 3.0, 0.25, 4), infs);
  // Defaults over 7000 steps with rare random overflows.
  std::mt19937 rng(5);
  std::vector<bool> rare(7000);
  for (size_t i = 0; i < rare.size(); ++i) rare[i] = rng() % 1500 == 0;
  expectSameSequence(LossScaleConfig{}, rare);
}

TEST(LossScaler, GrowthStopsBeforeInfinity) {
  expectSameSequence(cfg(std::ldexp(1.0, 126), 2.0, 0.5, 1), std::vector<bool>(5, false));
  LossScaler s(cfg(std::ldexp(1.0, 126), 2.0, 0.5, 1));
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), std::ldexp(1.0f, 127));
}

TEST(LossScaler, StaticModeNeverChanges) {
  LossScaleConfig c;
  c.mode = "static";
  c.static_scale = 128.0;
  LossScaler s(c);
  EXPECT_FALSE(s.dynamic());
  int skipped = 0;
  for (int i = 0; i < 5000; ++i) {
    const bool inf = i % 7 == 0;
    skipped += inf;
    EXPECT_EQ(s.update(inf), !inf);
    ASSERT_EQ(s.scale(), 128.0f);
  }
  EXPECT_EQ(s.skippedSteps(), skipped);
}

TEST(LossScaler, StateRoundTripsAndContinuesIdentically) {
  const LossScaleConfig c = cfg(4096.0, 2.0, 0.5, 5);
  LossScaler a(c);
  for (int i = 0; i < 13; ++i) a.update(i % 6 == 0);
  const nlohmann::json st = nlohmann::json::parse(a.state().dump());  // through text
  LossScaler b(c);
  b.loadState(st);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.skippedSteps(), a.skippedSteps());
  EXPECT_EQ(b.growthTracker(), a.growthTracker());
  for (int i = 0; i < 30; ++i) {
    const bool inf = i % 11 == 4;
    ASSERT_EQ(a.update(inf), b.update(inf));
    ASSERT_EQ(a.scale(), b.scale());
  }
}

TEST(LossScaler, RejectsBadConfigAndStateWithNamedField) {
  auto msg = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  LossScaleConfig c;
  c.mode = "auto";
  EXPECT_NE(msg([&] { LossScaler s(c); }).find("precision.loss_scale.mode"), std::string::npos);
  c = cfg(65536, 1.0, 0.5, 10);
  EXPECT_NE(msg([&] { LossScaler s(c); }).find("growth_factor"), std::string::npos);
  c = cfg(65536, 2.0, 1.5, 10);
  EXPECT_NE(msg([&] { LossScaler s(c); }).find("backoff_factor"), std::string::npos);
  c = cfg(65536, 2.0, 0.5, 0);
  EXPECT_NE(msg([&] { LossScaler s(c); }).find("growth_interval"), std::string::npos);
  LossScaler s;
  EXPECT_NE(msg([&] { s.loadState({{"scale", 2.0}}); }).find("growth_tracker"), std::string::npos);
  EXPECT_NE(msg([&] {
              s.loadState({{"scale", -1.0}, {"growth_tracker", 0}, {"skipped_steps", 0}});
            }).find("scale"),
            std::string::npos);
  EXPECT_NE(msg([&] { s.loadState(nlohmann::json::array()); }).find("scale"), std::string::npos);
  EXPECT_EQ(s.scale(), 65536.0f);  // failed loads leave the state alone
}

TEST(HasInfOrNan, FindsEveryPositionAndIgnoresFiniteExtremes) {
  for (int64_t n : {1, 9, 100, 70000}) {
    std::vector<float> g(static_cast<size_t>(n));
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> nd;
    for (auto& v : g) v = nd(rng);
    g[0] = std::numeric_limits<float>::max();
    g[size_t(n) - 1] = -std::numeric_limits<float>::denorm_min();
    EXPECT_FALSE(ts::engine::hasInfOrNan(g.data(), n));
    for (float bad :
         {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN()}) {
      for (size_t pos : {size_t(0), size_t(n) / 3, size_t(n) - 1}) {
        const float keep = g[pos];
        g[pos] = bad;
        EXPECT_TRUE(ts::engine::hasInfOrNan(g.data(), n)) << n << " at " << pos;
        g[pos] = keep;
      }
    }
  }
  EXPECT_FALSE(ts::engine::hasInfOrNan(nullptr, 0));
}

}  // namespace
