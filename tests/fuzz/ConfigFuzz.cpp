// Run config JSON (docs/config.md): parse + validate (core::parseConfigText) under two machine
// contexts. parseConfigText reports every problem as an issue and never throws, so nothing is
// caught here. A config that validates must survive the round trip through its resolved
// document (toJson) and the exporters the planner offers (DeepSpeed, Hugging Face).
#include <cstdint>
#include <string>

#include "FuzzSupport.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/config/ConfigExport.h"

using namespace ts::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  ValidationContext gpu;
  gpu.cuda_available = true;
  gpu.check_backend = true;
  for (const ValidationContext& ctx : {ValidationContext{}, gpu}) {
    const ConfigResult r = parseConfigText(text, ctx);
    TS_FUZZ_CHECK(r.ok() == r.config.has_value(), "config set exactly when there are no issues");
    for (const auto& i : r.issues) (void)i.toString();
    if (!r.ok()) continue;
    const nlohmann::json resolved = toJson(*r.config);
    const ConfigResult again = parseConfigJson(resolved, ctx);
    TS_FUZZ_CHECK(again.ok(), "the resolved document of a valid config validates: " +
                                  (again.issues.empty() ? "" : again.issues[0].toString()));
    TS_FUZZ_CHECK(toJson(*again.config) == resolved, "the resolved document round-trips");
    (void)toDeepSpeedConfig(*r.config).dump();
    (void)toJson(toHuggingFace(*r.config)).dump();
  }
  return 0;
}
