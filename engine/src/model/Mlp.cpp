#include "trainscope/engine/model/Mlp.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

float* Mlp::inputSlot(const LayerContext& c, MlpSaved& s) const {
  return c.compressor->slot(s.in, c.ws->dfc2.f32());
}

void Mlp::activate(const LayerContext& c, float* act, const float* pre) const {
  const int N = static_cast<int>(c.rows());
  if (act_ == Activation::SwiGlu)
    c.backend->swigluForward(act, pre, N, F_);
  else if (act_ == Activation::GeGlu)
    c.backend->gegluForward(act, pre, N, F_);
  else if (act_ == Activation::Relu)
    c.backend->reluForward(act, pre, int64_t(N) * F_);
  else
    c.backend->geluForward(act, pre, int64_t(N) * F_);
}

void Mlp::forward(const LayerContext& c, float* out, MlpSaved& s, const float* in,
                  bool recompute) const {
  const int N = static_cast<int>(c.rows());
  const int64_t n = int64_t(N) * F_;
  const int64_t preCols = gated() ? 2 * F_ : F_;
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  const bool count = !recompute;
  // Stored tensors: the pre-activation in dfc, the activation in dfc2 once `in` (there) is
  // packed. Sparse keeps the activation as a bitmap and its nonzeros.
  float* pre = comp.slot(s.pre, ws.dfc.f32());
  // A bf16 GEMM reads the bf16 saved input itself (rounded once).
  const uint16_t* in16 = comp.packForBf16Gemm(s.in, in, N, C_, up_->readsBf16Input());
  up_->forward(pre, in, N, *c.scratch, recompute, in16);
  if (!in16) comp.store(s.in, in, N, C_, count);
  float* act = comp.sparse() ? ws.dfc2.f32() : comp.slot(s.act, ws.dfc2.f32());
  {
    const char* name = act_ == Activation::SwiGlu  ? "swiglu_fwd"
                       : act_ == Activation::GeGlu ? "geglu_fwd"
                       : act_ == Activation::Relu  ? "relu_fwd"
                                                   : "gelu_fwd";
    ScopedRange r(name, SpanCategory::Elementwise);
    activate(c, act, pre);
  }
  const uint16_t* act16 =
      comp.sparse() ? nullptr : comp.packForBf16Gemm(s.act, act, N, F_, down_->readsBf16Input());
  if (out) down_->forward(out, act, N, *c.scratch, recompute, act16);
  comp.store(s.pre, pre, N, preCols, count);
  if (comp.sparse())
    comp.packSparse(s.mask, s.vals, act, n, count);
  else if (!act16)
    comp.store(s.act, act, N, F_, count, act_ == Activation::Relu);
}

void Mlp::backward(const LayerContext& c, float* dinp, const float* dout, MlpSaved& s,
                   const InputRecompute& recomputeIn) const {
  const int N = static_cast<int>(c.rows());
  const int64_t n = int64_t(N) * F_;
  const int64_t preCols = gated() ? 2 * F_ : F_;
  ActivationCompressor& comp = *c.compressor;
  Workspace& ws = *c.ws;
  // Stored tensors expand into whichever of dfc / dfc2 is free: the activation into dfc2, then
  // the pre-activation into dfc2 too (the activation's backward runs in place on it: each
  // output element reads only its own inputs), then the input into dfc.
  // bf16 GEMMs read bf16 saved inputs as they are (ReLU's mask then comes from the kept
  // pre-activation).
  const uint16_t* act16 =
      down_->readsBf16Input() && !s.pre.empty() ? comp.bf16Data(s.act) : nullptr;
  const float* act = nullptr;
  // 16-bit storage keeps no activation output: it is recomputed from the stored pre-activation
  // (GELU/ReLU in place on its expansion in dfc2; SwiGLU's narrower output into the second
  // half of dfc, whose first half then takes the down projection's input gradient).
  const bool recomputeAct = s.act.empty() && !comp.sparse();
  const float* preF = nullptr;  // the pre-activation, still readable after the recomputation
  if (comp.sparse()) {
    comp.unpackSparse(ws.dfc2.f32(), s.mask, s.vals, n);
    act = ws.dfc2.f32();
  } else if (recomputeAct) {
    ScopedRange r("activation_recompute", SpanCategory::Elementwise);
    const float* pre = comp.load(s.pre, ws.dfc2.f32(), N, preCols);
    // SwiGLU's output is narrower than its input: not in place. GELU/ReLU run in place on the
    // expansion, which is then expanded again.
    float* out = gated() ? ws.dfc.f32() + n : ws.dfc2.f32();
    activate(c, out, pre);
    act = out;
    preF = pre == out ? nullptr : pre;
  } else if (!act16) {
    act = comp.load(s.act, ws.dfc2.f32(), N, F_);
  }
  down_->backward(ws.dfc.f32(), dout, act, N, *c.scratch, act16);
  {
    // ReLU without a kept pre-activation (int8): the mask from the activation, which packing
    // kept exactly nonzero where it was.
    const float* pre = s.pre.empty() ? act
                       : preF        ? preF
                                     : comp.load(s.pre, ws.dfc2.f32(), N, preCols);
    const char* name = act_ == Activation::SwiGlu  ? "swiglu_bwd"
                       : act_ == Activation::GeGlu ? "geglu_bwd"
                       : act_ == Activation::Relu  ? "relu_bwd"
                                                   : "gelu_bwd";
    ScopedRange r(name, SpanCategory::Elementwise);
    // relu(x) > 0 exactly when x > 0, so the pre-activation gives the same mask.
    if (act_ == Activation::SwiGlu)
      c.backend->swigluBackward(ws.dfc2.f32(), pre, ws.dfc.f32(), N, F_);
    else if (act_ == Activation::GeGlu)
      c.backend->gegluBackward(ws.dfc2.f32(), pre, ws.dfc.f32(), N, F_);
    else if (act_ == Activation::Relu)
      c.backend->reluBackward(ws.dfc2.f32(), pre, ws.dfc.f32(), n);
    else
      c.backend->geluBackward(ws.dfc2.f32(), pre, ws.dfc.f32(), n);
  }
  const uint16_t* in16 = up_->readsBf16Input() ? comp.bf16Data(s.in) : nullptr;
  const float* in =
      linearInputForBackward(comp, s.in, in16 != nullptr, ws.dfc.f32(), N, C_, recomputeIn);
  up_->backward(dinp, ws.dfc2.f32(), in, N, *c.scratch, in16);
}

}  // namespace ts::engine
