// Flash attention on the CPU, multi-head and grouped-query: the masked op's implementation
// (flash_attention_masked.cpp) with the default options, head dim C/NH and output rows of C,
// so the three ops run the same GEMMs and loops (the same results, bitwise). Multi-head
// attention is the KVH == NH case.
#include <cstdint>

#include "cpu/MaskedAttention.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void flashAttentionGqaForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                              int KVH) {
  const auto g = masked::geometry("flashAttentionGqaForward", B, T, NH, KVH, NH > 0 ? C / NH : 0, C,
                                  AttentionOptions{});
  masked::flashForward(out, lse, qkv, g);
}

void flashAttentionGqaBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                               const float* qkv, int B, int T, int C, int NH, int KVH) {
  const auto g = masked::geometry("flashAttentionGqaBackward", B, T, NH, KVH, NH > 0 ? C / NH : 0,
                                  C, AttentionOptions{});
  masked::flashBackward(dqkv, dout, out, lse, qkv, g);
}

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaForward(out, lse, qkv, B, T, C, NH, NH);
}

void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaBackward(dqkv, dout, out, lse, qkv, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cpu
