// bf16 GEMM with fp32 accumulation and fp32 output. Where oneDNN has a bf16 matmul kernel for
// this CPU (AMX or AVX512-BF16; 3-7x fp32 on AMX, reference.md) the operands go to a cached
// dnnl::matmul primitive as they are; elsewhere the op is emulated: the bf16 operands are
// widened to fp32 (exact) and multiplied by sgemm. Both compute sum(a*b) of the same bf16
// values in fp32 (every bf16 product is exact in fp32); only the summation order differs.
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "cpu/Gemm.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/CpuScratch.h"
#include "trainscope/kernels/Numeric.h"

namespace ts::kernels::cpu {

namespace {

using Dims = dnnl::memory::dims;
using Dt = dnnl::memory::data_type;

struct Native {
  bool available = false;
  std::string impl;  // oneDNN's implementation name, e.g. "brg:avx512_core_amx"
  std::string why;   // when not available
};

dnnl::engine& dnnlEngine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::matmul::primitive_desc describe(int M, int N, int K, bool transA, bool transB, float alpha,
                                      float beta) {
  // Row-major views with explicit strides: a transposed operand is the other layout.
  const dnnl::memory::desc a({M, K}, Dt::bf16, transA ? Dims{1, M} : Dims{K, 1});
  const dnnl::memory::desc b({K, N}, Dt::bf16, transB ? Dims{1, K} : Dims{N, 1});
  const dnnl::memory::desc c({M, N}, Dt::f32, Dims{N, 1});
  dnnl::primitive_attr attr;
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, dnnlEngine());
}

const Native& native() {
  static const Native n = [] {
    Native r;
    try {
      const auto pd = describe(64, 64, 64, false, true, 1.0f, 0.0f);
      r.impl = pd.impl_info_str();
      // oneDNN's reference kernel is correct but far slower than sgemm: not worth using.
      r.available = r.impl.rfind("ref", 0) != 0;
      if (!r.available) r.why = "oneDNN only has its reference bf16 kernel (" + r.impl + ") here";
    } catch (const dnnl::error& e) {
      r.why =
          "oneDNN has no bf16 matmul for this CPU (needs AVX512 or AMX): " + std::string(e.what());
    }
    return r;
  }();
  return n;
}

// Primitive creation costs 0.2-0.9 ms (reference.md): one per shape, created once.
struct Key {
  int M, N, K;
  bool transA, transB;
  uint32_t alpha, beta;
  bool operator<(const Key& o) const {
    return std::tie(M, N, K, transA, transB, alpha, beta) <
           std::tie(o.M, o.N, o.K, o.transA, o.transB, o.alpha, o.beta);
  }
};

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

struct Cached {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

const Cached& primitiveFor(const Key& k, float alpha, float beta) {
  static std::mutex mu;
  static std::map<Key, Cached> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(k);
  if (it == cache.end()) {
    auto pd = describe(k.M, k.N, k.K, k.transA, k.transB, alpha, beta);
    dnnl::matmul prim(pd);
    it = cache.emplace(k, Cached{std::move(pd), std::move(prim)}).first;
  }
  return it->second;  // std::map nodes never move
}

void nativeMatmul(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                  bool transB, float alpha, float beta) {
  const Key key{M, N, K, transA, transB, bitsOf(alpha), bitsOf(beta)};
  const Cached& p = primitiveFor(key, alpha, beta);
  auto& eng = dnnlEngine();
  dnnl::memory a(p.pd.src_desc(), eng, const_cast<uint16_t*>(A));
  dnnl::memory b(p.pd.weights_desc(), eng, const_cast<uint16_t*>(B));
  dnnl::memory c(p.pd.dst_desc(), eng, C);
  dnnl::stream s(eng);
  p.prim.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  s.wait();
}

}  // namespace

bool matmulBf16Native(std::string* impl) {
  const Native& n = native();
  if (impl) *impl = n.available ? n.impl : n.why;
  return n.available;
}

// fp32 copies of the operands, a block at a time: at most 1 MiB of scratch whatever the shapes
// (whole copies of a GPT-2 LM head's weight alone would be 154 MB), leased from the kernel
// scratch region (ScratchSizes.h). Converting a block costs 1/512 of its multiply.
void matmulBf16Emulated(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K,
                        bool transA, bool transB, float alpha, float beta) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    stridedGemm('N', 'N', M, N, 0, alpha, nullptr, 1, nullptr, 1, beta, C, N);
    return;
  }
  constexpr int kM = int(scratch::kBf16BlockM), kN = int(scratch::kBf16BlockN),
                kK = int(scratch::kBf16BlockK);
  const ScratchLease blocks(scratch::matmulBf16Emulated(M, N, K), 1);
  float* const a = blocks.slice(0);
  float* const b = a + int64_t(std::min(M, kM)) * std::min(K, kK);
  for (int k0 = 0; k0 < K; k0 += kK) {
    const int kb = std::min(kK, K - k0);
    const float betaHere = k0 == 0 ? beta : 1.0f;  // later K panels accumulate
    for (int i0 = 0; i0 < M; i0 += kM) {
      const int mb = std::min(kM, M - i0);
      // The block of op(A) in A's stored orientation: mb x kb (N) or kb x mb (T).
      if (!transA)
        for (int i = 0; i < mb; ++i)
          bf16ToFloat(A + int64_t(i0 + i) * K + k0, a + int64_t(i) * kb, kb);
      else
        for (int k = 0; k < kb; ++k)
          bf16ToFloat(A + int64_t(k0 + k) * M + i0, a + int64_t(k) * mb, mb);
      for (int j0 = 0; j0 < N; j0 += kN) {
        const int nb = std::min(kN, N - j0);
        if (!transB)
          for (int k = 0; k < kb; ++k)
            bf16ToFloat(B + int64_t(k0 + k) * N + j0, b + int64_t(k) * nb, nb);
        else
          for (int j = 0; j < nb; ++j)
            bf16ToFloat(B + int64_t(j0 + j) * K + k0, b + int64_t(j) * kb, kb);
        stridedGemm(transA ? 'T' : 'N', transB ? 'T' : 'N', mb, nb, kb, alpha, a,
                    transA ? mb : kb, b, transB ? kb : nb, betaHere,
                    C + int64_t(i0) * N + j0, N);
      }
    }
  }
}

void matmulBf16(float* C, const uint16_t* A, const uint16_t* B, int M, int N, int K, bool transA,
                bool transB, float alpha, float beta) {
  if (M <= 0 || N <= 0) return;
  if (K > 0 && native().available) {
    try {
      nativeMatmul(C, A, B, M, N, K, transA, transB, alpha, beta);
      return;
    } catch (const dnnl::error& e) {
      throw std::runtime_error("oneDNN bf16 matmul failed (" + std::to_string(M) + "x" +
                               std::to_string(N) + "x" + std::to_string(K) + "): " + e.what());
    }
  }
  matmulBf16Emulated(C, A, B, M, N, K, transA, transB, alpha, beta);
}

}  // namespace ts::kernels::cpu
