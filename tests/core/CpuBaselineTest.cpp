// The engine's start-up check for the x86-64-v3 baseline its libraries are built for: CPUID
// words of real CPU generations give the features they lack, and the real binary, told to
// pretend a lack, says so by name and exits instead of dying with SIGILL.
#include "CpuBaseline.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

using ts::app::CpuIdWords;
using ts::app::missingX86_64V3;

namespace {
using Names = std::vector<std::string>;
constexpr uint32_t bit(int i) {
  return 1u << i;
}

// Haswell (the first x86-64-v3 Intel core).
CpuIdWords haswell() {
  CpuIdWords w;
  w.leaf1Ecx = bit(12) | bit(22) | bit(27) | bit(28) | bit(29);
  w.leaf7Ebx = bit(3) | bit(5) | bit(8);
  w.ext1Ecx = bit(5);
  w.osSavesAvx = true;
  return w;
}
}  // namespace

TEST(CpuBaseline, HaswellHasEverything) {
  EXPECT_TRUE(missingX86_64V3(haswell()).empty());
}

TEST(CpuBaseline, SandyBridgeLacksWhatCameWithHaswellAndIvyBridge) {
  CpuIdWords w;  // AVX and XSAVE, none of the rest
  w.leaf1Ecx = bit(27) | bit(28);
  w.osSavesAvx = true;
  EXPECT_EQ(missingX86_64V3(w), (Names{"AVX2", "FMA", "F16C", "BMI1", "BMI2", "LZCNT", "MOVBE"}));
}

TEST(CpuBaseline, AvxTheOsDoesNotSaveIsNoAvx) {
  CpuIdWords w = haswell();
  w.osSavesAvx = false;  // e.g. a hypervisor that hides XSAVE's YMM state
  EXPECT_EQ(missingX86_64V3(w), (Names{"AVX", "AVX2", "FMA"}));
}

TEST(CpuBaseline, ThisMachineHasTheBaseline) {
  // Every machine this suite runs on runs the v3 engine; a lack here is a misread CPUID.
  EXPECT_TRUE(missingX86_64V3(ts::app::readCpuId()).empty());
}

TEST(CpuBaseline, TheEngineNamesWhatIsMissingInsteadOfDyingOnSigill) {
  const std::string cmd = std::string("TRAINSCOPE_TEST_CPU_MISSING=AVX2,FMA '") +
                          TRAINSCOPE_ENGINE_EXE + "' --version 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 1024> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: " << out;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_NE(out.find("this CPU lacks AVX2 and FMA"), std::string::npos) << out;
  EXPECT_NE(out.find("x86-64-v3"), std::string::npos) << out;
  EXPECT_EQ(out.find("trainscope-engine " TRAINSCOPE_VERSION), std::string::npos)
      << "the check must come before anything runs: " << out;
}
