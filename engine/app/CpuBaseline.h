#pragma once
// The engine's libraries are compiled for x86-64-v3. On an older CPU the first AVX2 instruction
// would kill the process with SIGILL before it could say anything, so the executable checks
// first (CpuBaseline.cpp, compiled for the plain x86-64 baseline) and names what is missing.
#include <cstdint>
#include <string>
#include <vector>

namespace ts::app {

// The CPUID words the x86-64-v3 features live in, and whether the OS saves the AVX state.
struct CpuIdWords {
  uint32_t leaf1Ecx = 0;    // FMA (12), MOVBE (22), OSXSAVE (27), AVX (28), F16C (29)
  uint32_t leaf7Ebx = 0;    // BMI1 (3), AVX2 (5), BMI2 (8)
  uint32_t ext1Ecx = 0;     // 0x80000001: LZCNT (5)
  bool osSavesAvx = false;  // XGETBV(0) has the XMM and YMM bits
};

CpuIdWords readCpuId();
// The x86-64-v3 features the words lack, by name ("AVX2", "FMA", ...), in a fixed order.
std::vector<std::string> missingX86_64V3(const CpuIdWords& w);
// What the engine prints before exiting when features are missing.
std::string cpuBaselineMessage(const std::vector<std::string>& missing);
// Checks this CPU; on a lack, prints the message to stderr and exits with kExitRunFailed. The
// test hook TRAINSCOPE_TEST_CPU_MISSING=AVX2,FMA pretends those features are absent.
void requireCpuBaseline();

}  // namespace ts::app
