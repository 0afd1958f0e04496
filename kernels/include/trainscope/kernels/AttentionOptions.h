#pragma once
// What the masked attention ops (OpList.h: AttentionMasked, FlashAttentionMasked) take beyond the
// shapes: the families' attention variants (transformers' eager_attention_forward and its masks).
// C++17 (the .cu files include it).

namespace ts::kernels {

struct AttentionOptions {
  // Multiplies q·k: 0 = 1/sqrt(HD) (Gemma: query_pre_attn_scalar^-0.5).
  float scale = 0.0f;
  // Sliding window: 0 = causal over the whole sequence; w > 0: query i sees key j iff
  // i - w < j <= i (transformers' sliding_window_causal mask: kv_idx > q_idx - window).
  int window = 0;
  // Tanh soft-capping of the scaled scores before the mask (Gemma 2): s = cap * tanh(s / cap);
  // 0 = off.
  float softcap = 0.0f;
};

}  // namespace ts::kernels
