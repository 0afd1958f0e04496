#include "trainscope/engine/Attention.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

float* Attention::inputSlot(const LayerContext& c, AttentionSaved& s) const {
  return c.compressor->int8() ? c.ws->dfc2.f32() : s.in.f32();
}

void Attention::rope(const LayerContext& c, float* qkv, bool backward) const {
  const float theta = static_cast<float>(s_.ropeTheta);
  ScopedRange r(backward ? "rope_bwd" : "rope_fwd", SpanCategory::Elementwise);
  for (auto [p, heads] : {std::pair{qkv, s_.heads}, std::pair{qkv + s_.dModel, s_.kvHeads}}) {
    if (backward)
      c.backend->ropeBackward(p, p, c.B, c.T, heads, s_.headDim, s_.qkvDim, s_.qkvDim, theta);
    else
      c.backend->ropeForward(p, p, c.B, c.T, heads, s_.headDim, s_.qkvDim, s_.qkvDim, theta);
  }
}

void Attention::forward(const LayerContext& c, float* out, AttentionSaved& s, const float* in,
                        bool recompute) const {
  const int N = static_cast<int>(c.rows()), B = c.B, T = c.T, C = s_.dModel;
  const bool q8 = c.compressor->int8();
  qkv_->forward(s.qkv.f32(), in, N, *c.scratch, recompute);
  if (q8) c.compressor->quantizeRows(s.inQ, s.inScale, in, N, C, !recompute);
  // Rotary positions on the q and k heads of the packed qkv, in place (saved rotated).
  if (s_.ropeTheta > 0) rope(c, s.qkv.f32(), false);
  // int8: the merged heads go to scratch (free again: `in` is quantized), then are quantized.
  float* attOut = q8 ? c.ws->dfc2.f32() : s.out.f32();
  {
    ScopedRange r("attention_fwd", SpanCategory::Attention, 4.0 * B * T * T * C);
    if (s_.flash)
      c.backend->flashAttentionGqaForward(attOut, s.att.f32(), s.qkv.f32(), B, T, C, s_.heads,
                                          s_.kvHeads);
    else
      c.backend->attentionGqaForward(attOut, s.att.f32(), s.qkv.f32(), B, T, C, s_.heads,
                                     s_.kvHeads);
  }
  o_->forward(out, attOut, N, *c.scratch, recompute);
  if (q8) c.compressor->quantizeRows(s.outQ, s.outScale, attOut, N, C, !recompute);
}

void Attention::backward(const LayerContext& c, float* dinp, const float* dout,
                         const AttentionSaved& s) const {
  const int N = static_cast<int>(c.rows()), B = c.B, T = c.T, C = s_.dModel;
  const bool q8 = c.compressor->int8();
  Workspace& ws = *c.ws;
  float* datt = ws.dtmp.f32();  // gradient of the merged heads
  const float* attOut = s.out.empty() ? nullptr : s.out.f32();
  if (q8) {
    c.compressor->dequantizeRows(ws.dfc.f32(), s.outQ, s.outScale, N, C);
    attOut = ws.dfc.f32();
  }
  o_->backward(datt, dout, attOut, N, *c.scratch);
  {
    ScopedRange r("attention_bwd", SpanCategory::Attention, 8.0 * B * T * T * C);
    if (s_.flash)
      c.backend->flashAttentionGqaBackward(ws.dqkv.f32(), datt, attOut, s.att.f32(), s.qkv.f32(), B,
                                           T, C, s_.heads, s_.kvHeads);
    else
      c.backend->attentionGqaBackward(ws.dqkv.f32(), ws.datt.f32(), datt, s.qkv.f32(), s.att.f32(),
                                      B, T, C, s_.heads, s_.kvHeads);
  }
  // Back through the rotation: dq, dk of the unrotated projections, in place.
  if (s_.ropeTheta > 0) rope(c, ws.dqkv.f32(), true);
  const float* in = s.in.empty() ? nullptr : s.in.f32();
  if (q8) {
    c.compressor->dequantizeRows(ws.dfc.f32(), s.inQ, s.inScale, N, C);
    in = ws.dfc.f32();
  }
  qkv_->backward(dinp, ws.dqkv.f32(), in, N, *c.scratch);
}

}  // namespace ts::engine
