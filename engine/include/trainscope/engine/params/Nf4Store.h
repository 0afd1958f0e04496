#pragma once
// NF4 storage of an arena (QLoRA, ArenaOptions::nf4FrozenLinears): frozen block linear weights
// stored only as NF4 with double quantization (kernels/Nf4.h), in three byte/scale buffers of
// their own (category parameters); they have no fp32 or 16-bit value (ParamInfo::offset -1)
// and the linears dequantize them on the fly. Loaders hand their fp32 values to quantize().
#include <cstdint>
#include <vector>

#include "trainscope/engine/params/ArenaLayout.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

class Nf4Store {
 public:
  Nf4Store() = default;  // no NF4 tensor
  // The three buffers (zeroed) and the 256-entry map, when `sizes` holds any tensor.
  Nf4Store(kernels::Backend* backend, MemoryTracker* tracker, const Nf4Sizes& sizes);

  // Quantizes fp32 host values (p.numel) into p's storage (bit for bit as bitsandbytes).
  void quantize(const ParamInfo& p, const float* host);
  // Host values of p dequantized (fp32).
  std::vector<float> toHost(const ParamInfo& p) const;
  // p dequantized into backend memory as bf16 (a GEMM operand).
  void dequantizeBf16(const ParamInfo& p, uint16_t* dst) const;
  int64_t bytes() const;  // all three buffers

 private:
  kernels::Backend* backend_ = nullptr;
  Tensor packed_, codes_, scales_, map_;
};

}  // namespace ts::engine
