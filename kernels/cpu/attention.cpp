// Naive causal self-attention, multi-head and grouped-query: the masked op's implementation
// (attention_masked.cpp) with the default options, head dim C/NH and output rows of C, so the
// three ops run the same GEMMs and loops (the same results, bitwise). Multi-head attention is
// the KVH == NH case.
#include <cstdint>

#include "cpu/MaskedAttention.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void attentionGqaForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                         int KVH) {
  const auto g = masked::geometry("attentionGqaForward", B, T, NH, KVH, NH > 0 ? C / NH : 0, C,
                                  AttentionOptions{});
  masked::attentionForward(out, att, qkv, g);
}

void attentionGqaBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH, int KVH) {
  const auto g = masked::geometry("attentionGqaBackward", B, T, NH, KVH, NH > 0 ? C / NH : 0, C,
                                  AttentionOptions{});
  masked::attentionBackward(dqkv, datt, dout, qkv, att, g);
}

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attentionGqaForward(out, att, qkv, B, T, C, NH, NH);
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH) {
  attentionGqaBackward(dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cpu
