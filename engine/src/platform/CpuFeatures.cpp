#include "trainscope/engine/platform/CpuFeatures.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace ts::engine {

namespace {
uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
}  // namespace

CpuFeatures detectCpuFeatures() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = (xcr0 & 0x6) == 0x6;            // OS saves SSE + AVX state
  const bool zmm = ymm && (xcr0 & 0xE0) == 0xE0;   // + opmask, ZMM
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // AMX TILECFG + TILEDATA
  f.fma = ymm && (c & (1u << 12));
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm && (b & (1u << 5));
    f.avx512f = zmm && (b & (1u << 16));
    f.avx512bw = zmm && (b & (1u << 30));
    f.amx_bf16 = tiles && (d & (1u << 22));
    f.amx_tile = tiles && (d & (1u << 24));
    f.amx_int8 = tiles && (d & (1u << 25));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = zmm && (a & (1u << 5));
  return f;
}

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> n;
  if (avx2) n.push_back("avx2");
  if (fma) n.push_back("fma");
  if (avx512f) n.push_back("avx512f");
  if (avx512bw) n.push_back("avx512bw");
  if (avx512_bf16) n.push_back("avx512_bf16");
  if (amx_tile) n.push_back("amx_tile");
  if (amx_bf16) n.push_back("amx_bf16");
  if (amx_int8) n.push_back("amx_int8");
  return n;
}

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown CPU";
}

void ensurePassiveOmpWaitPolicy() {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  if (args.empty()) return;
  setenv("OMP_WAIT_POLICY", "passive", 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  // exec failed: continue with whatever policy libgomp picked.
}

}  // namespace ts::engine
