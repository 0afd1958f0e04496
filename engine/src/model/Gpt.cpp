#include "trainscope/engine/model/Gpt.h"

#include "trainscope/core/model/RotaryTable.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include "trainscope/engine/loss/CrossEntropyLoss.h"
#include "trainscope/kernels/Numeric.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

double Rng::normal() {
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

void Gpt::initWeights(uint64_t seed) {
  Rng rng(seed);
  // ZeRO-partitioned weights: each tensor is drawn whole (the same stream as one rank) into a
  // buffer of its own and only this rank's part is written.
  const bool part = arena_.partitionedValues();
  std::vector<float> host(part ? 0 : static_cast<size_t>(arena_.size()), 0.f);  // padding: 0
  std::vector<float> one;
  const double std0 = 0.02;
  const double stdResid = 0.02 / std::sqrt(2.0 * config_.layers);
  using R = core::TensorRole;
  std::vector<float> quant;  // an NF4 tensor's values, quantized when drawn
  for (const auto& p : arena_.params()) {
    if (p.quantized()) quant.resize(size_t(p.numel));
    if (part && !p.quantized()) one.resize(size_t(p.numel));
    float* dst = p.quantized() ? quant.data() : part ? one.data() : host.data() + p.offset;
    const R role = p.spec.role;
    if (role == R::LoraA || role == R::LoraB) continue;  // initAdapters, from a stream of its own
    if (role == R::NormWeight) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 1.f;
    } else if (role == R::NormBias || role == R::LinearBias) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 0.f;
    } else {
      const double s = p.spec.residualProjection ? stdResid : std0;
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = static_cast<float>(rng.normal() * s);
    }
    if (p.quantized())
      arena_.setQuantized(p, quant.data());
    else if (part)
      arena_.setOwnedValuesFromHost(dst, p.offset, p.numel);
  }
  if (!part) arena_.setValuesFromHost(host.data());
  if (config_.lora.r > 0)
    initAdapters(seed);  // rounds the weights itself
  else if (part || mixed())
    arena_.roundWeights();  // partitioned: the shard's (and onWeightsChanged)
}

void Gpt::initAdapters(uint64_t seed) {
  Rng rng(seed ^ 0x4C6F5241ull);                 // "LoRA": independent of the base's stream
  const bool part = arena_.partitionedValues();  // as initWeights: this rank's part only
  std::vector<float> host(part ? 0 : static_cast<size_t>(arena_.size())), one;
  if (!part) arena_.valuesToHost(host.data());
  for (const auto& p : arena_.params()) {
    const bool a = p.spec.role == core::TensorRole::LoraA;
    if (!a && p.spec.role != core::TensorRole::LoraB) continue;
    if (part) one.resize(size_t(p.numel));
    float* dst = part ? one.data() : host.data() + p.offset;
    if (a) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.shape[1]));
      for (int64_t i = 0; i < p.numel; ++i)
        dst[i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    } else {
      std::fill(dst, dst + p.numel, 0.f);
    }
    if (part) arena_.setOwnedValuesFromHost(dst, p.offset, p.numel);
  }
  if (part) {
    arena_.roundWeights();
    return;
  }
  arena_.setValuesFromHost(host.data());
  if (mixed()) arena_.roundWeights();
}

std::map<std::string, std::vector<float>> Gpt::mergedWeights() const {
  std::map<std::string, std::vector<float>> out;
  std::vector<float> host(static_cast<size_t>(arena_.size()));
  arena_.valuesToHost(host.data());
  for (const auto& lin : linears_)
    for (const auto& ad : lin.adapters) {
      // The adapted module's own base tensor: rows [outOffset, +rows) of the linear's weight.
      const int64_t IC = lin.in(), R = ad.a->shape[0], rows = ad.b->shape[0];
      const ParamInfo* base = nullptr;
      for (const auto& p : arena_.params())
        if (p.spec.role == core::TensorRole::LinearWeight && p.spec.block == ad.layer &&
            p.spec.module == ad.a->spec.module)
          base = &p;
      std::vector<float> w = arena_.hostValues(*base);  // dequantized when NF4
      const float* A = host.data() + ad.a->offset;
      const float* Bm = host.data() + ad.b->offset;
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t i = 0; i < IC; ++i) {
          double s = 0;
          for (int64_t k = 0; k < R; ++k) s += double(Bm[o * R + k]) * A[k * IC + i];
          w[size_t(o * IC + i)] += static_cast<float>(ad.scaling * s);
        }
      out[base->name] = std::move(w);
    }
  return out;
}

namespace {
// Where each buffer of the description lives in the layers' saved-state structs.
using BlockField = Tensor& (*)(BlockActivations&);
// A stored tensor's values under its name, its int8 row scales under name + "Scale".
#define TS_SAVED(name, field)                                                  \
  {name, [](BlockActivations& a) -> Tensor& { return a.field.data; }}, {       \
    name "Scale", [](BlockActivations& a) -> Tensor& { return a.field.scale; } \
  }
const std::map<std::string, BlockField>& blockFields() {
  static const std::map<std::string, BlockField> m = {
      TS_SAVED("input", input),
      TS_SAVED("ln1", attn.in),
      {"ln1Mean", [](BlockActivations& a) -> Tensor& { return a.norm1.mean; }},
      {"ln1Rstd", [](BlockActivations& a) -> Tensor& { return a.norm1.rstd; }},
      TS_SAVED("qkv", attn.qkv),
      TS_SAVED("att", attn.att),
      TS_SAVED("attOut", attn.out),
      TS_SAVED("resid2", resid2),
      TS_SAVED("ln2", mlp.in),
      {"ln2Mean", [](BlockActivations& a) -> Tensor& { return a.norm2.mean; }},
      {"ln2Rstd", [](BlockActivations& a) -> Tensor& { return a.norm2.rstd; }},
      TS_SAVED("fcPre", mlp.pre),
      TS_SAVED("fcAct", mlp.act),
      {"fcMask", [](BlockActivations& a) -> Tensor& { return a.mlp.mask; }},
      {"fcVals", [](BlockActivations& a) -> Tensor& { return a.mlp.vals; }},
      {"qkPre", [](BlockActivations& a) -> Tensor& { return a.attn.qkPre; }},
      {"qkRstd", [](BlockActivations& a) -> Tensor& { return a.attn.qkRstd; }},
      {"attnBranch", [](BlockActivations& a) -> Tensor& { return a.attnBranch; }},
      {"attnBranchRstd", [](BlockActivations& a) -> Tensor& { return a.postAttn.rstd; }},
      {"mlpBranch", [](BlockActivations& a) -> Tensor& { return a.mlpBranch; }},
      {"mlpBranchRstd", [](BlockActivations& a) -> Tensor& { return a.postMlp.rstd; }}};
  return m;
}
#undef TS_SAVED
using GlobalField = Tensor& (*)(Activations&);
const std::map<std::string, GlobalField>& globalFields() {
  static const std::map<std::string, GlobalField> m = {
      {"tokens", [](Activations& a) -> Tensor& { return a.tokens; }},
      {"targets", [](Activations& a) -> Tensor& { return a.targets; }},
      {"residOut", [](Activations& a) -> Tensor& { return a.residOut.data; }},
      {"residOutScale", [](Activations& a) -> Tensor& { return a.residOut.scale; }},
      {"lnf", [](Activations& a) -> Tensor& { return a.lnf.data; }},
      {"lnfScale", [](Activations& a) -> Tensor& { return a.lnf.scale; }},
      {"lnfMean", [](Activations& a) -> Tensor& { return a.lnfSaved.mean; }},
      {"lnfRstd", [](Activations& a) -> Tensor& { return a.lnfSaved.rstd; }},
      {"logits", [](Activations& a) -> Tensor& { return a.logits; }},
      {"losses", [](Activations& a) -> Tensor& { return a.losses; }},
      {"ropeTable", [](Activations& a) -> Tensor& { return a.ropeTable; }},
      {"softcapGrad", [](Activations& a) -> Tensor& { return a.softcapGrad; }},
      {"ropeTableLocal", [](Activations& a) -> Tensor& { return a.ropeTableLocal; }}};
  return m;
}
DType dtypeOf(core::ElementType t) {
  switch (t) {
    case core::ElementType::I32:
      return DType::I32;
    case core::ElementType::I8:
      return DType::I8;
    case core::ElementType::BF16:
      return DType::BF16;
    case core::ElementType::F16:
      return DType::F16;
    default:
      return DType::F32;
  }
}
}  // namespace

void Gpt::allocate(int B) {
  if (B < 1) throw std::invalid_argument("micro-batch must be >= 1");
  acts_ = Activations{};
  if (ws_.kernelScratch.data()) backend_->unbindScratch(ws_.kernelScratch.f32());
  ws_ = Workspace{};
  for (Tensor* t : {&x16_, &g16_, &nf4W_, &fp8X_, &fp8G_, &fp8W_, &fp8TileScales_}) t->reset();
  acts_.B = B;
  acts_.T = config_.seq_len;
  // Every buffer of the shared description, allocated as described (the estimator sums the
  // same list, so the memory plan is exactly what the tracker measures).
  const std::map<std::string, Tensor Workspace::*> wsFields = {
      {"ones", &Workspace::ones},           {"dres", &Workspace::dres},
      {"dtmp", &Workspace::dtmp},           {"dqkv", &Workspace::dqkv},
      {"datt", &Workspace::datt},           {"dfc", &Workspace::dfc},
      {"dfc2", &Workspace::dfc2},           {"ddrop", &Workspace::ddrop},
      {"dpost", &Workspace::dpost},         {"loraDU", &Workspace::loraDU},
      {"loraX", &Workspace::loraX},         {"stream", &Workspace::stream},
      {"attUnpack", &Workspace::attUnpack}, {"kernelScratch", &Workspace::kernelScratch}};
  const std::map<std::string, Tensor*> scratch = {{"x16", &x16_},
                                                  {"g16", &g16_},
                                                  {"nf4W", &nf4W_},
                                                  {"fp8X", &fp8X_},
                                                  {"fp8G", &fp8G_},
                                                  {"fp8W", &fp8W_},
                                                  {"fp8TileScales", &fp8TileScales_}};
  core::SavedStateOptions so = config_.savedState(B);
  so.kernelThreads = backend_->scratchThreads();
  for (const auto& b : core::savedState(arch_, so)) {
    // Data-dependent buffers (the sparse nonzeros) are sized by each forward.
    Tensor t(backend_, tracker_, b.category, dtypeOf(b.type),
             b.dataDependent ? std::vector<int64_t>{0} : b.shape);
    if (b.set >= 0) {
      if (static_cast<int>(acts_.blocks.size()) <= b.set) acts_.blocks.resize(b.set + 1);
      auto& set = acts_.blocks[b.set];
      if (b.name == "loraU") {  // one per adapter of the block, by index
        if (static_cast<int>(set.lora.size()) <= b.index) set.lora.resize(b.index + 1);
        set.lora[b.index] = std::move(t);
      } else {
        blockFields().at(b.name)(set) = std::move(t);
      }
    } else if (b.name == "checkpoint") {
      acts_.checkpoints.push_back(std::move(t));
    } else if (auto g = globalFields().find(b.name); g != globalFields().end()) {
      g->second(acts_) = std::move(t);
    } else if (auto w = wsFields.find(b.name); w != wsFields.end()) {
      ws_.*(w->second) = std::move(t);
    } else {
      *scratch.at(b.name) = std::move(t);
    }
  }
  scratch_ =
      LinearScratch{&ws_.ones, &x16_,           &g16_,       &nf4W_,     &fp8X_,       &fp8G_,
                    &fp8W_,    &fp8TileScales_, &ws_.loraDU, &ws_.loraX, &ctx_.dropout};
  // Each adapter's saved u lives in the block set its layer uses.
  const int k = config_.checkpointEvery;
  for (auto& lin : linears_)
    for (auto& ad : lin.adapters) {
      const int set = k == 0 ? ad.layer : ad.layer % k;
      ad.u = &acts_.blocks[size_t(set)].lora.at(size_t(ad.index));
    }
  {
    const int64_t N = int64_t(B) * config_.seq_len;
    std::vector<float> ones(static_cast<size_t>(N), 1.f);
    backend_->copyToDevice(ws_.ones.data(), ones.data(), ones.size() * sizeof(float));
  }
  uploadRotaryTables();
  haveLoss_ = false;
  bindKernelScratch();
}

void Gpt::uploadRotaryTables() {
  ctx_.rope = ctx_.ropeLocal = nullptr;
  for (auto [t, local] : {std::pair{&acts_.ropeTable, false}, {&acts_.ropeTableLocal, true}}) {
    if (t->empty()) continue;
    const auto host = core::rotaryTableOf(arch_, local);
    backend_->copyToDevice(t->data(), host.data(), host.size() * sizeof(float));
    (local ? ctx_.ropeLocal : ctx_.rope) = t->f32();
  }
}

Gpt::~Gpt() {
  if (ws_.kernelScratch.data()) backend_->unbindScratch(ws_.kernelScratch.f32());
}

void Gpt::bindKernelScratch() {
  Tensor& s = ws_.kernelScratch;
  if (s.data()) backend_->bindScratch(s.f32(), s.shape()[1], static_cast<int>(s.shape()[0]));
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss,
                    int64_t* count) {
  if (B < 1 || B > acts_.B || T < 1 || T > config_.seq_len)
    throw std::invalid_argument("forward: batch shape exceeds the allocated activations");
  ScopedRange fr("forward", SpanCategory::Block);
  bindKernelScratch();
  const int C = config_.d_model, V = config_.vocab;
  const int N = B * T;
  ctx_.B = B;
  ctx_.T = T;
  compressor_.resetStats();
  backend_->copyToDevice(acts_.tokens.data(), tokens, sizeof(int32_t) * N);
  float* x0 = decoder_->input(ctx_, acts_);
  // valueWindow: the tensors outside the blocks are upcast only around the ops that read them
  // (a bf16 embedding reads the bf16 tables).
  if (!embedding_->bf16()) arena_.openValues(embeddingsGroup_, false);
  embedding_->forward(ctx_, x0, acts_.tokens.i32());
  arena_.closeValues(embeddingsGroup_);
  if (embedScale_ != 1.f) backend_->scale(x0, int64_t(N) * C, embedScale_);
  if (ctx_.dropout.active()) {
    ScopedRange r("dropout", SpanCategory::Elementwise);
    backend_->dropout(x0, x0, int64_t(N) * C, ctx_.dropout.p, ctx_.dropout.seed,
                      ctx_.dropout.stream(-1, 0));
  }
  // Stored (packed) saved activations: the last block's output stays on the fp32 stream and
  // the final norm's output is computed in dfc2, then both are packed.
  float* resid = compressor_.slot(acts_.residOut, ws_.stream.f32());
  decoder_->forward(ctx_, acts_, resid);
  float* lnf = compressor_.slot(acts_.lnf, ws_.dfc2.f32());
  openHeadValues();
  finalNorm_->forward(ctx_, lnf, acts_.lnfSaved, resid);
  head_->forward(ctx_, acts_.logits.f32(), lnf);
  if (!acts_.softcapGrad.empty()) {  // Gemma 2: cap tanh(logits / cap)
    ScopedRange r("softcap_fwd", SpanCategory::Elementwise);
    backend_->softcapForward(acts_.logits.f32(), acts_.softcapGrad.f32(), int64_t(N) * V,
                             static_cast<float>(arch_.finalSoftcap));
  }
  closeHeadValues();
  compressor_.storeNormInput(acts_.residOut, resid,
                             acts_.lnfSaved.mean.empty() ? nullptr : acts_.lnfSaved.mean.f32(), N,
                             C);
  compressor_.store(acts_.lnf, lnf, N, C, true);
  haveLoss_ = false;
  if (!targets) return 0.0;
  // The loss is not part of the model: cross-entropy over the logits just computed.
  const double sum = CrossEntropyLoss(backend_).forwardBackward(
      acts_.logits, acts_.targets, acts_.losses, targets, N, V, dloss, count);
  haveLoss_ = true;
  return sum;
}

void Gpt::backward() {
  if (!haveLoss_) throw std::logic_error("backward() needs a forward with targets first");
  ScopedRange br("backward", SpanCategory::Block);
  bindKernelScratch();
  const int C = config_.d_model;
  const int64_t n = ctx_.rows() * C;
  float* dres = ws_.dres.f32();
  float* dtmp = ws_.dtmp.f32();
  // dlnf = dlogits W_head; dW_head += dlogits^T lnf (W_head is wte when tied).
  const int64_t N = ctx_.rows();
  // gradWindow: the final norm's and an untied head's fp32 gradients are open for their
  // backward, the embeddings' for theirs; a tied head writes the token table's at the start,
  // so then the embeddings' stay open through the whole backward.
  const size_t embeddings = embeddingsGroup_, last = lastGroup_;
  if (tiedHead_) arena_.openGrads(embeddings);
  arena_.openGrads(last);
  openHeadValues();
  // Under 16-bit storage the final norm's output is not kept: recomputed from the exact
  // residual with forward's kernel, so the head reads what forward computed.
  const float* lnf = nullptr;
  if (acts_.lnf.empty()) {
    if (!acts_.residOut.exact())
      throw std::logic_error("the final norm's output recomputed from a packed input");
    ScopedRange r("norm_recompute", SpanCategory::Elementwise);
    finalNorm_->forward(ctx_, ws_.dfc.f32(), acts_.lnfSaved, acts_.residOut.f32());
    lnf = ws_.dfc.f32();
  } else {
    lnf = compressor_.load(acts_.lnf, ws_.dfc.f32(), N, C);
  }
  if (!acts_.softcapGrad.empty()) {
    ScopedRange r("softcap_bwd", SpanCategory::Elementwise);
    backend_->softcapBackward(acts_.logits.f32(), acts_.softcapGrad.f32(), N * config_.vocab);
  }
  head_->backward(ctx_, dtmp, acts_.logits.f32(), lnf);
  ws_.dres.zero();
  const float* lnfMean = acts_.lnfSaved.mean.empty() ? nullptr : acts_.lnfSaved.mean.f32();
  finalNorm_->backward(ctx_, dres, dtmp,
                       compressor_.loadNormInput(acts_.residOut, ws_.dfc.f32(), lnfMean, N, C),
                       acts_.lnfSaved);
  closeHeadValues();
  if (last != embeddings) arena_.closeGrads(last, true);
  decoder_->backward(ctx_, acts_);
  if (ctx_.dropout.active()) {  // through the embeddings' mask, in place (dres is done)
    ScopedRange r("dropout", SpanCategory::Elementwise);
    backend_->dropout(dres, dres, n, ctx_.dropout.p, ctx_.dropout.seed, ctx_.dropout.stream(-1, 0));
  }
  arena_.openGrads(embeddings);
  if (embedScale_ != 1.f)
    backend_->scale(dres, int64_t(ctx_.B) * ctx_.T * config_.d_model, embedScale_);
  embedding_->backward(ctx_, dres, acts_.tokens.i32());
  arena_.closeGrads(embeddings, true);
  haveLoss_ = false;
}

void Gpt::logitsRow(int b, int t, float* dst) const {
  const int64_t V = config_.vocab;
  const int64_t row = static_cast<int64_t>(b) * ctx_.T + t;
  backend_->copyToHost(dst, acts_.logits.f32() + row * V, sizeof(float) * V);
}

double Gpt::flopsPerToken(int T) const {
  return 6.0 * static_cast<double>(arena_.numParams()) +
         12.0 * config_.layers * static_cast<double>(config_.d_model) * T;
}

}  // namespace ts::engine
