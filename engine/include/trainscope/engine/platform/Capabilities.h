#pragma once
// What this engine build can do on this machine: backends (compiled / usable, and why not),
// devices, CPU features (from cpuid, checked at run time), precisions and techniques. The body
// of `capabilities --json` and of the `hello` event's "capabilities".
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::engine {

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  std::vector<std::string> names() const;  // the ones present: "avx2", "avx512f", "amx_bf16"...
};
CpuFeatures detectCpuFeatures();
std::string cpuModelName();

nlohmann::json capabilitiesJson();

// libgomp reads OMP_WAIT_POLICY once, when it loads; setting it later has no effect. When it is
// unset, this sets it to "passive" (spinning OpenMP threads collapse when another process shares
// the cores, ../shared/reference.md) and re-executes the current program with the same
// arguments. Returns only when nothing had to be done or the exec failed.
void ensurePassiveOmpWaitPolicy();

}  // namespace ts::engine
