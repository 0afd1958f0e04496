// CUDA twins vs their CPU ops on the same random inputs (label gpu). Skips with the reason
// when no GPU is usable. kernels_emu_tests runs the same bodies on the twins' kernels under
// emulation (TS_EMULATED_CUDA; label unit). Tolerances are fp32 reduction-order differences. The
// newer ops' twins are checked by the OnBackend suites (rmsnorm_test.cpp etc., OnBackend.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "TestUtil.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/Numeric.h"
#ifdef TS_EMULATED_CUDA
#include "emu/EmulatedCudaBackend.h"
#endif

using namespace ts::kernels;
using namespace ts::kernels::test;

namespace {

class CudaTwin : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
#ifdef TS_EMULATED_CUDA
    gpu_ = makeEmulatedCudaBackend();
#else
    gpu_ = makeCudaBackend(&why);
#endif
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << why;
    cpu_ = makeCpuBackend();
  }
  void TearDown() override {
    if (gpu_)
      for (void* p : owned_) gpu_->release(p);
  }

  template <class T>
  T* up(const std::vector<T>& h) {
    void* p = gpu_->allocate(h.size() * sizeof(T));
    owned_.push_back(p);
    gpu_->copyToDevice(p, h.data(), h.size() * sizeof(T));
    return static_cast<T*>(p);
  }
  std::vector<float> down(const float* d, size_t n) {
    std::vector<float> h(n);
    gpu_->synchronize();
    gpu_->copyToHost(h.data(), d, n * sizeof(float));
    return h;
  }

  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<void*> owned_;
};

}  // namespace

TEST_F(CudaTwin, DeviceInfo) {
  const DeviceInfo info = gpu_->device();
  EXPECT_EQ(info.kind, DeviceKind::Cuda);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.memory_bytes, 0);
}

// Every OpList.h entry has a CUDA twin (the build links them all) and is reported supported.
TEST_F(CudaTwin, SupportsEveryListedOp) {
#define TS_OP(kind, ret, name, params, args)      \
  EXPECT_TRUE(gpu_->supports(Op::kind)) << #name; \
  EXPECT_EQ(gpu_->supports(Op::kind, DType::F32), Op::kind != Op::MatmulBF16) << #name;
#include "trainscope/kernels/OpList.h"
  EXPECT_TRUE(gpu_->supports(Op::MatmulBF16, DType::BF16));
  EXPECT_TRUE(gpu_->supports(Op::Convert, DType::BF16));
  EXPECT_TRUE(gpu_->supports(Op::Convert, DType::F8E5M2));
  EXPECT_FALSE(gpu_->supports(Op::Convert, DType::I8));
}

TEST_F(CudaTwin, MatmulAllTransposes) {
  for (int tr = 0; tr < 4; ++tr)
    for (auto [M, N, K] : {std::tuple{7, 13, 37}, {61, 37, 129}, {1, 1, 1}}) {
      const bool ta = tr & 1, tb = tr & 2;
      const auto A = randomVec(size_t(M) * K, 1), B = randomVec(size_t(K) * N, 2);
      auto C = randomVec(size_t(M) * N, 3);
      float* dC = up(C);
      gpu_->matmul(dC, up(A), up(B), M, N, K, ta, tb, 0.5f, 0.25f);
      cpu_->matmul(C.data(), A.data(), B.data(), M, N, K, ta, tb, 0.5f, 0.25f);
      EXPECT_TRUE(allClose(down(dC, C.size()), C, 1e-5, 1e-5)) << tr << " " << M;
    }
}

TEST_F(CudaTwin, MatmulBf16AllTransposes) {
  for (int tr = 0; tr < 4; ++tr)
    for (auto [M, N, K] : {std::tuple{7, 13, 37}, {61, 37, 129}, {1, 1, 1}}) {
      const bool ta = tr & 1, tb = tr & 2;
      const auto a32 = randomVec(size_t(M) * K, 1), b32 = randomVec(size_t(K) * N, 2);
      std::vector<uint16_t> A(a32.size()), B(b32.size());
      cpu::floatToBf16(a32.data(), A.data(), int64_t(A.size()));
      cpu::floatToBf16(b32.data(), B.data(), int64_t(B.size()));
      auto C = randomVec(size_t(M) * N, 3);
      float* dC = up(C);
      gpu_->matmulBf16(dC, up(A), up(B), M, N, K, ta, tb, 0.5f, 0.25f);
      cpu_->matmulBf16(C.data(), A.data(), B.data(), M, N, K, ta, tb, 0.5f, 0.25f);
      EXPECT_TRUE(allClose(down(dC, C.size()), C, 1e-5, 1e-5)) << tr << " " << M;
    }
}

TEST_F(CudaTwin, LayerNormForwardBackward) {
  const int N = 37, C = 61;
  const auto x = randomVec(size_t(N) * C, 1, -2, 3), w = randomVec(C, 2), b = randomVec(C, 3);
  const auto g = randomVec(x.size(), 4);
  std::vector<float> out(x.size()), mean(N), rstd(N);
  auto dx = randomVec(x.size(), 5), dw = randomVec(C, 6), db = randomVec(C, 7);
  float *dout = up(out), *dmean = up(mean), *drstd = up(rstd), *ddx = up(dx), *ddw = up(dw),
        *ddb = up(db);
  const float *dX = up(x), *dW = up(w), *dB = up(b), *dG = up(g);
  gpu_->layernormForward(dout, dmean, drstd, dX, dW, dB, N, C, 1e-5f);
  gpu_->layernormBackward(ddx, ddw, ddb, dG, dX, dW, dmean, drstd, N, C);
  cpu_->layernormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5f);
  cpu_->layernormBackward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(allClose(down(dout, out.size()), out, 1e-5, 1e-5));
  EXPECT_TRUE(allClose(down(ddx, dx.size()), dx, 1e-4, 1e-5));
  EXPECT_TRUE(allClose(down(ddw, C), dw, 1e-4, 1e-5));
  EXPECT_TRUE(allClose(down(ddb, C), db, 1e-4, 1e-5));
}

TEST_F(CudaTwin, ActivationsAndElementwise) {
  const int64_t n = 100003;
  const auto x = randomVec(n, 1, -6, 6), g = randomVec(n, 2), y0 = randomVec(n, 3);
  std::vector<float> a(n), b(n);
  float *dA = up(a), *dB = up(b);
  const float *dX = up(x), *dG = up(g);
  auto cmp = [&](const char* what) { EXPECT_TRUE(allClose(down(dA, n), a, 1e-5, 1e-6)) << what; };
  gpu_->geluForward(dA, dX, n);
  cpu_->geluForward(a.data(), x.data(), n);
  cmp("gelu fwd");
  gpu_->geluBackward(dA, dX, dG, n);
  cpu_->geluBackward(a.data(), x.data(), g.data(), n);
  cmp("gelu bwd");
  gpu_->reluForward(dB, dX, n);
  cpu_->reluForward(b.data(), x.data(), n);
  gpu_->reluBackward(dA, dB, dG, n);
  cpu_->reluBackward(a.data(), b.data(), g.data(), n);
  cmp("relu bwd");
  gpu_->residualForward(dA, dX, dG, n);
  cpu_->residualForward(a.data(), x.data(), g.data(), n);
  cmp("residual");
  gpu_->accumulate(dA, dG, n);
  cpu_->accumulate(a.data(), g.data(), n);
  cmp("accumulate");
  gpu_->scale(dA, n, -0.3f);
  cpu_->scale(a.data(), n, -0.3f);
  cmp("scale");
  EXPECT_NEAR(gpu_->sumSquares(dX, n), cpu_->sumSquares(x.data(), n),
              1e-10 * cpu_->sumSquares(x.data(), n));
}

// Every output starts NaN-poisoned on the device (never the CPU's result): a kernel that
// skips an element, a row or a tile shows up. Head dims 16, 64 and 128; sequence lengths that
// cross the kernels' tiles (not multiples of 32 or 64).
TEST_F(CudaTwin, AttentionNaiveAndFlash) {
  for (auto [B, T, NH, HD] : {std::tuple{2, 67, 3, 16}, {1, 130, 2, 64}, {2, 97, 2, 128}}) {
    const int C = NH * HD;
    const size_t nq = size_t(B) * T * 3 * C, no = size_t(B) * T * C;
    const size_t na = size_t(B) * NH * T * T, nl = size_t(B) * NH * T;
    const auto qkv = randomVec(nq, 1, -2, 2), g = randomVec(no, 2);
    std::vector<float> out(no), att(na), datt(na), dqkv(nq), lse(nl);
    cpu_->attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    cpu_->attentionBackward(dqkv.data(), datt.data(), g.data(), qkv.data(), att.data(), B, T, C,
                            NH);
    const float *dQKV = up(qkv), *dG = up(g);
    float *dOut = up(nanVec(no)), *dAtt = up(nanVec(na)), *dDatt = up(nanVec(na)),
          *dD = up(nanVec(nq));
    gpu_->attentionForward(dOut, dAtt, dQKV, B, T, C, NH);
    gpu_->attentionBackward(dD, dDatt, dG, dQKV, dAtt, B, T, C, NH);
    EXPECT_TRUE(allClose(down(dOut, no), out, 1e-4, 1e-5)) << "naive out, head dim " << HD;
    EXPECT_TRUE(allClose(down(dAtt, na), att, 1e-4, 1e-6)) << "naive att, head dim " << HD;
    EXPECT_TRUE(allClose(down(dD, nq), dqkv, 1e-3, 1e-4)) << "naive dqkv, head dim " << HD;
    // A saved P rounded to bf16 (its rows no longer sum to 1): both twins divide sum_j P dP by
    // sum_j P (attention_test.cpp says why), so they still agree.
    std::vector<float> rounded(na);
    for (size_t i = 0; i < na; ++i) rounded[i] = bf16ToFloat(floatToBf16(att[i]));
    cpu_->attentionBackward(dqkv.data(), datt.data(), g.data(), qkv.data(), rounded.data(), B, T, C,
                            NH);
    float* dR = up(nanVec(nq));
    gpu_->attentionBackward(dR, dDatt, dG, dQKV, up(rounded), B, T, C, NH);
    EXPECT_TRUE(allClose(down(dR, nq), dqkv, 1e-3, 1e-4))
        << "naive dqkv from bf16-rounded P, head dim " << HD;

    cpu_->flashAttentionForward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
    cpu_->flashAttentionBackward(dqkv.data(), g.data(), out.data(), lse.data(), qkv.data(), B, T, C,
                                 NH);
    float *fOut = up(nanVec(no)), *fL = up(nanVec(nl)), *fD = up(nanVec(nq));
    gpu_->flashAttentionForward(fOut, fL, dQKV, B, T, C, NH);
    // Backward reads the device's own forward output and log-sum-exp.
    gpu_->flashAttentionBackward(fD, dG, fOut, fL, dQKV, B, T, C, NH);
    EXPECT_TRUE(allClose(down(fOut, no), out, 1e-4, 1e-5)) << "flash out, head dim " << HD;
    EXPECT_TRUE(allClose(down(fL, nl), lse, 1e-5, 1e-5)) << "flash lse, head dim " << HD;
    EXPECT_TRUE(allClose(down(fD, nq), dqkv, 1e-3, 1e-4)) << "flash dqkv, head dim " << HD;
  }
}

TEST_F(CudaTwin, CrossEntropyWithIgnoredTargets) {
  const int N = 37, V = 1013;
  const auto x = randomVec(size_t(N) * V, 1, -5, 5);
  std::vector<int32_t> t(N);
  for (int i = 0; i < N; ++i) t[i] = i % 4 == 1 ? -1 : (i * 97) % V;
  std::vector<float> loss(N), dx(x.size());
  float *dLoss = up(loss), *dDx = up(dx);
  gpu_->crossEntropyForwardBackward(dLoss, dDx, up(x), up(t), N, V, 0.1f);
  cpu_->crossEntropyForwardBackward(loss.data(), dx.data(), x.data(), t.data(), N, V, 0.1f);
  EXPECT_TRUE(allClose(down(dLoss, N), loss, 1e-5, 1e-5));
  EXPECT_TRUE(allClose(down(dDx, dx.size()), dx, 1e-4, 1e-8));
}

TEST_F(CudaTwin, Embedding) {
  const int B = 3, T = 13, C = 37, V = 11;
  const auto wte = randomVec(size_t(V) * C, 1), wpe = randomVec(size_t(T) * C, 2);
  const auto g = randomVec(size_t(B) * T * C, 3);
  std::vector<int32_t> tok(size_t(B) * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = int32_t((i * i + 1) % V);
  std::vector<float> out(g.size());
  auto dwte = randomVec(wte.size(), 4), dwpe = randomVec(wpe.size(), 5);
  float *dOut = up(out), *dDwte = up(dwte), *dDwpe = up(dwpe);
  const int32_t* dTok = up(tok);
  gpu_->embeddingForward(dOut, dTok, up(wte), up(wpe), B, T, C);
  gpu_->embeddingBackward(dDwte, dDwpe, up(g), dTok, B, T, C);
  cpu_->embeddingForward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  cpu_->embeddingBackward(dwte.data(), dwpe.data(), g.data(), tok.data(), B, T, C);
  EXPECT_TRUE(allClose(down(dOut, out.size()), out, 1e-6, 0));
  EXPECT_TRUE(allClose(down(dDwte, dwte.size()), dwte, 1e-5, 1e-6));
  EXPECT_TRUE(allClose(down(dDwpe, dwpe.size()), dwpe, 1e-5, 1e-6));
  // From bf16 tables: the device output NaN-poisoned first, then bit for bit the CPU's.
  std::vector<uint16_t> wte16(wte.size()), wpe16(wpe.size());
  cpu_->floatToBf16(wte.data(), wte16.data(), int64_t(wte.size()));
  cpu_->floatToBf16(wpe.data(), wpe16.data(), int64_t(wpe.size()));
  auto out16 = nanVec(out.size());
  float* dOut16 = up(out16);
  gpu_->embeddingForwardBf16(dOut16, dTok, up(wte16), up(wpe16), B, T, C);
  cpu_->embeddingForwardBf16(out16.data(), tok.data(), wte16.data(), wpe16.data(), B, T, C);
  EXPECT_TRUE(allClose(down(dOut16, out16.size()), out16, 0, 0));
}

TEST_F(CudaTwin, Optimizers) {
  const int64_t n = 4099;
  auto p = randomVec(n, 1), m = std::vector<float>(n, 0.0f), v = m, buf = m;
  auto q = p;
  float *dP = up(p), *dM = up(m), *dV = up(v), *dQ = up(q), *dBuf = up(buf);
  for (int step = 1; step <= 4; ++step) {
    const auto g = randomVec(n, 10 + step);
    const float* dG = up(g);
    gpu_->adamwUpdate(dP, dG, dM, dV, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    cpu_->adamwUpdate(p.data(), g.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f,
                      step);
    gpu_->sgdUpdate(dQ, dG, dBuf, n, 0.05f, 0.9f, 0.01f);
    cpu_->sgdUpdate(q.data(), g.data(), buf.data(), n, 0.05f, 0.9f, 0.01f);
  }
  EXPECT_TRUE(allClose(down(dP, n), p, 1e-5, 1e-6));
  EXPECT_TRUE(allClose(down(dQ, n), q, 1e-5, 1e-6));
}
