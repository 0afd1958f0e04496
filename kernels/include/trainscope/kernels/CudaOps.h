#pragma once
// The CUDA twins of CpuOps.h, one per file in kernels/cuda/, declared from OpList.h: same
// signatures and semantics; every pointer is device memory. They run on the default stream and
// return without synchronizing (except sumSquares, which returns a host value). Launch errors
// throw std::runtime_error. Reductions use fixed orders (no float atomics): deterministic.
#include <cstdint>

#include "trainscope/kernels/AttentionOptions.h"  // before OpList.h, outside the namespace
#include "trainscope/kernels/Numeric.h"           // Fp8Format

namespace ts::kernels::cuda {

#define TS_OP(kind, ret, name, params, args) ret name params;
#include "trainscope/kernels/OpList.h"

}  // namespace ts::kernels::cuda
