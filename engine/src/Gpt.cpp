#include "trainscope/engine/Gpt.h"

#include <cmath>
#include <stdexcept>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::MemoryCategory;
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

GptConfig gptConfigFrom(const core::RunConfig& config, int vocab) {
  GptConfig g;
  g.layers = config.model.layers;
  g.heads = config.model.heads;
  g.d_model = config.model.d_model;
  g.seq_len = config.model.seq_len;
  g.vocab = vocab;
  g.relu = config.model.activation == "relu";
  g.flash = config.attention.impl == "flash";
  return g;
}

Gpt::Gpt(const GptConfig& config, kernels::Backend* backend, MemoryTracker* tracker)
    : config_(config), backend_(backend), tracker_(tracker) {
  const int64_t C = config.d_model, V = config.vocab, T = config.seq_len;
  if (config.layers < 1 || config.heads < 1 || C < 1 || V < 1 || T < 1 || C % config.heads != 0)
    throw std::invalid_argument("invalid GPT shape (layers, heads, d_model, seq_len, vocab)");
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamInfo p;
    p.name = std::move(name);
    p.numel = 1;
    for (auto d : shape) p.numel *= d;
    p.decay = shape.size() == 2;
    p.shape = std::move(shape);
    p.offset = offset;
    offset += p.numel;
    params_.push_back(std::move(p));
  };
  add("wte", {V, C});
  add("wpe", {T, C});
  for (int l = 0; l < config.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {3 * C, C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {4 * C, C});
    add(h + "mlp.c_fc.bias", {4 * C});
    add(h + "mlp.c_proj.weight", {C, 4 * C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  numParams_ = offset;
  // Pointers into params_ are stable from here on (no more push_back).
  wte_ = &params_[0];
  wpe_ = &params_[1];
  for (int l = 0; l < config.layers; ++l) {
    const ParamInfo* b = &params_[2 + 12 * l];
    blockParams_.push_back(
        {b, b + 1, b + 2, b + 3, b + 4, b + 5, b + 6, b + 7, b + 8, b + 9, b + 10, b + 11});
  }
  lnfw_ = &params_[params_.size() - 2];
  lnfb_ = &params_[params_.size() - 1];
  paramBuf_ = Tensor(backend_, tracker_, MemoryCategory::Parameters, DType::F32, {numParams_});
  gradBuf_ = Tensor(backend_, tracker_, MemoryCategory::Gradients, DType::F32, {numParams_});
  paramBuf_.zero();
  gradBuf_.zero();
}

const ParamInfo* Gpt::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

void Gpt::initWeights(uint64_t seed) {
  Rng rng(seed);
  std::vector<float> host(static_cast<size_t>(numParams_));
  const double std0 = 0.02;
  const double stdResid = 0.02 / std::sqrt(2.0 * config_.layers);
  for (const auto& p : params_) {
    float* dst = host.data() + p.offset;
    const bool isNorm = p.name.find("ln_") != std::string::npos;
    const bool isBias = p.name.size() > 5 && p.name.compare(p.name.size() - 5, 5, ".bias") == 0;
    if (isNorm) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = isBias ? 0.f : 1.f;
    } else if (isBias) {
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = 0.f;
    } else {
      const bool resid = p.name.find("c_proj.weight") != std::string::npos;
      const double s = resid ? stdResid : std0;
      for (int64_t i = 0; i < p.numel; ++i) dst[i] = static_cast<float>(rng.normal() * s);
    }
  }
  backend_->copyToDevice(paramBuf_.data(), host.data(), host.size() * sizeof(float));
}

void Gpt::zeroGrad() {
  gradBuf_.zero();
}

void Gpt::allocate(int B) {
  if (B < 1) throw std::invalid_argument("micro-batch must be >= 1");
  const int64_t T = config_.seq_len, C = config_.d_model, V = config_.vocab, NH = config_.heads;
  const int64_t N = B * T;
  auto act = [&](DType d, std::vector<int64_t> shape) {
    return Tensor(backend_, tracker_, MemoryCategory::Activations, d, std::move(shape));
  };
  auto wsT = [&](std::vector<int64_t> shape) {
    return Tensor(backend_, tracker_, MemoryCategory::Workspace, DType::F32, std::move(shape));
  };
  acts_ = Activations{};
  ws_ = Workspace{};
  acts_.B = B;
  acts_.T = static_cast<int>(T);
  acts_.tokens = act(DType::I32, {B, T});
  acts_.targets = act(DType::I32, {B, T});
  for (int l = 0; l < config_.layers; ++l) {
    BlockActivations a;
    a.input = act(DType::F32, {B, T, C});
    a.ln1 = act(DType::F32, {B, T, C});
    a.ln1Mean = act(DType::F32, {B, T});
    a.ln1Rstd = act(DType::F32, {B, T});
    a.qkv = act(DType::F32, {B, T, 3 * C});
    a.att = config_.flash ? act(DType::F32, {B, NH, T}) : act(DType::F32, {B, NH, T, T});
    a.attOut = act(DType::F32, {B, T, C});
    a.resid2 = act(DType::F32, {B, T, C});
    a.ln2 = act(DType::F32, {B, T, C});
    a.ln2Mean = act(DType::F32, {B, T});
    a.ln2Rstd = act(DType::F32, {B, T});
    a.fcPre = act(DType::F32, {B, T, 4 * C});
    a.fcAct = act(DType::F32, {B, T, 4 * C});
    acts_.blocks.push_back(std::move(a));
  }
  acts_.residOut = act(DType::F32, {B, T, C});
  acts_.lnf = act(DType::F32, {B, T, C});
  acts_.lnfMean = act(DType::F32, {B, T});
  acts_.lnfRstd = act(DType::F32, {B, T});
  acts_.logits = act(DType::F32, {B, T, V});
  acts_.losses = act(DType::F32, {B, T});

  ws_.ones = wsT({N});
  {
    std::vector<float> ones(static_cast<size_t>(N), 1.f);
    backend_->copyToDevice(ws_.ones.data(), ones.data(), ones.size() * sizeof(float));
  }
  ws_.dres = wsT({B, T, C});
  ws_.dtmp = wsT({B, T, C});
  ws_.dqkv = wsT({B, T, 3 * C});
  if (!config_.flash) ws_.datt = wsT({B, NH, T, T});
  ws_.dfc = wsT({B, T, 4 * C});
  ws_.dfc2 = wsT({B, T, 4 * C});
  haveLoss_ = false;
}

void Gpt::linearForward(float* out, const float* inp, const ParamInfo& w, const ParamInfo& b, int N,
                        int OC, int IC) {
  ScopedRange r("linear_fwd", SpanCategory::Gemm, 2.0 * N * OC * IC);
  // out = 1 * b (broadcast as a rank-1 GEMM), then out += inp W^T.
  backend_->matmul(out, ws_.ones.f32(), param(b), N, OC, 1, false, false, 1.f, 0.f);
  backend_->matmul(out, inp, param(w), N, OC, IC, false, true, 1.f, 1.f);
}

void Gpt::linearBackward(float* dinp, const float* dout, const float* inp, const ParamInfo& w,
                         const ParamInfo& b, int N, int OC, int IC) {
  ScopedRange r("linear_bwd", SpanCategory::Gemm, 4.0 * N * OC * IC);
  // dW += dout^T inp; db += 1^T dout; dinp = dout W.
  backend_->matmul(grad(w), dout, inp, OC, IC, N, true, false, 1.f, 1.f);
  backend_->matmul(grad(b), ws_.ones.f32(), dout, 1, OC, N, false, false, 1.f, 1.f);
  if (dinp) backend_->matmul(dinp, dout, param(w), N, IC, OC, false, false, 1.f, 0.f);
}

double Gpt::forward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss,
                    int64_t* count) {
  if (B < 1 || B > acts_.B || T < 1 || T > config_.seq_len)
    throw std::invalid_argument("forward: batch shape exceeds the allocated activations");
  ScopedRange fr("forward", SpanCategory::Block);
  const int C = config_.d_model, NH = config_.heads, V = config_.vocab;
  const int N = B * T;
  curB_ = B;
  curT_ = T;
  backend_->copyToDevice(acts_.tokens.data(), tokens, sizeof(int32_t) * N);
  {
    ScopedRange r("embedding_fwd", SpanCategory::Elementwise);
    backend_->embeddingForward(acts_.blocks[0].input.f32(), acts_.tokens.i32(), param(*wte_),
                               param(*wpe_), B, T, C);
  }
  for (int l = 0; l < config_.layers; ++l) {
    ScopedRange br("block_fwd", SpanCategory::Block);
    auto& a = acts_.blocks[l];
    const auto& p = blockParams_[l];
    float* out = l + 1 < config_.layers ? acts_.blocks[l + 1].input.f32() : acts_.residOut.f32();
    {
      ScopedRange r("layernorm_fwd", SpanCategory::Norm);
      backend_->layernormForward(a.ln1.f32(), a.ln1Mean.f32(), a.ln1Rstd.f32(), a.input.f32(),
                                 param(*p.ln1w), param(*p.ln1b), N, C, 1e-5f);
    }
    linearForward(a.qkv.f32(), a.ln1.f32(), *p.qkvw, *p.qkvb, N, 3 * C, C);
    {
      ScopedRange r("attention_fwd", SpanCategory::Attention, 4.0 * B * T * T * C);
      if (config_.flash)
        backend_->flashAttentionForward(a.attOut.f32(), a.att.f32(), a.qkv.f32(), B, T, C, NH);
      else
        backend_->attentionForward(a.attOut.f32(), a.att.f32(), a.qkv.f32(), B, T, C, NH);
    }
    linearForward(ws_.dtmp.f32(), a.attOut.f32(), *p.attprojw, *p.attprojb, N, C, C);
    {
      ScopedRange r("residual_fwd", SpanCategory::Elementwise);
      backend_->residualForward(a.resid2.f32(), a.input.f32(), ws_.dtmp.f32(), int64_t(N) * C);
    }
    {
      ScopedRange r("layernorm_fwd", SpanCategory::Norm);
      backend_->layernormForward(a.ln2.f32(), a.ln2Mean.f32(), a.ln2Rstd.f32(), a.resid2.f32(),
                                 param(*p.ln2w), param(*p.ln2b), N, C, 1e-5f);
    }
    linearForward(a.fcPre.f32(), a.ln2.f32(), *p.fcw, *p.fcb, N, 4 * C, C);
    {
      ScopedRange r(config_.relu ? "relu_fwd" : "gelu_fwd", SpanCategory::Elementwise);
      if (config_.relu)
        backend_->reluForward(a.fcAct.f32(), a.fcPre.f32(), int64_t(N) * 4 * C);
      else
        backend_->geluForward(a.fcAct.f32(), a.fcPre.f32(), int64_t(N) * 4 * C);
    }
    linearForward(ws_.dtmp.f32(), a.fcAct.f32(), *p.fcprojw, *p.fcprojb, N, C, 4 * C);
    {
      ScopedRange r("residual_fwd", SpanCategory::Elementwise);
      backend_->residualForward(out, a.resid2.f32(), ws_.dtmp.f32(), int64_t(N) * C);
    }
  }
  {
    ScopedRange r("layernorm_fwd", SpanCategory::Norm);
    backend_->layernormForward(acts_.lnf.f32(), acts_.lnfMean.f32(), acts_.lnfRstd.f32(),
                               acts_.residOut.f32(), param(*lnfw_), param(*lnfb_), N, C, 1e-5f);
  }
  {
    ScopedRange r("lm_head_fwd", SpanCategory::Gemm, 2.0 * N * V * C);
    backend_->matmul(acts_.logits.f32(), acts_.lnf.f32(), param(*wte_), N, V, C, false, true, 1.f,
                     0.f);
  }
  haveLoss_ = false;
  if (!targets) return 0.0;
  backend_->copyToDevice(acts_.targets.data(), targets, sizeof(int32_t) * N);
  {
    ScopedRange r("cross_entropy", SpanCategory::Elementwise);
    backend_->crossEntropyForwardBackward(acts_.losses.f32(), acts_.logits.f32(),
                                          acts_.logits.f32(), acts_.targets.i32(), N, V, dloss);
  }
  std::vector<float> losses(static_cast<size_t>(N));
  backend_->copyToHost(losses.data(), acts_.losses.f32(), sizeof(float) * N);
  double sum = 0.0;
  int64_t n = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) {
      sum += losses[i];
      ++n;
    }
  }
  if (count) *count = n;
  haveLoss_ = true;
  return sum;
}

void Gpt::backward() {
  if (!haveLoss_) throw std::logic_error("backward() needs a forward with targets first");
  ScopedRange br("backward", SpanCategory::Block);
  const int B = curB_, T = curT_, C = config_.d_model, NH = config_.heads, V = config_.vocab;
  const int N = B * T;
  float* dres = ws_.dres.f32();
  float* dtmp = ws_.dtmp.f32();
  {
    ScopedRange r("lm_head_bwd", SpanCategory::Gemm, 4.0 * N * V * C);
    // dlnf = dlogits wte; dwte += dlogits^T lnf.
    backend_->matmul(dtmp, acts_.logits.f32(), param(*wte_), N, C, V, false, false, 1.f, 0.f);
    backend_->matmul(grad(*wte_), acts_.logits.f32(), acts_.lnf.f32(), V, C, N, true, false, 1.f,
                     1.f);
  }
  {
    ScopedRange r("layernorm_bwd", SpanCategory::Norm);
    ws_.dres.zero();
    backend_->layernormBackward(dres, grad(*lnfw_), grad(*lnfb_), dtmp, acts_.residOut.f32(),
                                param(*lnfw_), acts_.lnfMean.f32(), acts_.lnfRstd.f32(), N, C);
  }
  for (int l = config_.layers - 1; l >= 0; --l) {
    ScopedRange blr("block_bwd", SpanCategory::Block);
    auto& a = acts_.blocks[l];
    const auto& p = blockParams_[l];
    // MLP branch: out = resid2 + c_proj(act(c_fc(ln_2(resid2)))).
    linearBackward(ws_.dfc.f32(), dres, a.fcAct.f32(), *p.fcprojw, *p.fcprojb, N, C, 4 * C);
    {
      ScopedRange r(config_.relu ? "relu_bwd" : "gelu_bwd", SpanCategory::Elementwise);
      if (config_.relu)
        backend_->reluBackward(ws_.dfc2.f32(), a.fcAct.f32(), ws_.dfc.f32(), int64_t(N) * 4 * C);
      else
        backend_->geluBackward(ws_.dfc2.f32(), a.fcPre.f32(), ws_.dfc.f32(), int64_t(N) * 4 * C);
    }
    linearBackward(dtmp, ws_.dfc2.f32(), a.ln2.f32(), *p.fcw, *p.fcb, N, 4 * C, C);
    {
      ScopedRange r("layernorm_bwd", SpanCategory::Norm);
      backend_->layernormBackward(dres, grad(*p.ln2w), grad(*p.ln2b), dtmp, a.resid2.f32(),
                                  param(*p.ln2w), a.ln2Mean.f32(), a.ln2Rstd.f32(), N, C);
    }
    // Attention branch: resid2 = input + c_proj(attn(c_attn(ln_1(input)))).
    linearBackward(dtmp, dres, a.attOut.f32(), *p.attprojw, *p.attprojb, N, C, C);
    {
      ScopedRange r("attention_bwd", SpanCategory::Attention, 8.0 * B * T * T * C);
      if (config_.flash)
        backend_->flashAttentionBackward(ws_.dqkv.f32(), dtmp, a.attOut.f32(), a.att.f32(),
                                         a.qkv.f32(), B, T, C, NH);
      else
        backend_->attentionBackward(ws_.dqkv.f32(), ws_.datt.f32(), dtmp, a.qkv.f32(), a.att.f32(),
                                    B, T, C, NH);
    }
    linearBackward(dtmp, ws_.dqkv.f32(), a.ln1.f32(), *p.qkvw, *p.qkvb, N, 3 * C, C);
    {
      ScopedRange r("layernorm_bwd", SpanCategory::Norm);
      backend_->layernormBackward(dres, grad(*p.ln1w), grad(*p.ln1b), dtmp, a.input.f32(),
                                  param(*p.ln1w), a.ln1Mean.f32(), a.ln1Rstd.f32(), N, C);
    }
  }
  {
    ScopedRange r("embedding_bwd", SpanCategory::Elementwise);
    backend_->embeddingBackward(grad(*wte_), grad(*wpe_), dres, acts_.tokens.i32(), B, T, C);
  }
  haveLoss_ = false;
}

void Gpt::logitsRow(int b, int t, float* dst) const {
  const int64_t V = config_.vocab;
  const int64_t row = static_cast<int64_t>(b) * curT_ + t;
  backend_->copyToHost(dst, acts_.logits.f32() + row * V, sizeof(float) * V);
}

double Gpt::flopsPerToken(int T) const {
  return 6.0 * static_cast<double>(numParams_) +
         12.0 * config_.layers * static_cast<double>(config_.d_model) * T;
}

}  // namespace ts::engine
