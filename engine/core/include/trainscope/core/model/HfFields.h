#pragma once
// config.json fields, each read with a message naming the file and field (HfConfigError): what
// a model family's config reader uses.
#include <string>

#include <nlohmann/json.hpp>

namespace ts::core {

class HfFields {
 public:
  HfFields(const nlohmann::json& j, std::string file) : j(j), file(std::move(file)) {}
  const nlohmann::json& j;
  std::string file;
  // Every integer field is a size (layers, heads, widths, positions, vocabulary): positive and
  // within int, never truncated.
  int integer(const char* key) const;
  int integerOr(const char* key, int fallback) const;
  double number(const char* key, double fallback) const;
  std::string string(const char* key, const std::string& fallback) const;
  bool flag(const char* key, bool fallback) const;
  [[noreturn]] void refuse(const std::string& key, const std::string& why) const;
};

// The engine's LayerNorm / RMSNorm epsilon.
constexpr double kEngineNormEps = 1e-5;

}  // namespace ts::core
