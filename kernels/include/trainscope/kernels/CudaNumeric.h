#pragma once
// CUDA twins of the bulk conversions in Numeric.h (kernels/cuda/convert.cu): same signatures
// and bit-identical results (they run the same scalar code); every array pointer is device
// memory. They run on the default stream without synchronizing, except amax, which returns a
// host value. Launch errors throw std::runtime_error.
#include <cstdint>

#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cuda {

void floatToBf16(const float* x, uint16_t* y, int64_t n);
void bf16ToFloat(const uint16_t* x, float* y, int64_t n);
void floatToFp16(const float* x, uint16_t* y, int64_t n);
void fp16ToFloat(const uint16_t* x, float* y, int64_t n);
void floatToFp8(const float* x, uint8_t* y, int64_t n, Fp8Format f, float scale = 1.0f,
                bool saturate = true);
void fp8ToFloat(const uint8_t* x, float* y, int64_t n, Fp8Format f, float scaleInv = 1.0f);
float amax(const float* x, int64_t n);
void quantizeInt8Rows(const float* x, int8_t* q, float* scales, int64_t rows, int64_t cols);
void dequantizeInt8Rows(const int8_t* q, const float* scales, float* y, int64_t rows, int64_t cols);

}  // namespace ts::kernels::cuda
