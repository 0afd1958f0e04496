// NF4 dequantization (Nf4.h has the rule both backends share).
#include "Common.cuh"
#include "trainscope/kernels/CudaOps.h"
#include "trainscope/kernels/Nf4.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cuda {

namespace {
__global__ void dequantizeNf4K(float* out, const uint8_t* packed, const uint8_t* codes,
                               const float* scales, const float* map2, int64_t n) {
  TS_GRID_LOOP(i, n) out[i] = nf4Dequant(packed, codes, scales, map2, i);
}
__global__ void dequantizeNf4Bf16K(uint16_t* out, const uint8_t* packed, const uint8_t* codes,
                                   const float* scales, const float* map2, int64_t n) {
  TS_GRID_LOOP(i, n) out[i] = ts::kernels::floatToBf16(nf4Dequant(packed, codes, scales, map2, i));
}
}  // namespace

void dequantizeNf4(float* out, const uint8_t* packed, const uint8_t* absmaxCodes,
                   const float* scales, const float* map2, int64_t n) {
  if (n <= 0) return;
  dequantizeNf4K<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, packed, absmaxCodes,
                                                                       scales, map2, n);
  TS_CUDA_LAUNCHED("dequantizeNf4");
}

void dequantizeNf4Bf16(uint16_t* out, const uint8_t* packed, const uint8_t* absmaxCodes,
                       const float* scales, const float* map2, int64_t n) {
  if (n <= 0) return;
  dequantizeNf4Bf16K<<<gridFor(n, kElementwiseBlock), kElementwiseBlock>>>(out, packed, absmaxCodes,
                                                                           scales, map2, n);
  TS_CUDA_LAUNCHED("dequantizeNf4Bf16");
}

}  // namespace ts::kernels::cuda
