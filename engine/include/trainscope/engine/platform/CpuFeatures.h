#pragma once
// The CPU this process runs on: its vector and matrix features (from cpuid, checked against
// what the OS saves at run time), its model name, and the OpenMP wait policy the engine needs
// when it shares the cores.
#include <string>
#include <vector>

namespace ts::engine {

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  std::vector<std::string> names() const;  // the ones present: "avx2", "avx512f", "amx_bf16"...
};
CpuFeatures detectCpuFeatures();
std::string cpuModelName();

// libgomp reads OMP_WAIT_POLICY once, when it loads; setting it later has no effect. When it is
// unset, this sets it to "passive" (spinning OpenMP threads collapse when another process shares
// the cores, ../shared/reference.md) and re-executes the current program with the same
// arguments. Returns only when nothing had to be done or the exec failed.
void ensurePassiveOmpWaitPolicy();

}  // namespace ts::engine
