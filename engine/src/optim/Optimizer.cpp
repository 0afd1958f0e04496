#include "trainscope/engine/optim/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using core::MemoryCategory;
using profiler::ScopedRange;
using profiler::SpanCategory;

// Mixed precision (16-bit working weights): the fp32 master copy the update is applied to,
// counted as optimizer_state (ZeRO accounting); empty in fp32.
// Of the trainable tensors only (gradient space, ParamArena.h).
Tensor makeMaster(ParamArena& arena, kernels::Backend* backend, MemoryTracker* tracker,
                  const OptimizerShard& sh) {
  // A shard over frozen tensors keeps an fp32 master in fp32 too: the shard's trainable values
  // are not one slice of the values, and the caller gathers the new ones from here.
  const bool frozenShard = sh.sharded() && !arena.allTrainable();
  if (!frozenShard && (!arena.mixed() || !arena.options().masterWeights)) return {};
  if (sh.sharded()) {
    Tensor t(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {sh.hi - sh.lo});
    if (arena.allTrainable()) {  // the shard of gradient space is the shard of the values
      backend->copyOnDevice(t.f32(), arena.values().f32() + sh.lo,
                            (sh.hi - sh.lo) * int64_t(sizeof(float)));
      return t;
    }
    t.zero();  // padding
    for (const auto& p : arena.params()) {
      if (!p.trainable()) continue;
      const int64_t a = std::max(p.gradOffset, sh.lo), b = std::min(p.gradOffset + p.numel, sh.hi);
      if (b > a)
        backend->copyOnDevice(t.f32() + (a - sh.lo),
                              arena.values().f32() + p.offset + (a - p.gradOffset),
                              (b - a) * int64_t(sizeof(float)));
    }
    return t;
  }
  Tensor t(backend, tracker, MemoryCategory::OptimizerState, DType::F32, {arena.gradSize()});
  t.zero();  // padding
  // The fp32 compute copy holds the (16-bit representable) initial weights.
  arena.copyTrainableTo(t.f32());
  return t;
}

// The part [a, b) of tensor p inside the shard (gradient-space offsets); empty when a >= b.
struct Piece {
  int64_t a = 0, b = 0;
  int64_t in() const { return b - a; }
};
Piece pieceOf(const ParamInfo& p, const OptimizerShard& sh) {
  if (!sh.sharded()) return {p.gradOffset, p.gradOffset + p.numel};
  return {std::max(p.gradOffset, sh.lo), std::min(p.gradOffset + p.numel, sh.hi)};
}
// Pointers of a piece: the weights it updates (master or values), its gradient, its state
// offset (into shard-length state buffers).
float* targetOf(ParamArena& arena, Tensor& master, const ParamInfo& p, const Piece& q,
                const OptimizerShard& sh) {
  if (!master.empty()) return master.f32() + (q.a - (sh.sharded() ? sh.lo : 0));
  return arena.value(p) + (q.a - p.gradOffset);
}
float* gradOf(ParamArena& arena, const ParamInfo& p, const Piece& q) {
  return arena.grad(p) + (q.a - p.gradOffset);
}
int64_t stateOffset(const Piece& q, const OptimizerShard& sh) {
  return q.a - (sh.sharded() ? sh.lo : 0);
}
int64_t stateLength(const ParamArena& arena, const OptimizerShard& sh) {
  return sh.sharded() ? sh.hi - sh.lo : arena.gradSize();
}
// After the update: the stored weights follow the master (a shard: only its range; the caller
// gathers the rest).
void publish(ParamArena& arena, Tensor& master, bool pure, const OptimizerShard& sh) {
  if (sh.sharded() && !arena.allTrainable()) return;  // the caller gathers the master
  if (sh.sharded()) {
    if (!master.empty()) arena.setWeightsRange(master.f32(), sh.lo, sh.hi);
    if (pure) arena.roundWeightsRange(sh.lo, sh.hi);
    return;
  }
  if (!master.empty()) arena.setWeightsFrom(master.f32());
  if (pure) arena.roundWeights();
}

// Runs f(p) for every trainable tensor in arena order with its fp32 gradients readable (under
// ParamArena's gradWindow they exist only while the tensor is visited, scaled by the pending
// loss-scale and clipping factor). updatesValues (pure_bf16: the update is applied to the fp32
// compute copy): under the arena's valueWindow a tensor's copy exists for its update and is
// rounded into the 16-bit weights right after.
template <class F>
void forEachTrainable(ParamArena& arena, F f, bool updatesValues = false) {
  arena.forEachGradTensor(f, updatesValues);
}

// pure_bf16 (no master): optimizer state is stored in bf16 as well.
bool pureBf16(const ParamArena& arena) {
  return arena.options().pureBf16();
}
DType stateType(const ParamArena& arena) {
  return pureBf16(arena) ? DType::BF16 : DType::F32;
}
// Runs `update(m, v, offset, count)` on fp32 views of bf16 state in chunks of kChunk values: the
// state is upcast, updated by the backend's fp32 kernel, and rounded back (RNE), all on the
// backend. The chunk buffers are the only fp32 state: 2 x 16 KiB, not model-sized.
constexpr int64_t kChunk = 4096;
struct ChunkScratch {
  Tensor m, v;
};
// Device buffers for the chunks, uncounted: a fixed 32 KiB that the estimator leaves out, as it
// left out the stack buffers these replace (a device kernel cannot read host stack memory).
ChunkScratch makeChunkScratch(const ParamArena& arena, kernels::Backend* backend) {
  if (!pureBf16(arena)) return {};
  return {Tensor(backend, nullptr, MemoryCategory::Workspace, DType::F32, {kChunk}),
          Tensor(backend, nullptr, MemoryCategory::Workspace, DType::F32, {kChunk})};
}
template <class Update>
void chunkedBf16(kernels::Backend& be, ChunkScratch& scratch, Tensor* m, Tensor* v, int64_t offset,
                 int64_t n, Update update) {
  float* mf = scratch.m.f32();
  float* vf = scratch.v.f32();
  auto* m16 = m ? static_cast<uint16_t*>(m->data()) + offset : nullptr;
  auto* v16 = v ? static_cast<uint16_t*>(v->data()) + offset : nullptr;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    if (m16) be.bf16ToFloat(m16 + c, mf, len);
    if (v16) be.bf16ToFloat(v16 + c, vf, len);
    update(mf, v16 ? vf : nullptr, c, len);
    if (m16) be.floatToBf16(mf, m16 + c, len);
    if (v16) be.floatToBf16(vf, v16 + c, len);
  }
}

// optimizer.betas, PyTorch's defaults where the config leaves them out.
std::pair<float, float> adamBetas(const core::OptimizerConfig& c) {
  return {static_cast<float>(c.betas.size() > 0 ? c.betas[0] : 0.9),
          static_cast<float>(c.betas.size() > 1 ? c.betas[1] : 0.999)};
}

class AdamW final : public Optimizer {
 public:
  AdamW(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
        MemoryTracker* tracker, OptimizerShard shard)
      : config_(c), arena_(arena), backend_(backend), shard_(shard) {
    m_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(arena),
                {stateLength(arena, shard)});
    v_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(arena),
                {stateLength(arena, shard)});
    m_.zero();
    v_.zero();
    master_ = makeMaster(arena, backend, tracker, shard);
    scratch_ = makeChunkScratch(arena, backend);
  }
  void step(float lr) override {
    ScopedRange r("adamw", SpanCategory::Optimizer);
    ++t_;
    // Not a structured binding: the lambda below captures them (clang < 16 cannot).
    const std::pair<float, float> betas = adamBetas(config_);
    const float b1 = betas.first, b2 = betas.second;
    const float eps = static_cast<float>(config_.eps);
    const bool pure = pureBf16(arena_);
    forEachTrainable(
        arena_,
        [&](const ParamInfo& p) {
          const Piece q = pieceOf(p, shard_);
          if (q.in() <= 0) return;  // another rank's
          const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
          const int64_t so = stateOffset(q, shard_);
          if (pure) {
            // The fp32 compute copy holds the bf16 weights exactly; updated, then rounded below.
            float* w = targetOf(arena_, master_, p, q, shard_);
            const float* g = gradOf(arena_, p, q);
            chunkedBf16(*backend_, scratch_, &m_, &v_, so, q.in(),
                        [&](float* m, float* v, int64_t c, int64_t n) {
                          backend_->adamwUpdate(w + c, g + c, m, v, n, lr, b1, b2, eps, wd, t_);
                        });
          } else {
            backend_->adamwUpdate(targetOf(arena_, master_, p, q, shard_), gradOf(arena_, p, q),
                                  m_.f32() + so, v_.f32() + so, q.in(), lr, b1, b2, eps, wd, t_);
          }
        },
        pure);
    publish(arena_, master_, pure, shard_);
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (!master_.empty()) return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}, {"master", &master_}};
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  }
  std::string name() const override { return "adamw"; }
  const Tensor* shardMaster() const override { return master_.empty() ? nullptr : &master_; }

 private:
  core::OptimizerConfig config_;
  ParamArena& arena_;
  kernels::Backend* backend_;
  OptimizerShard shard_;
  Tensor m_, v_, master_;
  ChunkScratch scratch_;
  int64_t t_ = 0;
};

// 8-bit AdamW (optimizer.state_bits 8; bitsandbytes' AdamW8bit): tensors of at least 4096
// elements keep m and v as uint8 codes into the dynamic maps with an fp32 absmax per block of
// 256; smaller tensors keep fp32 state (bitsandbytes' min_8bit_size). The state is compact (only
// the tensors' own elements, in arena order). A ZeRO shard keeps the part of it for its piece of
// each tensor: the ZeRO layout starts every tensor on a block (core::ZeroLayout's tensorAlign),
// so a shard boundary never cuts a block and the ranks' buffers in rank order are one rank's.
class AdamW8 final : public Optimizer {
 public:
  static constexpr int kBlock = int(core::kAdam8Block);
  AdamW8(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
         MemoryTracker* tracker, OptimizerShard shard)
      : config_(c), arena_(arena), backend_(backend), shard_(shard) {
    if (pureBf16(arena))
      throw std::invalid_argument(
          "optimizer.state_bits 8 keeps an fp32 master; it does not combine with pure_bf16");
    layout_ = adam8Layout(arena, shard);
    const int64_t big = layout_.codes, blocks = layout_.blocks, small = layout_.small;
    const auto cat = MemoryCategory::OptimizerState;
    qm_ = Tensor(backend, tracker, cat, DType::I8, {big});
    qv_ = Tensor(backend, tracker, cat, DType::I8, {big});
    am_ = Tensor(backend, tracker, cat, DType::F32, {blocks});
    av_ = Tensor(backend, tracker, cat, DType::F32, {blocks});
    m_ = Tensor(backend, tracker, cat, DType::F32, {small});
    v_ = Tensor(backend, tracker, cat, DType::F32, {small});
    // Zero state: code of 0.0 in each map, absmax 0 (dequantizes to 0 either way).
    const auto ms = kernels::dynamicMap(true), mu = kernels::dynamicMap(false);
    backend->fill(qm_.data(), kernels::nearestCode(ms.data(), 0.f), big);
    backend->fill(qv_.data(), kernels::nearestCode(mu.data(), 0.f), big);
    for (Tensor* t : {&am_, &av_, &m_, &v_}) t->zero();
    // The two 256-entry maps: 2 KiB, uncounted (the estimator leaves them out, as bitsandbytes'
    // accounting does).
    mapM_ = Tensor(backend, nullptr, MemoryCategory::Workspace, DType::F32, {256});
    mapV_ = Tensor(backend, nullptr, MemoryCategory::Workspace, DType::F32, {256});
    mapM_.copyFromHost(ms.data());
    mapV_.copyFromHost(mu.data());
    master_ = makeMaster(arena, backend, tracker, shard);
  }
  void step(float lr) override {
    ScopedRange r("adamw_8bit", SpanCategory::Optimizer);
    ++t_;
    // Not a structured binding: the lambda below captures them (clang < 16 cannot).
    const std::pair<float, float> betas = adamBetas(config_);
    const float b1 = betas.first, b2 = betas.second;
    const float eps = static_cast<float>(config_.eps);
    size_t next = 0;  // the layout's pieces are in arena order, as forEachTrainable visits
    forEachTrainable(arena_, [&](const ParamInfo& p) {
      const Adam8Layout::Piece& s = layout_.pieces.at(next++);
      if (s.p != &p) throw std::logic_error("8-bit AdamW: state pieces out of arena order");
      const Piece q{s.a, s.b};
      if (q.in() <= 0) return;  // another rank's
      const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
      float* w = targetOf(arena_, master_, p, q, shard_);
      const float* g = gradOf(arena_, p, q);
      if (s.big) {
        auto* qm = static_cast<uint8_t*>(qm_.data()) + s.q;
        auto* qv = static_cast<uint8_t*>(qv_.data()) + s.q;
        backend_->adamw8bitUpdate(w, g, qm, qv, am_.f32() + s.block, av_.f32() + s.block,
                                  mapM_.f32(), mapV_.f32(), q.in(), kBlock, lr, b1, b2, eps, wd,
                                  t_);
      } else {
        backend_->adamwUpdate(w, g, m_.f32() + s.f, v_.f32() + s.f, q.in(), lr, b1, b2, eps, wd,
                              t_);
      }
    });
    publish(arena_, master_, false, shard_);
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    std::vector<std::pair<std::string, Tensor*>> s = {
        {"exp_avg.codes", &qm_},     {"exp_avg.absmax", &am_}, {"exp_avg_sq.codes", &qv_},
        {"exp_avg_sq.absmax", &av_}, {"exp_avg.fp32", &m_},    {"exp_avg_sq.fp32", &v_}};
    if (!master_.empty()) s.push_back({"master", &master_});
    return s;
  }
  std::string name() const override { return "adamw8bit"; }
  const Tensor* shardMaster() const override { return master_.empty() ? nullptr : &master_; }
  std::optional<CompactSlice> compactSlice(const std::string& name) const override {
    const auto dot = name.find('.');
    if (dot == std::string::npos) return std::nullopt;  // the master: gradient space
    const std::string kind = name.substr(dot + 1);
    return kind == "codes"    ? layout_.codesSlice
           : kind == "absmax" ? layout_.absmaxSlice
                              : layout_.fp32Slice;
  }

 private:
  core::OptimizerConfig config_;
  ParamArena& arena_;
  kernels::Backend* backend_;
  OptimizerShard shard_;
  Adam8Layout layout_;
  Tensor qm_, qv_, am_, av_, m_, v_, mapM_, mapV_, master_;
  int64_t t_ = 0;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
      MemoryTracker* tracker, OptimizerShard shard)
      : config_(c), arena_(arena), backend_(backend), shard_(shard) {
    buf_ = Tensor(backend, tracker, MemoryCategory::OptimizerState, stateType(arena),
                  {stateLength(arena, shard)});
    buf_.zero();
    master_ = makeMaster(arena, backend, tracker, shard);
    scratch_ = makeChunkScratch(arena, backend);
  }
  void step(float lr) override {
    ScopedRange r("sgd", SpanCategory::Optimizer);
    ++t_;
    const float mom = static_cast<float>(config_.momentum);
    const bool pure = pureBf16(arena_);
    forEachTrainable(
        arena_,
        [&](const ParamInfo& p) {
          const Piece q = pieceOf(p, shard_);
          if (q.in() <= 0) return;  // another rank's
          const float wd = p.decay ? static_cast<float>(config_.weight_decay) : 0.f;
          const int64_t so = stateOffset(q, shard_);
          if (pure) {
            float* w = targetOf(arena_, master_, p, q, shard_);
            const float* g = gradOf(arena_, p, q);
            chunkedBf16(*backend_, scratch_, &buf_, nullptr, so, q.in(),
                        [&](float* m, float*, int64_t c, int64_t n) {
                          backend_->sgdUpdate(w + c, g + c, m, n, lr, mom, wd);
                        });
          } else {
            backend_->sgdUpdate(targetOf(arena_, master_, p, q, shard_), gradOf(arena_, p, q),
                                buf_.f32() + so, q.in(), lr, mom, wd);
          }
        },
        pure);
    publish(arena_, master_, pure, shard_);
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t n) override { t_ = n; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (!master_.empty()) return {{"momentum_buffer", &buf_}, {"master", &master_}};
    return {{"momentum_buffer", &buf_}};
  }
  std::string name() const override { return "sgd"; }
  const Tensor* shardMaster() const override { return master_.empty() ? nullptr : &master_; }

 private:
  core::OptimizerConfig config_;
  ParamArena& arena_;
  kernels::Backend* backend_;
  OptimizerShard shard_;
  Tensor buf_, master_;
  ChunkScratch scratch_;
  int64_t t_ = 0;
};

}  // namespace

Adam8Layout adam8Layout(const ParamArena& arena, OptimizerShard shard) {
  constexpr int64_t kBlock = core::kAdam8Block;
  auto blocksOf = [](int64_t n) { return (n + kBlock - 1) / kBlock; };
  Adam8Layout l;
  for (const auto& p : arena.params()) {
    if (!p.trainable()) continue;
    const Piece q = pieceOf(p, shard);
    Adam8Layout::Piece piece{
        &p, q.a, std::max(q.a, q.b), p.numel >= core::kAdam8Min, l.codes, l.blocks, l.small};
    const int64_t in = piece.b - piece.a;
    // Elements of the tensor that ranks before this one keep.
    const int64_t before =
        shard.sharded() ? std::clamp(shard.lo - p.gradOffset, int64_t(0), p.numel) : 0;
    if (piece.big) {
      if (in > 0 && ((q.a - p.gradOffset) % kBlock != 0 ||
                     (q.b != p.gradOffset + p.numel && (q.b - p.gradOffset) % kBlock != 0)))
        throw std::logic_error("8-bit AdamW: the shard [" + std::to_string(shard.lo) + ", " +
                               std::to_string(shard.hi) + ") cuts a block of '" + p.name +
                               "' (the arena was not built with core::ZeroLayout's tensorAlign)");
      l.codes += in;
      l.blocks += blocksOf(in);
      l.codesSlice.offset += before;
      l.codesSlice.total += p.numel;
      l.absmaxSlice.offset += blocksOf(before);
      l.absmaxSlice.total += blocksOf(p.numel);
    } else {
      l.small += in;
      l.fp32Slice.offset += before;
      l.fp32Slice.total += p.numel;
    }
    l.pieces.push_back(piece);
  }
  return l;
}

std::unique_ptr<Optimizer> makeOptimizer(const core::OptimizerConfig& config, ParamArena& arena,
                                         kernels::Backend* backend, MemoryTracker* tracker,
                                         OptimizerShard shard) {
  if (config.type == "adamw" && config.state_bits == 8)
    return std::make_unique<AdamW8>(config, arena, backend, tracker, shard);
  if (config.state_bits != 32)
    throw std::invalid_argument("optimizer.state_bits " + std::to_string(config.state_bits) +
                                " needs optimizer.type adamw (8-bit AdamW); " + config.type +
                                " keeps 32-bit state");
  if (config.type == "adamw")
    return std::make_unique<AdamW>(config, arena, backend, tracker, shard);
  if (config.type == "sgd") return std::make_unique<Sgd>(config, arena, backend, tracker, shard);
  throw std::invalid_argument("optimizer.type '" + config.type + "' is not one of adamw, sgd");
}

double clipGradNorm(ParamArena& arena, kernels::Backend* backend, double maxNorm) {
  ScopedRange r("grad_norm", SpanCategory::Optimizer);
  (void)backend;
  // The gradient buffer holds exactly the trainable tensors (padding is zero).
  const double norm = std::sqrt(arena.gradSumSquares());
  if (maxNorm > 0 && std::isfinite(norm) && norm > maxNorm)
    arena.scaleGrads(static_cast<float>(maxNorm / (norm + 1e-6)));
  return norm;
}

}  // namespace ts::engine
