#pragma once
// One activation kept from forward for backward. The model description (core/ModelSpec.h
// savedState) says how it is stored: fp32 as computed (exact), 16-bit (the bf16/fp16/fp8
// policies store saved activations in their working dtype), or int8 rows with one fp32 absmax
// scale each (memory.activation_compression int8). A stored tensor is computed into free fp32
// scratch, packed, and expanded into free scratch again when backward reads it
// (ActivationCompressor::slot / store / load); an exact one is computed in place.
#include "trainscope/engine/params/Tensor.h"

namespace ts::engine {

struct SavedTensor {
  Tensor data;   // F32, BF16, F16 or I8
  Tensor scale;  // I8 only: one fp32 scale per row
  bool empty() const { return data.empty(); }
  bool exact() const { return data.dtype() == DType::F32; }
  // fp32 storage (exact tensors only; the caller checks).
  float* f32() { return data.f32(); }
  const float* f32() const { return data.f32(); }
};

}  // namespace ts::engine
