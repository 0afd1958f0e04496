#include "trainscope/engine/model/Attention.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

float* Attention::inputSlot(const LayerContext& c, AttentionSaved& s) const {
  return c.compressor->slot(s.in, c.ws->dfc2.f32());
}

void Attention::rope(const LayerContext& c, float* qkv, bool backward) const {
  const float* table = s_.localRope ? c.ropeLocal : c.rope;
  ScopedRange r(backward ? "rope_bwd" : "rope_fwd", SpanCategory::Elementwise);
  const int hd = s_.headDim, rd = s_.rotaryDim, ld = s_.qkvDim;
  for (auto [p, heads] : {std::pair{qkv, s_.heads}, std::pair{qkv + s_.qDim(), s_.kvHeads}}) {
    if (backward)
      c.backend->ropeTableBackward(p, p, c.B, c.T, heads, hd, rd, ld, ld, table);
    else
      c.backend->ropeTableForward(p, p, c.B, c.T, heads, hd, rd, ld, ld, table);
  }
}

// q and k normed from the saved projections into the packed qkv (v is copied as it is).
void Attention::qkNormForward(const LayerContext& c, float* qkv, AttentionSaved& s) const {
  ScopedRange r("qk_norm_fwd", SpanCategory::Norm);
  const int N = static_cast<int>(c.rows()), hd = s_.headDim;
  const float* pre = s.qkPre.f32();
  c.backend->copyOnDevice(qkv, pre, int64_t(N) * s_.qkvDim * int64_t(sizeof(float)));
  const int gq = s_.qkNormPerHead ? s_.heads : 1, gk = s_.qkNormPerHead ? s_.kvHeads : 1;
  const int dq = s_.qkNormPerHead ? hd : s_.qDim(), dk = s_.qkNormPerHead ? hd : s_.kvHeads * hd;
  float* rstd = s.qkRstd.f32();
  c.backend->rmsnormGroupsForward(qkv, rstd, pre, c.value(s_.qNorm), N, gq, dq, s_.qkvDim,
                                  s_.normEps, s_.normOffset);
  c.backend->rmsnormGroupsForward(qkv + s_.qDim(), rstd + int64_t(N) * gq, pre + s_.qDim(),
                                  c.value(s_.kNorm), N, gk, dk, s_.qkvDim, s_.normEps,
                                  s_.normOffset);
}

// dqkv's q and k parts, from the gradients of the normed values to the projections', in place.
void Attention::qkNormBackward(const LayerContext& c, float* dqkv, const AttentionSaved& s) const {
  ScopedRange r("qk_norm_bwd", SpanCategory::Norm);
  const int N = static_cast<int>(c.rows()), hd = s_.headDim;
  const float* pre = s.qkPre.f32();
  const int gq = s_.qkNormPerHead ? s_.heads : 1, gk = s_.qkNormPerHead ? s_.kvHeads : 1;
  const int dq = s_.qkNormPerHead ? hd : s_.qDim(), dk = s_.qkNormPerHead ? hd : s_.kvHeads * hd;
  const float* rstd = s.qkRstd.f32();
  c.backend->rmsnormGroupsBackward(dqkv, c.grad(s_.qNorm), dqkv, pre, c.value(s_.qNorm), rstd, N,
                                   gq, dq, s_.qkvDim, s_.normOffset, false);
  c.backend->rmsnormGroupsBackward(dqkv + s_.qDim(), c.grad(s_.kNorm), dqkv + s_.qDim(),
                                   pre + s_.qDim(), c.value(s_.kNorm), rstd + int64_t(N) * gq, N,
                                   gk, dk, s_.qkvDim, s_.normOffset, false);
}

void Attention::forward(const LayerContext& c, float* out, AttentionSaved& s, const float* in,
                        bool recompute) const {
  const int N = static_cast<int>(c.rows()), B = c.B, T = c.T, C = s_.dModel, Q = s_.qDim();
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  const bool count = !recompute;
  const bool qkNorm = s_.qNorm != nullptr;
  // Stored tensors are computed in free fp32 scratch (dqkv, datt, then dfc2 once `in` is
  // packed: `in` itself sits there) and packed when no longer needed.
  float* qkv = comp.slot(s.qkv, ws.dqkv.f32());
  // A bf16 GEMM reads the bf16 saved input itself (rounded once).
  const uint16_t* in16 = comp.packForBf16Gemm(s.in, in, N, C, qkv_->readsBf16Input());
  qkv_->forward(qkNorm ? s.qkPre.f32() : qkv, in, N, *c.scratch, recompute, in16);
  if (!in16) comp.store(s.in, in, N, C, count);
  if (qkNorm) qkNormForward(c, qkv, s);
  // Rotary positions on the q and k heads of the packed qkv, in place (saved rotated).
  if (s_.rotaryDim > 0) rope(c, qkv, false);
  float* att = s_.flash ? s.att.f32() : comp.slot(s.att, ws.datt.f32());  // lse: exact
  float* attOut = comp.slot(s.out, ws.dfc2.f32());
  {
    ScopedRange r("attention_fwd", SpanCategory::Attention, 4.0 * B * T * T * Q);
    const int hd = s_.headDim, nh = s_.heads, kvh = s_.kvHeads;
    if (s_.flashBf16 && plainOptions())
      c.backend->flashAttentionBf16Forward(attOut, att, qkv, B, T, Q, nh, kvh);
    else if (s_.flash)
      c.backend->flashAttentionMaskedForward(attOut, att, qkv, B, T, nh, kvh, hd, s_.options);
    else
      c.backend->attentionMaskedForward(attOut, att, qkv, B, T, nh, kvh, hd, s_.options);
  }
  comp.store(s.qkv, qkv, N, s_.qkvDim, count);
  if (!s_.flash) comp.store(s.att, att, int64_t(B) * s_.heads * T, T, count);
  const uint16_t* out16 = comp.packForBf16Gemm(s.out, attOut, N, Q, o_->readsBf16Input());
  o_->forward(out, attOut, N, *c.scratch, recompute, out16);
  if (!out16) comp.store(s.out, attOut, N, Q, count);
}

void Attention::backward(const LayerContext& c, float* dinp, const float* dout, AttentionSaved& s,
                         const InputRecompute& recomputeIn) const {
  const int N = static_cast<int>(c.rows()), B = c.B, T = c.T, C = s_.dModel, Q = s_.qDim();
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  float* datt = ws.dtmp.f32();  // gradient of the merged heads
  // Stored tensors expand into scratch that is free when each is read: the merged heads into
  // dfc, qkv into dfc2, the probabilities into attUnpack, then the input into dfc.
  // bf16 GEMMs read bf16 saved inputs as they are; flash's backward needs the fp32 output.
  const uint16_t* out16 = o_->readsBf16Input() ? comp.bf16Data(s.out) : nullptr;
  const float* attOut = out16 && !s_.flash ? nullptr : comp.load(s.out, ws.dfc.f32(), N, Q);
  o_->backward(datt, dout, attOut, N, *c.scratch, out16);
  const float* qkv = comp.load(s.qkv, ws.dfc2.f32(), N, s_.qkvDim);
  {
    ScopedRange r("attention_bwd", SpanCategory::Attention, 8.0 * B * T * T * Q);
    const int hd = s_.headDim, nh = s_.heads, kvh = s_.kvHeads;
    if (s_.flashBf16 && plainOptions()) {
      c.backend->flashAttentionBf16Backward(ws.dqkv.f32(), datt, attOut, s.att.f32(), qkv, B, T, Q,
                                            nh, kvh);
    } else if (s_.flash) {
      c.backend->flashAttentionMaskedBackward(ws.dqkv.f32(), datt, attOut, s.att.f32(), qkv, B, T,
                                              nh, kvh, hd, s_.options);
    } else {
      const float* att = comp.load(s.att, ws.attUnpack.f32(), int64_t(B) * s_.heads * T, T);
      c.backend->attentionMaskedBackward(ws.dqkv.f32(), ws.datt.f32(), datt, qkv, att, B, T, nh,
                                         kvh, hd, s_.options);
    }
  }
  // Back through the rotation: dq, dk of the unrotated projections, in place; then the norms.
  if (s_.rotaryDim > 0) rope(c, ws.dqkv.f32(), true);
  if (s_.qNorm) qkNormBackward(c, ws.dqkv.f32(), s);
  const uint16_t* in16 = qkv_->readsBf16Input() ? comp.bf16Data(s.in) : nullptr;
  const float* in =
      linearInputForBackward(comp, s.in, in16 != nullptr, ws.dfc.f32(), N, C, recomputeIn);
  qkv_->backward(dinp, ws.dqkv.f32(), in, N, *c.scratch, in16);
}

}  // namespace ts::engine
