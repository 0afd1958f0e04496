#include "trainscope/engine/model/Block.h"

#include <stdexcept>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

namespace {
const float* rowMean(const NormSaved& s) {
  return s.mean.empty() ? nullptr : s.mean.f32();  // RMSNorm keeps none
}
}  // namespace

void Block::dropout(const LayerContext& c, float* out, const float* in, int site) const {
  ScopedRange r("dropout", SpanCategory::Elementwise);
  c.backend->dropout(out, in, c.rows() * C_, c.dropout.p, c.dropout.seed,
                     c.dropout.stream(layer_, site));
}

void Block::forward(const LayerContext& c, BlockActivations& a, const float* in, float* out,
                    bool recompute) const {
  ScopedRange br(recompute ? "block_recompute" : "block_fwd", SpanCategory::Block);
  const int64_t N = c.rows(), n = N * C_;
  ActivationCompressor& comp = *c.compressor;
  float* branch = c.ws->dtmp.f32();  // free in forward: each branch's output before its add
  float* ln1 = attn_.inputSlot(c, a.attn);
  norm1_->forward(c, ln1, a.norm1, in);
  // Stored (packed) input: `in` is the fp32 stream, packed here; `out` may overwrite it.
  if (!a.input.empty()) comp.storeNormInput(a.input, in, rowMean(a.norm1), N, C_);
  if (post_.attn) {  // the branch's output kept for its norm's backward
    attn_.forward(c, a.attnBranch.f32(), a.attn, ln1, recompute);
    post_.attn->forward(c, branch, a.postAttn, a.attnBranch.f32());
  } else {
    attn_.forward(c, branch, a.attn, ln1, recompute);
  }
  if (c.dropout.active()) dropout(c, branch, branch, 0);
  // Stored: in dqkv, free once attention packed qkv (not dres: it carries the residual gradient
  // while checkpointing recomputes).
  float* resid2 = comp.slot(a.resid2, c.ws->dqkv.f32());
  {
    ScopedRange r("residual_fwd", SpanCategory::Elementwise);
    c.backend->residualForward(resid2, in, branch, n);
  }
  float* ln2 = mlp_.inputSlot(c, a.mlp);
  norm2_->forward(c, ln2, a.norm2, resid2);
  // A normed MLP output is recomputed too: its norm's backward reads it.
  if (post_.mlp) {
    mlp_.forward(c, a.mlpBranch.f32(), a.mlp, ln2, recompute);
    post_.mlp->forward(c, branch, a.postMlp, a.mlpBranch.f32());
  } else {
    mlp_.forward(c, out ? branch : nullptr, a.mlp, ln2, recompute);
  }
  comp.storeNormInput(a.resid2, resid2, rowMean(a.norm2), N, C_);
  if (!out) return;
  if (c.dropout.active()) dropout(c, branch, branch, 1);
  ScopedRange r("residual_fwd", SpanCategory::Elementwise);
  c.backend->residualForward(out, resid2, branch, n);
}

void Block::backward(const LayerContext& c, BlockActivations& a, const float* in) const {
  ScopedRange blr("block_bwd", SpanCategory::Block);
  Workspace& ws = *c.ws;
  ActivationCompressor& comp = *c.compressor;
  const int64_t N = c.rows();
  float* dres = ws.dres.f32();
  float* dtmp = ws.dtmp.f32();
  // Each branch sees the residual gradient through its dropout mask (the same mask: same
  // stream); the identity path keeps it whole.
  const float* dbranch = dres;
  if (c.dropout.active()) {
    dropout(c, ws.ddrop.f32(), dres, 1);
    dbranch = ws.ddrop.f32();
  }
  if (post_.mlp) {
    post_.mlp->backwardWrite(c, ws.dpost.f32(), dbranch, a.mlpBranch.f32(), a.postMlp);
    dbranch = ws.dpost.f32();
  }
  // MLP branch: out = resid2 + proj(act(fc(norm_2(resid2)))).
  // The norms' outputs, when not kept, are recomputed from their exact (fp32) inputs with the
  // same kernel as forward: the same values forward computed.
  mlp_.backward(c, dtmp, dbranch, a.mlp, [&](float* ln2) {
    if (!a.resid2.exact()) throw std::logic_error("norm_2's output recomputed from a packed input");
    ScopedRange r("norm_recompute", SpanCategory::Elementwise);
    norm2_->forward(c, ln2, a.norm2, a.resid2.f32());
  });
  // Stored norm inputs expand into dfc, free between the branches.
  norm2_->backward(c, dres, dtmp,
                   comp.loadNormInput(a.resid2, ws.dfc.f32(), rowMean(a.norm2), N, C_), a.norm2);
  // Attention branch: resid2 = input + o(attn(qkv(norm_1(input)))).
  dbranch = dres;
  if (c.dropout.active()) {
    dropout(c, ws.ddrop.f32(), dres, 0);
    dbranch = ws.ddrop.f32();
  }
  if (post_.attn) {
    post_.attn->backwardWrite(c, ws.dpost.f32(), dbranch, a.attnBranch.f32(), a.postAttn);
    dbranch = ws.dpost.f32();
  }
  const float* input = a.input.empty() ? in : a.input.exact() ? a.input.f32() : nullptr;
  attn_.backward(c, dtmp, dbranch, a.attn, [&](float* ln1) {
    if (!input) throw std::logic_error("norm_1's output recomputed from a packed input");
    ScopedRange r("norm_recompute", SpanCategory::Elementwise);
    norm1_->forward(c, ln1, a.norm1, input);
  });
  norm1_->backward(
      c, dres, dtmp,
      input ? input : comp.loadNormInput(a.input, ws.dfc.f32(), rowMean(a.norm1), N, C_), a.norm1);
}

}  // namespace ts::engine
