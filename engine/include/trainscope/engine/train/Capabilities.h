#pragma once
// What this engine build can do on this machine: backends (compiled / usable, and why not),
// devices, CPU features (from cpuid, checked at run time; CpuFeatures.h), precisions and
// techniques. The body of `capabilities --json` and of the `hello` event's "capabilities".
#include <nlohmann/json.hpp>

#include "trainscope/engine/platform/CpuFeatures.h"

namespace ts::engine {

nlohmann::json capabilitiesJson();

}  // namespace ts::engine
