// The CUDA bf16 flash attention kernels (kernels/cuda/FlashAttentionBf16Kernels.cuh), run on
// the CPU under CudaEmulation.h: their tiles, fragment layouts, causal masks, padding rows and
// barriers, checked on every machine (no GPU needed) against the fp64 rounding contract the
// CPU twin is tested against, into NaN-poisoned outputs. The launch geometry is the one
// kernels/cuda/flash_attention_bf16.cu uses. What emulation cannot check (the hardware's own
// products and timing) the gpu-labelled FlashBf16 test does on a GPU.
#include "CudaEmulation.h"
// (the emulation first: it defines the CUDA names the kernels use)
#include <gtest/gtest.h>

#include <algorithm>

#include "../../kernels/cuda/FlashAttentionBf16Kernels.cuh"
#include "FlashBf16Reference.h"
#include "TestUtil.h"

using namespace ts::kernels;
using namespace ts::kernels::test;
namespace fb = ts::kernels::cuda::flash_bf16;

namespace {
template <int HD>
void runKernels(const FlashShape& s, const std::vector<float>& qkv, const std::vector<float>& dout,
                std::vector<float>& out, std::vector<float>& lse, std::vector<float>& dqkv,
                bool vec) {
  const fb::Geo G{s.B, s.T, s.C(), s.NH, s.KVH, HD, s.NH / s.KVH, int64_t(s.W())};
  const unsigned tiles = unsigned((s.T + fb::kRows - 1) / fb::kRows);
  const float sc = 1.0f / std::sqrt(float(HD));
  ts::emu::launch(fb::fwdKernel<HD>, {tiles, unsigned(s.B * s.NH), 1}, fb::kThreads,
                  fb::kFwdSmem(HD), out.data(), lse.data(), qkv.data(), G, sc, vec);
  ts::emu::launch(fb::bwdQKernel<HD>, {tiles, unsigned(s.B * s.NH), 1}, fb::kThreads,
                  fb::kBwdQSmem(HD), dqkv.data(), dout.data(),
                  static_cast<const float*>(out.data()), static_cast<const float*>(lse.data()),
                  qkv.data(), G, sc, vec);
  ts::emu::launch(fb::bwdKVKernel<HD>, {tiles, unsigned(s.B * s.KVH), 1}, fb::kThreads,
                  fb::kBwdKVSmem(HD), dqkv.data(), dout.data(),
                  static_cast<const float*>(out.data()), static_cast<const float*>(lse.data()),
                  qkv.data(), G, sc, vec);
}
}  // namespace

TEST(FlashBf16Emulated, CudaKernelsFollowTheRoundingContract) {
  // One shape per head dim keeps the emulation (a thread per CUDA thread) to seconds; both
  // cross a tile boundary, one is grouped-query. Float4 loads on one, scalar on the other.
  const FlashShape shapes[] = {{1, 130, 4, 2, 64}, {1, 67, 2, 1, 128}};
  for (const FlashShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << s);
    const auto qkv = randomVec(s.nQkv(), 41, -2.f, 2.f), dout = randomVec(s.nOut(), 42);
    std::vector<float> out = nanVec(s.nOut()), lse = nanVec(s.nLse()), dqkv = nanVec(s.nQkv());
    if (s.HD == 64)
      runKernels<64>(s, qkv, dout, out, lse, dqkv, true);
    else
      runKernels<128>(s, qkv, dout, out, lse, dqkv, false);
    for (const auto* v : {&out, &lse, &dqkv})
      ASSERT_TRUE(std::none_of(v->begin(), v->end(), [](float f) { return std::isnan(f); }))
          << "an output element was not written";
    const FlashReference ref = flashReference(s, qkv, dout, true);
    EXPECT_LT(maxAbsDiff(lse, ref.lse), 1e-4);
    // The kernel rounds P relative to a running max, where the reference uses the row's max:
    // each term's rounding differs by at most a bf16 step, and they average out over the keys.
    EXPECT_LT(relMaxDiff(out, ref.out), 2e-3) << "out";
    for (int part = 0; part < 3; ++part)
      EXPECT_LT(relMaxDiff(s.part(dqkv, part), s.part(ref.dqkv, part)), 1e-3) << "d"
                                                                              << "qkv"[part];
  }
}
