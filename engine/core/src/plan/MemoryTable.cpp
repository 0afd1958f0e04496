#include "trainscope/core/plan/MemoryTable.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace ts::core {
namespace {

constexpr std::string_view kCategoryNames[kMemoryCategoryCount] = {
    "parameters", "gradients", "optimizer_state", "activations", "workspace"};
constexpr std::string_view kTierNames[kMemoryTierCount] = {"device", "host", "nvme"};

int64_t bytesFrom(const nlohmann::json& j, const std::string& where) {
  if (j.is_number_unsigned()) {
    auto u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) throw std::invalid_argument(where + ": too large");
    return static_cast<int64_t>(u);
  }
  if (j.is_number_integer()) return j.get<int64_t>();
  if (j.is_number_float()) {
    double d = j.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
  }
  throw std::invalid_argument(where + ": expected a byte count (integer), got " + j.dump());
}

}  // namespace

std::string_view toString(MemoryCategory c) {
  auto i = static_cast<int>(c);
  return i >= 0 && i < kMemoryCategoryCount ? kCategoryNames[i] : std::string_view("unknown");
}

std::string_view toString(MemoryTier t) {
  auto i = static_cast<int>(t);
  return i >= 0 && i < kMemoryTierCount ? kTierNames[i] : std::string_view("unknown");
}

std::optional<MemoryCategory> memoryCategoryFromString(std::string_view s) {
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    if (kCategoryNames[i] == s) return static_cast<MemoryCategory>(i);
  }
  return std::nullopt;
}

std::optional<MemoryTier> memoryTierFromString(std::string_view s) {
  for (int i = 0; i < kMemoryTierCount; ++i) {
    if (kTierNames[i] == s) return static_cast<MemoryTier>(i);
  }
  return std::nullopt;
}

int64_t RankMemory::totalPeak(MemoryTier t) const {
  int64_t sum = 0;
  for (const auto& e : tiers[static_cast<int>(t)]) sum += e.peak;
  return sum;
}

nlohmann::json toJson(const MemoryReport& report) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : report.ranks) {
    nlohmann::json tiers = nlohmann::json::object();
    for (int t = 0; t < kMemoryTierCount; ++t) {
      nlohmann::json cats = nlohmann::json::object();
      for (int c = 0; c < kMemoryCategoryCount; ++c) {
        const auto& e = r.tiers[t][c];
        cats[std::string(kCategoryNames[c])] = {{"current", e.current}, {"peak", e.peak}};
      }
      tiers[std::string(kTierNames[t])] = std::move(cats);
    }
    ranks.push_back({{"rank", r.rank}, {"tiers", std::move(tiers)}});
  }
  return {{"ranks", std::move(ranks)}};
}

MemoryReport memoryReportFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("memory report: expected an object");
  MemoryReport report;
  auto it = j.find("ranks");
  if (it == j.end()) return report;
  if (!it->is_array()) throw std::invalid_argument("memory report: \"ranks\" must be an array");
  for (size_t i = 0; i < it->size(); ++i) {
    const auto& rj = (*it)[i];
    std::string where = "ranks[" + std::to_string(i) + "]";
    if (!rj.is_object()) throw std::invalid_argument(where + ": expected an object");
    RankMemory rank;
    if (auto r = rj.find("rank"); r != rj.end()) {
      int64_t v = bytesFrom(*r, where + ".rank");
      if (v < 0 || v > INT32_MAX) throw std::invalid_argument(where + ".rank: out of range");
      rank.rank = static_cast<int>(v);
    } else {
      rank.rank = static_cast<int>(i);
    }
    if (auto tj = rj.find("tiers"); tj != rj.end()) {
      if (!tj->is_object()) throw std::invalid_argument(where + ".tiers: expected an object");
      for (auto t = tj->begin(); t != tj->end(); ++t) {
        auto tier = memoryTierFromString(t.key());
        if (!tier) continue;  // a newer engine's tier: ignored, not an error
        std::string tw = where + ".tiers." + t.key();
        if (!t->is_object()) throw std::invalid_argument(tw + ": expected an object");
        for (auto c = t->begin(); c != t->end(); ++c) {
          auto cat = memoryCategoryFromString(c.key());
          if (!cat) continue;
          std::string cw = tw + "." + c.key();
          if (!c->is_object()) throw std::invalid_argument(cw + ": expected {current, peak}");
          auto& e = rank.at(*tier, *cat);
          if (auto v = c->find("current"); v != c->end())
            e.current = bytesFrom(*v, cw + ".current");
          if (auto v = c->find("peak"); v != c->end()) e.peak = bytesFrom(*v, cw + ".peak");
        }
      }
    }
    report.ranks.push_back(rank);
  }
  return report;
}

}  // namespace ts::core
