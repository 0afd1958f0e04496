#include "trainscope/engine/model/Attention.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

float* Attention::inputSlot(const LayerContext& c, AttentionSaved& s) const {
  return c.compressor->slot(s.in, c.ws->dfc2.f32());
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
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  const bool count = !recompute;
  // Stored tensors are computed in free fp32 scratch (dqkv, datt, then dfc2 once `in` is
  // packed: `in` itself sits there) and packed when no longer needed.
  float* qkv = comp.slot(s.qkv, ws.dqkv.f32());
  // A bf16 GEMM reads the bf16 saved input itself (rounded once).
  const uint16_t* in16 = comp.packForBf16Gemm(s.in, in, N, C, qkv_->readsBf16Input());
  qkv_->forward(qkv, in, N, *c.scratch, recompute, in16);
  if (!in16) comp.store(s.in, in, N, C, count);
  // Rotary positions on the q and k heads of the packed qkv, in place (saved rotated).
  if (s_.ropeTheta > 0) rope(c, qkv, false);
  float* att = s_.flash ? s.att.f32() : comp.slot(s.att, ws.datt.f32());  // lse: exact
  float* attOut = comp.slot(s.out, ws.dfc2.f32());
  {
    ScopedRange r("attention_fwd", SpanCategory::Attention, 4.0 * B * T * T * C);
    if (s_.flashBf16)
      c.backend->flashAttentionBf16Forward(attOut, att, qkv, B, T, C, s_.heads, s_.kvHeads);
    else if (s_.flash)
      c.backend->flashAttentionGqaForward(attOut, att, qkv, B, T, C, s_.heads, s_.kvHeads);
    else
      c.backend->attentionGqaForward(attOut, att, qkv, B, T, C, s_.heads, s_.kvHeads);
  }
  comp.store(s.qkv, qkv, N, s_.qkvDim, count);
  if (!s_.flash) comp.store(s.att, att, int64_t(B) * s_.heads * T, T, count);
  const uint16_t* out16 = comp.packForBf16Gemm(s.out, attOut, N, C, o_->readsBf16Input());
  o_->forward(out, attOut, N, *c.scratch, recompute, out16);
  if (!out16) comp.store(s.out, attOut, N, C, count);
}

void Attention::backward(const LayerContext& c, float* dinp, const float* dout, AttentionSaved& s,
                         const InputRecompute& recomputeIn) const {
  const int N = static_cast<int>(c.rows()), B = c.B, T = c.T, C = s_.dModel;
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  float* datt = ws.dtmp.f32();  // gradient of the merged heads
  // Stored tensors expand into scratch that is free when each is read: the merged heads into
  // dfc, qkv into dfc2, the probabilities into attUnpack, then the input into dfc.
  // bf16 GEMMs read bf16 saved inputs as they are; flash's backward needs the fp32 output.
  const uint16_t* out16 = o_->readsBf16Input() ? comp.bf16Data(s.out) : nullptr;
  const float* attOut = out16 && !s_.flash ? nullptr : comp.load(s.out, ws.dfc.f32(), N, C);
  o_->backward(datt, dout, attOut, N, *c.scratch, out16);
  const float* qkv = comp.load(s.qkv, ws.dfc2.f32(), N, s_.qkvDim);
  {
    ScopedRange r("attention_bwd", SpanCategory::Attention, 8.0 * B * T * T * C);
    if (s_.flashBf16) {
      c.backend->flashAttentionBf16Backward(ws.dqkv.f32(), datt, attOut, s.att.f32(), qkv, B, T, C,
                                            s_.heads, s_.kvHeads);
    } else if (s_.flash) {
      c.backend->flashAttentionGqaBackward(ws.dqkv.f32(), datt, attOut, s.att.f32(), qkv, B, T, C,
                                           s_.heads, s_.kvHeads);
    } else {
      const float* att = comp.load(s.att, ws.attUnpack.f32(), int64_t(B) * s_.heads * T, T);
      c.backend->attentionGqaBackward(ws.dqkv.f32(), ws.datt.f32(), datt, qkv, att, B, T, C,
                                      s_.heads, s_.kvHeads);
    }
  }
  // Back through the rotation: dq, dk of the unrotated projections, in place.
  if (s_.ropeTheta > 0) rope(c, ws.dqkv.f32(), true);
  const uint16_t* in16 = qkv_->readsBf16Input() ? comp.bf16Data(s.in) : nullptr;
  const float* in =
      linearInputForBackward(comp, s.in, in16 != nullptr, ws.dfc.f32(), N, C, recomputeIn);
  qkv_->backward(dinp, ws.dqkv.f32(), in, N, *c.scratch, in16);
}

}  // namespace ts::engine
