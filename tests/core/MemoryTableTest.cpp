// Memory table: names, the JSON shape fixed by the protocol, tolerant decoding.
#include <gtest/gtest.h>

#include "trainscope/core/plan/MemoryTable.h"

namespace ts::core {
namespace {

using nlohmann::json;

TEST(MemoryTable, Names) {
  const std::vector<std::pair<MemoryCategory, const char*>> cats = {
      {MemoryCategory::Parameters, "parameters"},
      {MemoryCategory::Gradients, "gradients"},
      {MemoryCategory::OptimizerState, "optimizer_state"},
      {MemoryCategory::Activations, "activations"},
      {MemoryCategory::Workspace, "workspace"}};
  for (const auto& [c, n] : cats) {
    EXPECT_EQ(toString(c), n);
    EXPECT_EQ(memoryCategoryFromString(n), c);
  }
  const std::vector<std::pair<MemoryTier, const char*>> tiers = {
      {MemoryTier::Device, "device"}, {MemoryTier::Host, "host"}, {MemoryTier::Nvme, "nvme"}};
  for (const auto& [t, n] : tiers) {
    EXPECT_EQ(toString(t), n);
    EXPECT_EQ(memoryTierFromString(n), t);
  }
  EXPECT_FALSE(memoryCategoryFromString("weights"));
  EXPECT_FALSE(memoryTierFromString("gpu"));
}

TEST(MemoryTable, JsonShapeIsTheDocumentedOne) {
  MemoryReport r;
  r.ranks.resize(1);
  r.ranks[0].rank = 0;
  r.ranks[0].at(MemoryTier::Device, MemoryCategory::Parameters) = {100, 150};
  r.ranks[0].at(MemoryTier::Nvme, MemoryCategory::OptimizerState) = {7, 9};
  json j = toJson(r);
  // Written by hand from docs/protocol.md.
  json zero = {{"current", 0}, {"peak", 0}};
  json zeros = {{"parameters", zero},
                {"gradients", zero},
                {"optimizer_state", zero},
                {"activations", zero},
                {"workspace", zero}};
  json device = zeros;
  device["parameters"] = {{"current", 100}, {"peak", 150}};
  json nvme = zeros;
  nvme["optimizer_state"] = {{"current", 7}, {"peak", 9}};
  json expected = {
      {"ranks", json::array({{{"rank", 0},
                              {"tiers", {{"device", device}, {"host", zeros}, {"nvme", nvme}}}}})}};
  EXPECT_EQ(j, expected);
}

TEST(MemoryTable, RoundTripManyRanks) {
  MemoryReport r;
  for (int rank = 0; rank < 4; ++rank) {
    RankMemory m;
    m.rank = rank;
    for (int t = 0; t < kMemoryTierCount; ++t)
      for (int c = 0; c < kMemoryCategoryCount; ++c)
        m.tiers[t][c] = {int64_t{1} << (rank + t + c),
                         (int64_t{3} << 40) + rank * 100 + t * 10 + c};
    r.ranks.push_back(m);
  }
  EXPECT_EQ(memoryReportFromJson(json::parse(toJson(r).dump())), r);
}

TEST(MemoryTable, TotalPeak) {
  RankMemory m;
  m.at(MemoryTier::Device, MemoryCategory::Parameters).peak = 10;
  m.at(MemoryTier::Device, MemoryCategory::Workspace).peak = 5;
  m.at(MemoryTier::Host, MemoryCategory::Parameters).peak = 1000;
  EXPECT_EQ(m.totalPeak(MemoryTier::Device), 15);
  EXPECT_EQ(m.totalPeak(MemoryTier::Host), 1000);
  EXPECT_EQ(m.totalPeak(MemoryTier::Nvme), 0);
}

TEST(MemoryTable, TolerantButStrictAboutTypes) {
  // Missing tiers/categories are zero; unknown names are ignored (newer engines).
  auto r = memoryReportFromJson(json::parse(
      R"({"ranks":[{"rank":2,"tiers":{"host":{"gradients":{"peak":8}},"hbm3":{},
          "device":{"kv_cache":{"current":1,"peak":1}}}}]})"));
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].rank, 2);
  EXPECT_EQ(r.ranks[0].at(MemoryTier::Host, MemoryCategory::Gradients).peak, 8);
  EXPECT_EQ(r.ranks[0].at(MemoryTier::Host, MemoryCategory::Gradients).current, 0);
  EXPECT_EQ(r.ranks[0].totalPeak(MemoryTier::Device), 0);
  EXPECT_TRUE(memoryReportFromJson(json::object()).ranks.empty());

  for (const char* bad :
       {R"([])", R"({"ranks":{}})", R"({"ranks":[1]})", R"({"ranks":[{"rank":"0"}]})",
        R"({"ranks":[{"tiers":[]}]})", R"({"ranks":[{"tiers":{"device":5}}]})",
        R"({"ranks":[{"tiers":{"device":{"parameters":3}}}]})",
        R"({"ranks":[{"tiers":{"device":{"parameters":{"peak":"big"}}}}]})",
        R"({"ranks":[{"tiers":{"device":{"parameters":{"peak":1.5}}}}]})"}) {
    EXPECT_THROW(memoryReportFromJson(json::parse(bad)), std::invalid_argument) << bad;
  }
}

}  // namespace
}  // namespace ts::core
