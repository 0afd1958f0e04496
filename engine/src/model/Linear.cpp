#include "trainscope/engine/model/Linear.h"

#include <stdexcept>

#include "trainscope/engine/params/ParamArena.h"
#include "trainscope/kernels/Numeric.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using kernels::Fp8Format;
using profiler::ScopedRange;
using profiler::SpanCategory;

Linear::Linear(kernels::Backend* backend, const ParamStorage* storage, const ParamInfo* weight,
               const ParamInfo* bias, Format format)
    : trainable(weight->trainable()),
      backend_(backend),
      storage_(storage),
      w_(weight),
      b_(bias),
      format_(format) {
  site_.w = weight;
}

int64_t Linear::in() const {
  return w_->shape[1];
}
int64_t Linear::out() const {
  return w_->shape[0];
}

float* Linear::value(const ParamInfo& p) const {
  return storage_->values->f32() + p.offset;
}
float* Linear::grad(const ParamInfo& p) const {
  return storage_->grads->f32() + p.gradOffset;  // gradient space: trainable tensors only
}
float* Linear::wScaleInv() const {
  return storage_->w8Scales->f32() + site_.scaleOffset;
}

void Linear::setNf4Parts(std::vector<const ParamInfo*> parts) {
  nf4Parts_ = std::move(parts);
  format_ = Format::Nf4;
}

const uint16_t* Linear::dequantizeNf4Weight(const LinearScratch& s) const {
  uint16_t* W = static_cast<uint16_t*>(s.nf4W->data());
  int64_t off = 0;
  for (const ParamInfo* p : nf4Parts_) {
    storage_->arena->dequantizeBf16(*p, W + off);
    off += p->numel;
  }
  return W;
}

int64_t Linear::fp8ScaleCount() const {
  return format_ == Format::Fp8Blockwise ? kernels::cpu::fp8TileCount(out(), in(), 128, 128) : 1;
}

void Linear::initFp8(int64_t w8Offset, int64_t scaleOffset, int history, int margin,
                     bool gradE4M3) {
  site_.w8Offset = w8Offset;
  site_.scaleOffset = scaleOffset;
  site_.scaleCount = fp8ScaleCount();
  margin_ = margin;
  const Fp8Format gf = gradE4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
  site_.x = kernels::Fp8DelayedScale(history, margin, Fp8Format::E4M3);
  site_.wt = kernels::Fp8DelayedScale(history, margin, Fp8Format::E4M3);
  site_.g = kernels::Fp8DelayedScale(history, margin, gf);
}

void Linear::quantizeFp8Weight() {
  const float* w = value(*w_);
  uint8_t* w8 = static_cast<uint8_t*>(storage_->w8->data());
  if (format_ == Format::Fp8Blockwise) {
    backend_->quantizeFp8Tiles(w, w8 + site_.w8Offset, nullptr, wScaleInv(), out(), in(), 128, 128,
                               Fp8Format::E4M3, margin_);
  } else {
    // Delayed: this update's weights use the scale from the previous weights' amaxes.
    quantizeFp8WeightDelayed(site_.wt.scale());
    site_.wt.record(backend_->amax(w, out() * in()));
  }
}

void Linear::quantizeFp8WeightDelayed(float scale) {
  backend_->floatToFp8(value(*w_), static_cast<uint8_t*>(storage_->w8->data()) + site_.w8Offset,
                       w_->numel, Fp8Format::E4M3, scale, true);
  site_.wUsed = scale;
  const float inv = 1.f / scale;  // device memory: written through the backend
  backend_->copyToDevice(wScaleInv(), &inv, sizeof inv);
}

void Linear::dequantizeFp8Weight(float* dst) const {
  const uint8_t* q = static_cast<const uint8_t*>(storage_->w8->data()) + site_.w8Offset;
  if (format_ == Format::Fp8Blockwise)
    backend_->dequantizeFp8Tiles(q, wScaleInv(), dst, out(), in(), 128, 128, Fp8Format::E4M3);
  else
    // The delayed scale is known on the host (wUsed): no read of device memory.
    backend_->fp8ToFloat(q, dst, out() * in(), Fp8Format::E4M3, 1.f / site_.wUsed);
}

const float* Linear::adapterInput(const LoraAdapter& ad, const float* inp, int N,
                                  const LinearScratch& s) const {
  if (!(ad.dropout > 0.f) || !s.dropout || !s.dropout->training) return inp;
  backend_->dropout(s.loraX->f32(), inp, int64_t(N) * in(), ad.dropout, s.dropout->seed,
                    s.dropout->stream(ad.layer, 2 + ad.index));
  return s.loraX->f32();
}

const uint16_t* Linear::bf16Input(const float* inp, const uint16_t* inp16, int N,
                                  const LinearScratch& s) const {
  if (inp16) return inp16;
  uint16_t* X = static_cast<uint16_t*>(s.x16->data());
  backend_->floatToBf16(inp, X, int64_t(N) * in());
  return X;
}

void Linear::forward(float* out, const float* inp, int N, const LinearScratch& s, bool recompute,
                     const uint16_t* inp16) {
  if (inp16 && !readsBf16Input())
    throw std::logic_error("Linear: a bf16 input given to a linear that reads fp32");
  forwardBase(out, inp, N, s, recompute, inp16);
  if (adapters.empty()) return;
  ScopedRange r("lora_fwd", SpanCategory::Gemm);
  const int OC = static_cast<int>(this->out()), IC = static_cast<int>(in());
  for (const auto& ad : adapters) {
    const int R = static_cast<int>(ad.a->shape[0]), rows = static_cast<int>(ad.b->shape[0]);
    const float* x = adapterInput(ad, inp, N, s);
    // u = x A^T (saved for dB), then out[:, rows] += scaling * u B^T.
    backend_->matmul(ad.u->f32(), x, value(*ad.a), N, R, IC, false, true, 1.f, 0.f);
    backend_->matmulStrided(out + ad.outOffset, OC, ad.u->f32(), R, value(*ad.b), R, N, rows, R,
                            false, true, ad.scaling, 1.f);
  }
}

void Linear::backward(float* dinp, const float* dout, const float* inp, int N,
                      const LinearScratch& s, const uint16_t* inp16) {
  if (inp16 && !readsBf16Input())
    throw std::logic_error("Linear: a bf16 input given to a linear that reads fp32");
  backwardBase(dinp, dout, inp, N, s, inp16);
  if (adapters.empty()) return;
  ScopedRange r("lora_bwd", SpanCategory::Gemm);
  const int OC = static_cast<int>(out()), IC = static_cast<int>(in());
  for (const auto& ad : adapters) {
    const int R = static_cast<int>(ad.a->shape[0]), rows = static_cast<int>(ad.b->shape[0]);
    float* du = s.loraDU->f32();
    const float* g = dout + ad.outOffset;  // its rows of the output gradient (row length OC)
    // du = scaling * g B; dB += scaling * g^T u; dA += du^T x; dx += du A (through the mask).
    backend_->matmulStrided(du, R, g, OC, value(*ad.b), R, N, R, rows, false, false, ad.scaling,
                            0.f);
    if (ad.b->trainable())
      backend_->matmulStrided(grad(*ad.b), R, g, OC, ad.u->f32(), R, rows, R, N, true, false,
                              ad.scaling, 1.f);
    const float* x = adapterInput(ad, inp, N, s);
    if (ad.a->trainable()) backend_->matmul(grad(*ad.a), du, x, R, IC, N, true, false, 1.f, 1.f);
    if (!dinp) continue;
    if (x == inp) {
      backend_->matmul(dinp, du, value(*ad.a), N, IC, R, false, false, 1.f, 1.f);
    } else {
      float* dx = s.loraX->f32();  // the dropped input is used: reuse it for d(dropped input)
      backend_->matmul(dx, du, value(*ad.a), N, IC, R, false, false, 1.f, 0.f);
      backend_->dropout(dx, dx, int64_t(N) * IC, ad.dropout, s.dropout->seed,
                        s.dropout->stream(ad.layer, 2 + ad.index));
      backend_->accumulate(dinp, dx, int64_t(N) * IC);
    }
  }
}

void Linear::forwardBase(float* out, const float* inp, int N, const LinearScratch& s,
                         bool recompute, const uint16_t* inp16) {
  const int OC = static_cast<int>(this->out()), IC = static_cast<int>(in());
  const char* name = fp8()                         ? "linear_fwd_fp8"
                     : format_ == Format::Bf16Gemm ? "linear_fwd_bf16"
                     : format_ == Format::Nf4      ? "linear_fwd_nf4"
                                                   : "linear_fwd";
  ScopedRange r(name, SpanCategory::Gemm, 2.0 * N * OC * IC);
  // out = 1 * b (broadcast as a rank-1 GEMM), then out += inp W^T.
  float beta = 0.f;
  if (b_) {
    backend_->matmul(out, s.ones->f32(), value(*b_), N, OC, 1, false, false, 1.f, 0.f);
    beta = 1.f;
  }
  if (fp8()) {
    float* X = s.fp8X->f32();
    float* W = s.fp8W->f32();
    const int64_t n = int64_t(N) * IC;
    if (format_ == Format::Fp8Blockwise) {
      // Current scaling is a pure function of the values: recomputation quantizes identically.
      backend_->quantizeFp8Tiles(inp, nullptr, X, s.fp8TileScales->f32(), N, IC, 1, 128,
                                 Fp8Format::E4M3, margin_);
    } else {
      if (!recompute) site_.xUsed = site_.x.scale();
      backend_->fakeQuantizeFp8(inp, X, n, Fp8Format::E4M3, site_.xUsed);
      // Training forwards only: evaluation must not move training's scales (and its batches
      // differ with the rank count, so the ranks' histories would too).
      if (!recompute && (!s.dropout || s.dropout->training)) site_.x.record(backend_->amax(inp, n));
    }
    dequantizeFp8Weight(W);
    backend_->matmul(out, X, W, N, OC, IC, false, true, 1.f, beta);
    return;
  }
  if (format_ == Format::Nf4) {
    // QLoRA: the frozen NF4 weight dequantized to bf16 just for this GEMM (bf16 compute).
    backend_->matmulBf16(out, bf16Input(inp, inp16, N, s), dequantizeNf4Weight(s), N, OC, IC, false,
                         true, 1.f, beta);
    return;
  }
  if (format_ == Format::Bf16Gemm) {
    backend_->matmulBf16(out, bf16Input(inp, inp16, N, s),
                         static_cast<const uint16_t*>(storage_->values16->data()) + w_->offset, N,
                         OC, IC, false, true, 1.f, beta);
    return;
  }
  WeightWindow open(*storage_->arena, *w_, WeightWindow::Kind::Values);
  backend_->matmul(out, inp, value(*w_), N, OC, IC, false, true, 1.f, beta);
}

void Linear::backwardBase(float* dinp, const float* dout, const float* inp, int N,
                          const LinearScratch& s, const uint16_t* inp16) {
  const int OC = static_cast<int>(out()), IC = static_cast<int>(in());
  const char* name = fp8()                         ? "linear_bwd_fp8"
                     : format_ == Format::Bf16Gemm ? "linear_bwd_bf16"
                     : format_ == Format::Nf4      ? "linear_bwd_nf4"
                                                   : "linear_bwd";
  ScopedRange r(name, SpanCategory::Gemm, 4.0 * N * OC * IC);
  // db += 1^T dout (from the unquantized output gradient, as Transformer Engine does).
  if (b_ && b_->trainable())
    backend_->matmul(grad(*b_), s.ones->f32(), dout, 1, OC, N, false, false, 1.f, 1.f);
  if (fp8()) {
    float* X = s.fp8X->f32();
    float* G = s.fp8G->f32();
    float* W = s.fp8W->f32();
    const Fp8Format gf = site_.g.format();
    dequantizeFp8Weight(W);
    if (format_ == Format::Fp8Blockwise) {
      // dgrad (reduction over OC): 1x128 tiles of dout along OC; weights in their 128x128 blocks.
      backend_->quantizeFp8Tiles(dout, nullptr, G, s.fp8TileScales->f32(), N, OC, 1, 128, gf,
                                 margin_);
      if (dinp) backend_->matmul(dinp, G, W, N, IC, OC, false, false, 1.f, 0.f);
      // wgrad (reduction over the N tokens): both operands re-tiled 128x1 (DeepSeek-V3).
      backend_->quantizeFp8Tiles(dout, nullptr, G, s.fp8TileScales->f32(), N, OC, 128, 1, gf,
                                 margin_);
      backend_->quantizeFp8Tiles(inp, nullptr, X, s.fp8TileScales->f32(), N, IC, 128, 1,
                                 Fp8Format::E4M3, margin_);
    } else {
      const int64_t n = int64_t(N) * OC;
      site_.gUsed = site_.g.scale();
      backend_->fakeQuantizeFp8(dout, G, n, gf, site_.gUsed);
      site_.g.record(backend_->amax(dout, n));
      if (dinp) backend_->matmul(dinp, G, W, N, IC, OC, false, false, 1.f, 0.f);
      // The input exactly as the forward GEMM saw it (same scale, same values).
      backend_->fakeQuantizeFp8(inp, X, int64_t(N) * IC, Fp8Format::E4M3, site_.xUsed);
    }
    if (trainable) {
      WeightWindow open(*storage_->arena, *w_, WeightWindow::Kind::Grads);
      backend_->matmul(grad(*w_), G, X, OC, IC, N, true, false, 1.f, 1.f);
    }
    return;
  }
  if (format_ == Format::Nf4) {
    // Frozen: only the input gradient, through the weight dequantized again (not kept).
    if (!dinp) return;
    uint16_t* G = static_cast<uint16_t*>(s.g16->data());
    backend_->floatToBf16(dout, G, int64_t(N) * OC);
    backend_->matmulBf16(dinp, G, dequantizeNf4Weight(s), N, IC, OC, false, false, 1.f, 0.f);
    return;
  }
  if (format_ == Format::Bf16Gemm) {
    // The bias gradient above sums the fp32 dout; the GEMMs see it rounded to bf16.
    uint16_t* G = static_cast<uint16_t*>(s.g16->data());
    const uint16_t* W16 = static_cast<const uint16_t*>(storage_->values16->data()) + w_->offset;
    backend_->floatToBf16(dout, G, int64_t(N) * OC);
    if (trainable) {
      WeightWindow open(*storage_->arena, *w_, WeightWindow::Kind::Grads);
      backend_->matmulBf16(grad(*w_), G, bf16Input(inp, inp16, N, s), OC, IC, N, true, false, 1.f,
                           1.f);
    }
    if (dinp) backend_->matmulBf16(dinp, G, W16, N, IC, OC, false, false, 1.f, 0.f);
    return;
  }
  if (trainable) {
    WeightWindow open(*storage_->arena, *w_, WeightWindow::Kind::Grads);
    backend_->matmul(grad(*w_), dout, inp, OC, IC, N, true, false, 1.f, 1.f);
  }
  if (dinp) {
    WeightWindow open(*storage_->arena, *w_, WeightWindow::Kind::Values);
    backend_->matmul(dinp, dout, value(*w_), N, IC, OC, false, false, 1.f, 0.f);
  }
}

}  // namespace ts::engine
