// DeepSpeed config import (core::importDeepSpeedConfig, the wizard's "import DeepSpeed config"):
// the input as JSON, imported over two bases (defaults; 4 ranks, 8 layers). The import is
// documented never to throw: wrong types and values are issues. An import without issues that
// gives a valid run config must give one whose DeepSpeed export imports again without issues.
#include <cstdint>
#include <string>

#include "FuzzSupport.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/config/ConfigExport.h"

using namespace ts::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const nlohmann::json ds = nlohmann::json::parse(data, data + size, nullptr, false);
  if (ds.is_discarded()) return 0;
  RunConfig wide;
  wide.parallel.ranks = 4;
  wide.model.layers = 8;
  for (const RunConfig& base : {RunConfig{}, wide}) {
    const DeepSpeedImport r = importDeepSpeedConfig(ds, base);
    for (const auto& i : r.issues) (void)i.toString();
    const ConfigResult valid = parseConfigJson(toJson(r.config));
    if (!r.ok() || !valid.ok()) continue;
    const nlohmann::json exported = toDeepSpeedConfig(r.config);
    const DeepSpeedImport again = importDeepSpeedConfig(exported, base);
    TS_FUZZ_CHECK(again.ok(), "the export of an imported config imports again: " +
                                  exported.dump() + ": " + again.issues[0].toString());
  }
  return 0;
}
