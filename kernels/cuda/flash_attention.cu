// Flash attention on the GPU, multi-head and grouped-query: the masked op's kernels
// (flash_attention_masked.cu) with the default options, head dim C/NH and output rows of C, so
// the three ops run the same arithmetic in the same order (the same results, bitwise).
// Multi-head attention is KVH == NH. Head dim <= 256 (beyond, std::runtime_error).
#include "MaskedAttention.cuh"
#include "trainscope/kernels/CudaOps.h"

namespace ts::kernels::cuda {

void flashAttentionGqaForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                              int KVH) {
  masked::flashForward(out, lse, qkv,
                       masked::Heads("flashAttentionGqaForward", B, T, NH, KVH, NH > 0 ? C / NH : 0,
                                     C, AttentionOptions{}));
}

void flashAttentionGqaBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                               const float* qkv, int B, int T, int C, int NH, int KVH) {
  masked::flashBackward(dqkv, dout, out, lse, qkv,
                        masked::Heads("flashAttentionGqaBackward", B, T, NH, KVH,
                                      NH > 0 ? C / NH : 0, C, AttentionOptions{}));
}

void flashAttentionForward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaForward(out, lse, qkv, B, T, C, NH, NH);
}

void flashAttentionBackward(float* dqkv, const float* dout, const float* out, const float* lse,
                            const float* qkv, int B, int T, int C, int NH) {
  flashAttentionGqaBackward(dqkv, dout, out, lse, qkv, B, T, C, NH, NH);
}

}  // namespace ts::kernels::cuda
