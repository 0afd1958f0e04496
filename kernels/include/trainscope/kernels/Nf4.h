#pragma once
// NF4 (QLoRA, Dettmers et al. 2023) as bitsandbytes stores it (quantize_4bit with
// quant_type="nf4", blocksize 64, compress_statistics=True): 4-bit codes into the 16 NF4 values,
// two per byte with the first element in the HIGH nibble, one absmax per block of 64; the
// absmaxes themselves double-quantized: minus their mean (offset), as uint8 codes into the signed
// 8-bit dynamic map (DynamicMap.h) in blocks of 256, one fp32 absmax per 256 block.
// tests/data/nf4/README.md has the exact rules, read from bitsandbytes and checked byte for byte.
// C++17: the .cu files include it.
#include <cstdint>

#ifdef __CUDACC__
#define TS_NF4_HD __host__ __device__ __forceinline__
#else
#define TS_NF4_HD inline
#endif

namespace ts::kernels {

inline constexpr int kNf4Block = 64;    // elements per 4-bit absmax
inline constexpr int kNf4Block2 = 256;  // absmaxes per second-level (fp32) absmax

// functional.get_4bit_type("nf4"), index = 4-bit code.
TS_NF4_HD float nf4Value(int code) {
  constexpr float v[16] = {-1.0f,
                           -0.6961928009986877f,
                           -0.5250730514526367f,
                           -0.39491748809814453f,
                           -0.28444138169288635f,
                           -0.18477343022823334f,
                           -0.09105003625154495f,
                           0.0f,
                           0.07958029955625534f,
                           0.16093020141124725f,
                           0.24611230194568634f,
                           0.33791524171829224f,
                           0.44070982933044434f,
                           0.5626170039176941f,
                           0.7229568362236023f,
                           1.0f};
  return v[code & 15];
}

// Storage of one quantized tensor of n elements: packed ceil(n/2) bytes, ceil(n/64) absmax codes,
// and 1 + ceil(blocks/256) fp32 scales (the offset, then the second-level absmaxes).
struct Nf4Layout {
  int64_t n = 0;
  TS_NF4_HD int64_t packedBytes() const { return (n + 1) / 2; }
  TS_NF4_HD int64_t blocks() const { return (n + kNf4Block - 1) / kNf4Block; }
  TS_NF4_HD int64_t blocks2() const { return (blocks() + kNf4Block2 - 1) / kNf4Block2; }
  TS_NF4_HD int64_t scaleCount() const { return 1 + blocks2(); }
  // Bytes of all three parts: what the memory report counts for the tensor.
  TS_NF4_HD int64_t bytes() const { return packedBytes() + blocks() + 4 * scaleCount(); }
};

// Block b's absmax' = map2[code2] * absmax2 + offset, the product rounded to fp32 before the
// add as bitsandbytes does (a fused multiply-add, which the compilers would contract it into,
// differs in the last bit).
TS_NF4_HD float nf4BlockAbsmax(const uint8_t* absmaxCodes, const float* scales, const float* map2,
                               int64_t b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(map2[absmaxCodes[b]], scales[1 + b / kNf4Block2]), scales[0]);
#else
  volatile float p = map2[absmaxCodes[b]] * scales[1 + b / kNf4Block2];
  return p + scales[0];
#endif
}
TS_NF4_HD float nf4Code(const uint8_t* packed, int64_t i) {
  const uint8_t byte = packed[i >> 1];
  return nf4Value((i & 1) ? (byte & 15) : (byte >> 4));
}
// Element i's dequantized value: code[q] * absmax' of its block.
TS_NF4_HD float nf4Dequant(const uint8_t* packed, const uint8_t* absmaxCodes, const float* scales,
                           const float* map2, int64_t i) {
  return nf4Code(packed, i) * nf4BlockAbsmax(absmaxCodes, scales, map2, i / kNf4Block);
}

// Host: quantizes x (n fp32 values, flat row-major) into the three parts (sizes per Nf4Layout),
// bit for bit as bitsandbytes 0.50 on CPU: 4-bit codes from the exact absmaxes, the offset as an
// fp32 mean, the second level with bitsandbytes' CPU lookup-table quantizer.
void quantizeNf4(const float* x, int64_t n, uint8_t* packed, uint8_t* absmaxCodes, float* scales);
// Host: quantize_blockwise as bitsandbytes' CPU kernel (a 65536-entry lookup table over a grid of
// step 2/65535, not an exact nearest search): codes into the sorted 256-entry map, one fp32 absmax
// per block; an all-zero block gets code 0 everywhere.
void quantizeBlockwiseLut(const float* x, int64_t n, int block, const float* map, uint8_t* codes,
                          float* absmax);

}  // namespace ts::kernels
