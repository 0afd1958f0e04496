#pragma once
// The CPU ops as free functions, one per file in kernels/cpu/, declared from OpList.h: each has
// the same signature as its CUDA twin in CudaOps.h (ts::kernels::cuda) and the semantics
// documented there. All are OpenMP-threaded with the current omp_get_max_threads() and
// deterministic for a fixed thread count (fixed-order reductions).
#include <cstdint>
#include <string>

#include "trainscope/kernels/AttentionOptions.h"  // before OpList.h, outside the namespace
#include "trainscope/kernels/Fp8Quant.h"  // also declares the fp8 ops (with default arguments)
#include "trainscope/kernels/Numeric.h"   // also declares the conversions (with default arguments)

namespace ts::kernels::cpu {

#define TS_OP(kind, ret, name, params, args) ret name params;
#include "trainscope/kernels/OpList.h"

// CPU-only pieces of matmulBf16 (which runs the native kernel where this CPU has one, else the
// emulation). matmulBf16Emulated widens the operands to fp32 (exact) and runs sgemm: the same
// products, fp32 sums.
void matmulBf16Emulated(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K,
                        bool transA, bool transB, float alpha, float beta);
// Whether oneDNN has a (non-reference) bf16 matmul kernel for this CPU; `impl` gets its
// implementation name, or why there is none.
bool matmulBf16Native(std::string* impl = nullptr);

}  // namespace ts::kernels::cpu
