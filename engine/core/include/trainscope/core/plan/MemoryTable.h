#pragma once
// Memory categories and tiers: the one table the tracker measures, the estimator predicts
// and the protocol carries (`memory` / `memory_plan` events).
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::core {

enum class MemoryCategory { Parameters, Gradients, OptimizerState, Activations, Workspace };
enum class MemoryTier { Device, Host, Nvme };
inline constexpr int kMemoryCategoryCount = 5;
inline constexpr int kMemoryTierCount = 3;

std::string_view toString(MemoryCategory c);  // "parameters", "optimizer_state", ...
std::string_view toString(MemoryTier t);      // "device", "host", "nvme"
std::optional<MemoryCategory> memoryCategoryFromString(std::string_view s);
std::optional<MemoryTier> memoryTierFromString(std::string_view s);

struct MemoryEntry {
  int64_t current = 0;
  int64_t peak = 0;
  bool operator==(const MemoryEntry&) const = default;
};

struct RankMemory {
  int rank = 0;
  // [tier][category]
  std::array<std::array<MemoryEntry, kMemoryCategoryCount>, kMemoryTierCount> tiers{};
  MemoryEntry& at(MemoryTier t, MemoryCategory c) {
    return tiers[static_cast<int>(t)][static_cast<int>(c)];
  }
  const MemoryEntry& at(MemoryTier t, MemoryCategory c) const {
    return tiers[static_cast<int>(t)][static_cast<int>(c)];
  }
  int64_t totalPeak(MemoryTier t) const;
  bool operator==(const RankMemory&) const = default;
};

struct MemoryReport {
  std::vector<RankMemory> ranks;
  bool operator==(const MemoryReport&) const = default;
};

// {"ranks":[{"rank":0,"tiers":{"device":{"parameters":{"current":..,"peak":..},...}}}]}
nlohmann::json toJson(const MemoryReport& report);
// Tolerant: missing tiers/categories are zero; wrong types throw std::invalid_argument.
MemoryReport memoryReportFromJson(const nlohmann::json& j);

}  // namespace ts::core
