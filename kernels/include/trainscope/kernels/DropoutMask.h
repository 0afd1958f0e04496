#pragma once
// The dropout mask both backends compute: element i of stream (seed, key) is kept when the top
// 24 bits of a splitmix64 hash of (seed, key, i) are at or above p * 2^24. Integer-only, so the
// CPU and CUDA masks are identical bit for bit. C++17 (the .cu files include it).
#include <cstdint>

#ifdef __CUDACC__
#define TS_DROPOUT_HD __host__ __device__
#else
#define TS_DROPOUT_HD
#endif

namespace ts::kernels {

TS_DROPOUT_HD inline uint64_t dropoutMix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// p in [0, 1) as a 24-bit threshold.
TS_DROPOUT_HD inline uint32_t dropoutThreshold(float p) {
  return static_cast<uint32_t>(static_cast<double>(p) * 16777216.0);
}
TS_DROPOUT_HD inline bool dropoutKeep(uint64_t seed, uint64_t key, int64_t i, uint32_t threshold) {
  const uint64_t stream = dropoutMix(seed ^ dropoutMix(key + 0x9E3779B97F4A7C15ull));
  const uint64_t h = dropoutMix(stream + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull);
  return static_cast<uint32_t>(h >> 40) >= threshold;
}

}  // namespace ts::kernels
