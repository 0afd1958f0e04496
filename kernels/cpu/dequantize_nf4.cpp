// NF4 dequantization (Nf4.h has the rule both backends share), one block of 64 at a time.
#include <algorithm>

#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/Nf4.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cpu {

namespace {
template <class Store>
void dequantizeBlocks(const uint8_t* packed, const uint8_t* codes, const float* scales,
                      const float* map2, int64_t n, Store store) {
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    const float absmax = nf4BlockAbsmax(codes, scales, map2, b);
    const int64_t hi = std::min(n, (b + 1) * kNf4Block);
    for (int64_t i = b * kNf4Block; i < hi; ++i) store(i, nf4Code(packed, i) * absmax);
  }
}
}  // namespace

void dequantizeNf4(float* out, const uint8_t* packed, const uint8_t* absmaxCodes,
                   const float* scales, const float* map2, int64_t n) {
  dequantizeBlocks(packed, absmaxCodes, scales, map2, n, [out](int64_t i, float v) { out[i] = v; });
}

void dequantizeNf4Bf16(uint16_t* out, const uint8_t* packed, const uint8_t* absmaxCodes,
                       const float* scales, const float* map2, int64_t n) {
  dequantizeBlocks(packed, absmaxCodes, scales, map2, n,
                   [out](int64_t i, float v) { out[i] = ts::kernels::floatToBf16(v); });
}

}  // namespace ts::kernels::cpu
