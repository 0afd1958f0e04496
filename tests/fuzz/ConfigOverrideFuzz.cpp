// `--set key=value` overrides (core::applyOverride, the run and validate commands): each line of
// the input is one assignment, applied in order to a valid config's document, then the result
// is validated. applyOverride reports malformed assignments as issues and never throws.
#include <cstdint>
#include <string>
#include <string_view>

#include "FuzzSupport.h"
#include "trainscope/core/config/Config.h"

using namespace ts::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // A valid starting point with every section present (what a user's file resolves to).
  static const nlohmann::json base = [] {
    RunConfig c;
    c.data.source = "text";
    c.data.path = "corpus.txt";
    return toJson(c);
  }();
  nlohmann::json doc = base;
  int applied = 0;
  while (!in.empty() && applied < 16) {
    const size_t nl = in.find('\n');
    const std::string line(in.substr(0, nl));
    in = nl == std::string_view::npos ? std::string_view() : in.substr(nl + 1);
    for (const auto& issue : applyOverride(doc, line)) (void)issue.toString();
    ++applied;
  }
  const ConfigResult r = parseConfigJson(doc);
  TS_FUZZ_CHECK(r.ok() == r.config.has_value(), "config set exactly when there are no issues");
  if (r.ok()) {
    const ConfigResult again = parseConfigJson(toJson(*r.config));
    TS_FUZZ_CHECK(again.ok(), "the resolved document of a valid config validates");
  }
  return 0;
}
