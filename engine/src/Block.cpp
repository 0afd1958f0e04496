#include "trainscope/engine/Block.h"

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

void Block::dropout(const LayerContext& c, float* out, const float* in, int site) const {
  ScopedRange r("dropout", SpanCategory::Elementwise);
  c.backend->dropout(out, in, c.rows() * C_, c.dropout.p, c.dropout.seed,
                     c.dropout.stream(layer_, site));
}

void Block::forward(const LayerContext& c, BlockActivations& a, const float* in, float* out,
                    bool recompute) const {
  ScopedRange br(recompute ? "block_recompute" : "block_fwd", SpanCategory::Block);
  const int64_t n = c.rows() * C_;
  float* branch = c.ws->dtmp.f32();  // free in forward: each branch's output before its add
  float* ln1 = attn_.inputSlot(c, a.attn);
  norm1_->forward(c, ln1, a.norm1, in);
  attn_.forward(c, branch, a.attn, ln1, recompute);
  if (c.dropout.active()) dropout(c, branch, branch, 0);
  {
    ScopedRange r("residual_fwd", SpanCategory::Elementwise);
    c.backend->residualForward(a.resid2.f32(), in, branch, n);
  }
  float* ln2 = mlp_.inputSlot(c, a.mlp);
  norm2_->forward(c, ln2, a.norm2, a.resid2.f32());
  mlp_.forward(c, out ? branch : nullptr, a.mlp, ln2, recompute);
  if (!out) return;
  if (c.dropout.active()) dropout(c, branch, branch, 1);
  ScopedRange r("residual_fwd", SpanCategory::Elementwise);
  c.backend->residualForward(out, a.resid2.f32(), branch, n);
}

void Block::backward(const LayerContext& c, BlockActivations& a, const float* in) const {
  ScopedRange blr("block_bwd", SpanCategory::Block);
  Workspace& ws = *c.ws;
  float* dres = ws.dres.f32();
  float* dtmp = ws.dtmp.f32();
  // Each branch sees the residual gradient through its dropout mask (the same mask: same
  // stream); the identity path keeps it whole.
  const float* dbranch = dres;
  if (c.dropout.active()) {
    dropout(c, ws.ddrop.f32(), dres, 1);
    dbranch = ws.ddrop.f32();
  }
  // MLP branch: out = resid2 + proj(act(fc(norm_2(resid2)))).
  mlp_.backward(c, dtmp, dbranch, a.mlp);
  norm2_->backward(c, dres, dtmp, a.resid2.f32(), a.norm2);
  // Attention branch: resid2 = input + o(attn(qkv(norm_1(input)))).
  dbranch = dres;
  if (c.dropout.active()) {
    dropout(c, ws.ddrop.f32(), dres, 0);
    dbranch = ws.ddrop.f32();
  }
  attn_.backward(c, dtmp, dbranch, a.attn);
  norm1_->backward(c, dres, dtmp, in, a.norm1);
}

}  // namespace ts::engine
