// The bf16 tensor-core flash attention (OpList.h: FlashAttentionBf16) on every instantiated
// backend (OnBackend.h), into NaN-poisoned outputs: against an fp64 reference of the rounding
// contract OpList.h states (bf16 q, k, v, dout; bf16 P and dS before they multiply), which
// must hold to fp32 summation and the odd rounding tie, and against exact fp64 attention, which
// bf16 operands may miss by their rounding. CUDA also against its CPU twin. Head dims 64 and
// 128 (the CUDA kernel's), T across its 64-row tiles, grouped-query and multi-head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>

#include "FlashBf16Reference.h"
#include "OnBackend.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {
class FlashBf16 : public OnBackend {};

struct Outputs {
  std::vector<float> out, lse, dqkv;
};

Outputs runOn(Backend& b, const FlashShape& s, const std::vector<float>& qkv,
              const std::vector<float>& dout) {
  DeviceBuffers d(b);
  const float *x = d.up(qkv), *g = d.up(dout);
  float *out = d.poisoned(s.nOut()), *lse = d.poisoned(s.nLse()), *dx = d.poisoned(s.nQkv());
  b.flashAttentionBf16Forward(out, lse, x, s.B, s.T, s.C(), s.NH, s.KVH);
  // Backward reads the backend's own forward output and log-sum-exp.
  b.flashAttentionBf16Backward(dx, g, out, lse, x, s.B, s.T, s.C(), s.NH, s.KVH);
  return {d.down(out, s.nOut()), d.down(lse, s.nLse()), d.down(dx, s.nQkv())};
}
}  // namespace

TEST_P(FlashBf16, FollowsItsRoundingContractAndApproximatesExactAttention) {
  for (const FlashShape& s : flashShapes()) {
    SCOPED_TRACE(::testing::Message() << s);
    const auto qkv = randomVec(s.nQkv(), 41, -2.f, 2.f), dout = randomVec(s.nOut(), 42);
    const Outputs got = runOn(be(), s, qkv, dout);
    for (const auto* v : {&got.out, &got.lse, &got.dqkv})
      ASSERT_TRUE(std::none_of(v->begin(), v->end(), [](float f) { return std::isnan(f); }))
          << "an output element was not written";

    const FlashReference contract = flashReference(s, qkv, dout, true);
    EXPECT_LT(maxAbsDiff(got.lse, contract.lse), 1e-4);
    // Relative to each tensor's largest value: fp32 sums and a rounding tie falling the other
    // way stay orders of magnitude below one bf16 step (2^-8 = 3.9e-3).
    EXPECT_LT(relMaxDiff(got.out, contract.out), 1e-3) << "out";
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(relMaxDiff(s.part(got.dqkv, part), s.part(contract.dqkv, part)), 1e-3)
          << "d"
          << "qkv"[part];

    // Exact attention of the fp32 inputs: bf16 operands and probabilities cost up to a few
    // bf16 steps relative to the largest value, never more.
    const FlashReference exact = flashReference(s, qkv, dout, false);
    EXPECT_LT(relMaxDiff(got.out, exact.out), 2e-2) << "out vs exact";
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(relMaxDiff(s.part(got.dqkv, part), s.part(exact.dqkv, part)), 2e-2)
          << "d"
          << "qkv"[part] << " vs exact";

    if (hasTwin()) {  // CUDA against the CPU reference twin
      const Outputs twin = runOn(cpu(), s, qkv, dout);
      EXPECT_LT(relMaxDiff(got.out, twin.out), 2e-3) << "out vs the CPU twin";
      EXPECT_LT(relMaxDiff(got.dqkv, twin.dqkv), 2e-3) << "dqkv vs the CPU twin";
      EXPECT_LT(maxAbsDiff(got.lse, twin.lse), 1e-4) << "lse vs the CPU twin";
    }
  }
}

TEST_P(FlashBf16, RefusesHeadDimsTheCudaKernelLacksOnlyOnCuda) {
  const FlashShape s{1, 8, 2, 2, 32};
  const auto qkv = randomVec(s.nQkv(), 1);
  DeviceBuffers d(be());
  float *out = d.poisoned(s.nOut()), *lse = d.poisoned(s.nLse());
  auto call = [&] { be().flashAttentionBf16Forward(out, lse, d.up(qkv), s.B, s.T, s.C(), 2, 2); };
  if (hasTwin())
    EXPECT_THROW(call(), std::invalid_argument);
  else
    EXPECT_NO_THROW(call());  // the CPU reference takes any head dim
}

TS_ON_BACKEND(FlashBf16);
