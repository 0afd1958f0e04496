#pragma once
// The 8-bit dynamic quantization maps of bitsandbytes (functional.create_dynamic_map, Dettmers
// et al. 2021): 256 values in [-1, 1] (signed) or [0, 1] (unsigned), sorted ascending, dense near
// zero; an 8-bit optimizer state is a code into one of them times its block's absmax. The
// nearest-entry rule both backends use is here too (C++17: the .cu files include it).
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define TS_DMAP_HD __host__ __device__
#else
#define TS_DMAP_HD
#endif

namespace ts::kernels {

// 256 entries, as create_dynamic_map(signed, max_exponent_bits=7, total_bits=8).
std::vector<float> dynamicMap(bool isSigned);

// The code of the entry nearest to x in a sorted 256-entry map: x compared with the fp32
// midpoints fl(0.5 (map[i] + map[i+1])), a value on a midpoint to the lower index.
TS_DMAP_HD inline uint8_t nearestCode(const float* map, float x) {
  int lo = 0, hi = 255;
  while (hi - lo > 1) {  // map[lo] <= x < map[hi] once narrowed (clamped at the ends)
    const int mid = (lo + hi) / 2;
    if (map[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  if (x <= map[lo]) return static_cast<uint8_t>(lo);
  if (x >= map[hi]) return static_cast<uint8_t>(hi);
  // Against the fp32 midpoint, a value exactly on it to the lower index.
  return static_cast<uint8_t>(x <= 0.5f * (map[lo] + map[hi]) ? lo : hi);
}

}  // namespace ts::kernels
