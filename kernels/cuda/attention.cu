// Naive causal attention on the GPU, multi-head and grouped-query: the masked op's kernels
// (attention_masked.cu) with the default options, head dim C/NH and output rows of C, so the
// three ops run the same arithmetic in the same order (the same results, bitwise). Multi-head
// attention is KVH == NH.
#include "MaskedAttention.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

void attentionGqaForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                         int KVH) {
  masked::attentionForward(out, att, qkv,
                           masked::Heads("attentionGqaForward", B, T, NH, KVH, NH > 0 ? C / NH : 0,
                                         C, AttentionOptions{}));
}

void attentionGqaBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH, int KVH) {
  masked::attentionBackward(dqkv, datt, dout, qkv, att,
                            masked::Heads("attentionGqaBackward", B, T, NH, KVH,
                                          NH > 0 ? C / NH : 0, C, AttentionOptions{}));
}

void attentionForward(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
  attentionGqaForward(out, att, qkv, B, T, C, NH, NH);
}

void attentionBackward(float* dqkv, float* datt, const float* dout, const float* qkv,
                       const float* att, int B, int T, int C, int NH) {
  attentionGqaBackward(dqkv, datt, dout, qkv, att, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cuda
