// Token + position embedding forward, and backward accumulation with repeated tokens.
#include <gtest/gtest.h>

#include <cstring>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::kernels;
using namespace ts::kernels::test;

TEST(Embedding, ForwardAndBackwardWithRepeatedTokens) {
  auto be = makeCpuBackend();
  for (auto [B, T, C, V] : {std::tuple{2, 13, 37, 11}, {3, 61, 1, 5}, {4, 97, 256, 31}}) {
    const auto wte = randomVec(size_t(V) * C, 1), wpe = randomVec(size_t(T) * C, 2);
    std::vector<int32_t> tok(size_t(B) * T);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * i + 3) % V);  // repeats
    auto out = nanVec(size_t(B) * T * C);
    be->embeddingForward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    std::vector<double> want(out.size());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c)
          want[(size_t(b) * T + t) * C + c] =
              double(wte[size_t(tok[b * T + t]) * C + c]) + wpe[size_t(t) * C + c];
    EXPECT_TRUE(allClose(out, want, 1e-6, 0));

    const auto G = randomVec(out.size(), 3);
    auto dwte = randomVec(wte.size(), 4), dwpe = randomVec(wpe.size(), 5);
    auto wdte = toDouble(dwte), wdpe = toDouble(dwpe);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int c = 0; c < C; ++c) {
          const double g = G[(size_t(b) * T + t) * C + c];
          wdte[size_t(tok[b * T + t]) * C + c] += g;
          wdpe[size_t(t) * C + c] += g;
        }
    be->embeddingBackward(dwte.data(), dwpe.data(), G.data(), tok.data(), B, T, C);
    EXPECT_TRUE(allClose(dwte, wdte, 1e-5, 1e-5));
    EXPECT_TRUE(allClose(dwpe, wdpe, 1e-5, 1e-5));
  }
}

// From bf16 tables (the stored weights under bf16 GEMMs): bit for bit the fp32 op on the tables
// widened independently here, with and without a position table; NaN-poisoned output.
TEST(Embedding, ForwardFromBf16TablesEqualsTheWidenedTables) {
  auto be = makeCpuBackend();
  for (auto [B, T, C, V] : {std::tuple{2, 13, 37, 11}, {4, 97, 256, 31}}) {
    const auto wte = randomVec(size_t(V) * C, 1), wpe = randomVec(size_t(T) * C, 2);
    std::vector<uint16_t> wte16(wte.size()), wpe16(wpe.size());
    std::vector<float> wteW(wte.size()), wpeW(wpe.size());
    for (size_t i = 0; i < wte.size(); ++i) {
      wte16[i] = floatToBf16(wte[i]);
      const uint32_t bits = uint32_t(wte16[i]) << 16;
      std::memcpy(&wteW[i], &bits, 4);
    }
    for (size_t i = 0; i < wpe.size(); ++i) {
      wpe16[i] = floatToBf16(wpe[i]);
      const uint32_t bits = uint32_t(wpe16[i]) << 16;
      std::memcpy(&wpeW[i], &bits, 4);
    }
    std::vector<int32_t> tok(size_t(B) * T);
    for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * i + 3) % V);
    for (bool positions : {true, false}) {
      auto got = nanVec(size_t(B) * T * C), want = nanVec(size_t(B) * T * C);
      be->embeddingForwardBf16(got.data(), tok.data(), wte16.data(),
                               positions ? wpe16.data() : nullptr, B, T, C);
      be->embeddingForward(want.data(), tok.data(), wteW.data(), positions ? wpeW.data() : nullptr,
                           B, T, C);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0)
          << "positions " << positions;
    }
  }
}
