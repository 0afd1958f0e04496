#include "trainscope/kernels/Nf4.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "trainscope/kernels/DynamicMap.h"

namespace ts::kernels {

void quantizeBlockwiseLut(const float* x, int64_t n, int block, const float* map, uint8_t* codes,
                          float* absmax) {
  // lut[j] = the number of fp32 midpoints below the grid point g[j] = 2j/65535 - 1 (a point on a
  // midpoint to the lower index): the nearest map entry to g[j].
  std::vector<uint8_t> lut(65536);
  float mid[255];
  for (int i = 0; i < 255; ++i) mid[i] = 0.5f * (map[i] + map[i + 1]);
  for (int j = 0; j < 65536; ++j) {
    const float g = static_cast<float>(2 * j) / 65535.0f - 1.0f;
    lut[size_t(j)] = static_cast<uint8_t>(std::lower_bound(mid, mid + 255, g) - mid);
  }
  const int64_t blocks = (n + block - 1) / block;
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    float am = 0.f;
    for (int64_t i = lo; i < hi; ++i) am = std::max(am, std::fabs(x[i]));
    absmax[b] = am;
    if (am == 0.f) {
      std::fill(codes + lo, codes + hi, uint8_t(0));
      continue;
    }
    const float inv = 1.0f / am;
    for (int64_t i = lo; i < hi; ++i) {
      const float r = x[i] * inv;
      const float v = r == r ? std::clamp(r, -1.0f, 1.0f) : 0.f;  // a NaN as 0, not UB
      // The shipped x86-64 binary fuses the last multiply-add.
      const float j = std::fma((v + 1.0f) * 0.5f, 65535.0f, 0.5f);
      codes[i] = lut[size_t(static_cast<int32_t>(j))];
    }
  }
}

void quantizeNf4(const float* x, int64_t n, uint8_t* packed, uint8_t* absmaxCodes, float* scales) {
  const Nf4Layout layout{n};
  const int64_t blocks = layout.blocks();
  float mid[15];
  for (int i = 0; i < 15; ++i) mid[i] = 0.5f * (nf4Value(i) + nf4Value(i + 1));
  std::vector<float> absmax(static_cast<size_t>(blocks));
  std::fill(packed, packed + layout.packedBytes(), uint8_t(0));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * kNf4Block, hi = std::min(n, lo + kNf4Block);
    float am = 0.f;
    for (int64_t i = lo; i < hi; ++i) am = std::max(am, std::fabs(x[i]));
    absmax[size_t(b)] = am;
    // A full block multiplies by the fp32 reciprocal, the short last one divides (torch's two
    // code paths in bitsandbytes' fallback); an all-zero block is all code 7 (0.0).
    const bool shortBlock = hi - lo < kNf4Block;
    const float inv = am > 0.f ? 1.0f / am : 0.f;
    for (int64_t i = lo; i < hi; ++i) {
      int q = 7;
      if (am > 0.f) {
        const float s = std::clamp(shortBlock ? x[i] / am : x[i] * inv, -1.0f, 1.0f);
        q = static_cast<int>(std::lower_bound(mid, mid + 15, s) - mid);  // midpoints < s
      }
      packed[i >> 1] |= static_cast<uint8_t>((i & 1) ? q : q << 4);
    }
  }
  if (n & 1) packed[n >> 1] |= 7;  // the padding nibble: code of 0.0
  // Double quantization: the mean of the absmaxes off, the rest into the signed dynamic map.
  double sum = 0;
  for (float a : absmax) sum += a;
  const float offset = static_cast<float>(sum / static_cast<double>(std::max<int64_t>(1, blocks)));
  scales[0] = offset;
  for (float& a : absmax) a -= offset;
  const std::vector<float> map = dynamicMap(true);
  quantizeBlockwiseLut(absmax.data(), blocks, kNf4Block2, map.data(), absmaxCodes, scales + 1);
}

}  // namespace ts::kernels
