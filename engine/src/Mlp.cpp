#include "trainscope/engine/Mlp.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

float* Mlp::inputSlot(const LayerContext& c, MlpSaved& s) const {
  return c.compressor->int8() ? c.ws->dfc2.f32() : s.in.f32();
}

void Mlp::forward(const LayerContext& c, float* out, MlpSaved& s, const float* in,
                  bool recompute) const {
  const int N = static_cast<int>(c.rows());
  const int64_t n = int64_t(N) * F_;
  ActivationCompressor& comp = *c.compressor;
  up_->forward(s.pre.f32(), in, N, *c.scratch, recompute);
  if (comp.int8()) comp.quantizeRows(s.inQ, s.inScale, in, N, C_, !recompute);
  // Compressed: the activation goes to scratch, is used, then packed.
  float* act = comp.mode() == ActivationCompressor::Mode::None ? s.act.f32() : c.ws->dfc2.f32();
  {
    const char* name = act_ == Activation::SwiGlu ? "swiglu_fwd"
                       : act_ == Activation::Relu ? "relu_fwd"
                                                  : "gelu_fwd";
    ScopedRange r(name, SpanCategory::Elementwise);
    if (act_ == Activation::SwiGlu)
      c.backend->swigluForward(act, s.pre.f32(), N, F_);
    else if (act_ == Activation::Relu)
      c.backend->reluForward(act, s.pre.f32(), n);
    else
      c.backend->geluForward(act, s.pre.f32(), n);
  }
  if (out) down_->forward(out, act, N, *c.scratch, recompute);
  if (comp.int8())
    comp.quantizeRows(s.actQ, s.actScale, act, N, F_, !recompute);
  else if (comp.sparse())
    comp.packSparse(s.mask, s.vals, act, n, !recompute);
}

void Mlp::backward(const LayerContext& c, float* dinp, const float* dout, MlpSaved& s) const {
  const int N = static_cast<int>(c.rows());
  const int64_t n = int64_t(N) * F_;
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  // Compressed inputs are expanded into whichever of dfc / dfc2 is free at that point.
  const float* act = s.act.empty() ? nullptr : s.act.f32();
  if (comp.int8()) {
    comp.dequantizeRows(ws.dfc2.f32(), s.actQ, s.actScale, N, F_);
    act = ws.dfc2.f32();
  } else if (comp.sparse()) {
    comp.unpackSparse(ws.dfc2.f32(), s.mask, s.vals, n);
    act = ws.dfc2.f32();
  }
  down_->backward(ws.dfc.f32(), dout, act, N, *c.scratch);
  {
    const char* name = act_ == Activation::SwiGlu ? "swiglu_bwd"
                       : act_ == Activation::Relu ? "relu_bwd"
                                                  : "gelu_bwd";
    ScopedRange r(name, SpanCategory::Elementwise);
    // relu(x) > 0 exactly when x > 0, so the pre-activation gives the same mask.
    if (act_ == Activation::SwiGlu)
      c.backend->swigluBackward(ws.dfc2.f32(), s.pre.f32(), ws.dfc.f32(), N, F_);
    else if (act_ == Activation::Relu)
      c.backend->reluBackward(ws.dfc2.f32(),
                              comp.mode() == ActivationCompressor::Mode::None ? act : s.pre.f32(),
                              ws.dfc.f32(), n);
    else
      c.backend->geluBackward(ws.dfc2.f32(), s.pre.f32(), ws.dfc.f32(), n);
  }
  const float* in = s.in.empty() ? nullptr : s.in.f32();
  if (comp.int8()) {
    comp.dequantizeRows(ws.dfc.f32(), s.inQ, s.inScale, N, C_);
    in = ws.dfc.f32();
  }
  up_->backward(dinp, ws.dfc2.f32(), in, N, *c.scratch);
}

}  // namespace ts::engine
