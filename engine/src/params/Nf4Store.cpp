#include "trainscope/engine/params/Nf4Store.h"

#include <stdexcept>

#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/kernels/Nf4.h"

namespace ts::engine {

using core::MemoryCategory;

Nf4Store::Nf4Store(kernels::Backend* backend, MemoryTracker* tracker, const Nf4Sizes& sizes)
    : backend_(backend) {
  if (sizes.packed <= 0) return;
  packed_ = Tensor(backend_, tracker, MemoryCategory::Parameters, DType::I8, {sizes.packed});
  codes_ = Tensor(backend_, tracker, MemoryCategory::Parameters, DType::I8, {sizes.codes});
  scales_ = Tensor(backend_, tracker, MemoryCategory::Parameters, DType::F32, {sizes.scales});
  packed_.zero();
  codes_.zero();
  scales_.zero();
  // The 256-entry map: 1 KiB, uncounted (a constant, as bitsandbytes does not count it).
  const auto map = kernels::dynamicMap(true);
  map_ = Tensor(backend_, nullptr, MemoryCategory::Workspace, DType::F32, {256});
  map_.copyFromHost(map.data());
}

int64_t Nf4Store::bytes() const {
  return packed_.bytes() + codes_.bytes() + scales_.bytes();
}

void Nf4Store::quantize(const ParamInfo& p, const float* host) {
  if (!p.quantized()) throw std::logic_error(p.name + " is not stored as NF4");
  const kernels::Nf4Layout q{p.numel};
  std::vector<uint8_t> packed(size_t(q.packedBytes())), codes(size_t(q.blocks()));
  std::vector<float> scales(size_t(q.scaleCount()));
  kernels::quantizeNf4(host, p.numel, packed.data(), codes.data(), scales.data());
  backend_->copyToDevice(static_cast<uint8_t*>(packed_.data()) + p.nf4.packed, packed.data(),
                         packed.size());
  backend_->copyToDevice(static_cast<uint8_t*>(codes_.data()) + p.nf4.codes, codes.data(),
                         codes.size());
  backend_->copyToDevice(scales_.f32() + p.nf4.scales, scales.data(),
                         scales.size() * sizeof(float));
}

std::vector<float> Nf4Store::toHost(const ParamInfo& p) const {
  if (!p.quantized()) throw std::logic_error(p.name + " is not stored as NF4");
  const kernels::Nf4Layout q{p.numel};
  std::vector<uint8_t> packed(size_t(q.packedBytes())), codes(size_t(q.blocks()));
  std::vector<float> scales(size_t(q.scaleCount())), map(256), out(size_t(p.numel));
  backend_->copyToHost(packed.data(), static_cast<const uint8_t*>(packed_.data()) + p.nf4.packed,
                       packed.size());
  backend_->copyToHost(codes.data(), static_cast<const uint8_t*>(codes_.data()) + p.nf4.codes,
                       codes.size());
  backend_->copyToHost(scales.data(), scales_.f32() + p.nf4.scales, scales.size() * sizeof(float));
  map_.copyToHost(map.data());
  for (int64_t i = 0; i < p.numel; ++i)
    out[size_t(i)] = kernels::nf4Dequant(packed.data(), codes.data(), scales.data(), map.data(), i);
  return out;
}

void Nf4Store::dequantizeBf16(const ParamInfo& p, uint16_t* dst) const {
  backend_->dequantizeNf4Bf16(dst, static_cast<const uint8_t*>(packed_.data()) + p.nf4.packed,
                              static_cast<const uint8_t*>(codes_.data()) + p.nf4.codes,
                              scales_.f32() + p.nf4.scales, map_.f32(), p.numel);
}

}  // namespace ts::engine
