#pragma once
// Helpers the model tests share: a model's parameters as fp64 reference tensors, and random
// parameters (norm weights near 1, the rest near 0) written through the backend.
#include <random>
#include <vector>

#include "../support/TestBackends.h"
#include "RefGpt.h"
#include "trainscope/engine/model/Gpt.h"

namespace ts::engine::testutil {

inline reftest::Params toRef(Gpt& m) {
  reftest::Params p;
  const auto host = ts::testsupport::hostCopy(m.paramBuffer());
  for (const auto& info : m.params()) {
    const float* d = host.data() + info.offset;
    p[info.name] = std::vector<double>(d, d + info.numel);
  }
  return p;
}

inline void randomize(Gpt& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.35f);
  auto host = ts::testsupport::hostCopy(m.paramBuffer());
  for (const auto& info : m.params()) {
    float* d = host.data() + info.offset;
    // Norm weights near 1 (LayerNorm and RMSNorm), everything else near 0.
    const bool norm = info.spec.role == ts::core::TensorRole::NormWeight;
    for (int64_t i = 0; i < info.numel; ++i) d[i] = (norm ? 1.f : 0.f) + nd(rng);
  }
  m.paramBuffer().copyFromHost(host.data());
}

}  // namespace ts::engine::testutil
