#include "CpuBaseline.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "Commands.h"

namespace ts::app {

CpuIdWords readCpuId() {
  CpuIdWords w;
  unsigned a = 0, b = 0, c = 0, d = 0;
  const unsigned maxLeaf = __get_cpuid_max(0, nullptr);
  if (maxLeaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) w.leaf1Ecx = c;
  if (maxLeaf >= 7 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) w.leaf7Ebx = b;
  if (__get_cpuid_max(0x80000000u, nullptr) >= 0x80000001u &&
      __get_cpuid(0x80000001u, &a, &b, &c, &d))
    w.ext1Ecx = c;
  // XGETBV is only valid where the OS enabled it (OSXSAVE); it says whether AVX state survives
  // a context switch, without which AVX instructions fault even on a CPU that has them.
  if (w.leaf1Ecx & (1u << 27)) {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    w.osSavesAvx = (lo & 0x6u) == 0x6u;
  }
  return w;
}

std::vector<std::string> missingX86_64V3(const CpuIdWords& w) {
  struct Feature {
    const char* name;
    bool present;
  };
  const Feature features[] = {
      {"AVX", (w.leaf1Ecx & (1u << 28)) != 0 && w.osSavesAvx},
      {"AVX2", (w.leaf7Ebx & (1u << 5)) != 0 && w.osSavesAvx},
      {"FMA", (w.leaf1Ecx & (1u << 12)) != 0 && w.osSavesAvx},
      {"F16C", (w.leaf1Ecx & (1u << 29)) != 0},
      {"BMI1", (w.leaf7Ebx & (1u << 3)) != 0},
      {"BMI2", (w.leaf7Ebx & (1u << 8)) != 0},
      {"LZCNT", (w.ext1Ecx & (1u << 5)) != 0},
      {"MOVBE", (w.leaf1Ecx & (1u << 22)) != 0},
  };
  std::vector<std::string> out;
  for (const auto& f : features)
    if (!f.present) out.emplace_back(f.name);
  return out;
}

std::string cpuBaselineMessage(const std::vector<std::string>& missing) {
  std::ostringstream s;
  s << "trainscope-engine: this CPU lacks ";
  for (size_t i = 0; i < missing.size(); ++i)
    s << (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") << missing[i];
  s << ", which this build needs (x86-64-v3: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE; Intel "
       "Haswell, AMD Excavator or newer). Run it on such a CPU, or under a hypervisor that "
       "passes these features through to the guest.\n";
  return s.str();
}

void requireCpuBaseline() {
  std::vector<std::string> missing = missingX86_64V3(readCpuId());
  if (const char* pretend = std::getenv("TRAINSCOPE_TEST_CPU_MISSING")) {
    std::stringstream list(pretend);
    for (std::string f; std::getline(list, f, ',');)
      if (!f.empty()) missing.push_back(f);
  }
  if (missing.empty()) return;
  const std::string msg = cpuBaselineMessage(missing);
  // Before any static initializer of the v3 libraries: stdio is usable, nothing else is assumed.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, msg.data(), msg.size());
  std::_Exit(kExitRunFailed);
}

}  // namespace ts::app
