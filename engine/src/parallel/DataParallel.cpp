#include "trainscope/engine/parallel/DataParallel.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/engine/optim/OffloadStore.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::MemoryCategory;
using core::MemoryTier;
using profiler::ScopedRange;
using profiler::SpanCategory;

DataParallel::DataParallel(Communicator* comm, ParamArena* arena, kernels::Backend* backend,
                           MemoryTracker* tracker, int stage)
    : comm_(comm), arena_(arena), backend_(backend), tracker_(tracker), stage_(stage) {
  const int N = comm_->size(), r = comm_->rank();
  if (stage_ < 0 || stage_ > 3) throw std::invalid_argument("ZeRO stage must be 0..3");
  if (arena_->gradWindow() || arena_->valueWindow())
    throw std::logic_error(
        "data parallel keeps fp32 gradient buckets and shards the fp32 values: build the model "
        "without the gradient and value windows (core::gradWindowOf, valueWindowOf)");
  if (stage_ >= 1 && !arena_->allTrainable() && arena_->options().pureBf16())
    throw std::invalid_argument(
        "pure_bf16 with frozen tensors keeps no master to shard: use "
        "precision.policy bf16 with parallel.zero_stage >= 1");
  if (stage_ >= 1 && (arena_->gradSize() % (int64_t(N) * core::kZeroAlign) != 0 ||
                      arena_->size() % (int64_t(N) * core::kZeroAlign) != 0))
    throw std::logic_error("the arena was not built with the ZeRO layout for " + std::to_string(N) +
                           " ranks (core/ZeroLayout.h)");
  if (stage_ >= 2 && !backend_->discard(arena_->grads().data(), 0))
    throw std::invalid_argument("parallel.zero_stage " + std::to_string(stage_) +
                                " needs a backend that can give pages " + "of a buffer back (" +
                                backend_->name() +
                                " cannot here; cuda needs the driver's virtual "
                                "memory management): use zero_stage 0 or 1");
  if (stage_ >= 1) {
    std::tie(lo_, hi_) = core::zeroShard(arena_->gradSize(), N, r);
    std::tie(vlo_, vhi_) = core::zeroShard(arena_->size(), N, r);
  } else {
    lo_ = 0;
    hi_ = arena_->gradSize();
    vlo_ = 0;
    vhi_ = arena_->size();
  }
  int64_t maxOwned = 0;
  for (const auto& pg : arena_->groups()) {
    Group g;
    g.block = pg.block;
    g.lo = pg.gradOffset;
    g.hi = pg.gradOffset + pg.gradNumel;
    g.vlo = pg.offset;
    g.vhi = pg.offset + pg.numel;
    groups_.push_back(std::move(g));
    maxOwned = std::max(maxOwned, ownedIn(groups_.back()));
  }
  const bool mixed = arena_->mixed();
  const auto gradCat = mixed ? MemoryCategory::Workspace : MemoryCategory::Gradients;
  if (stage_ >= 2) {
    // Gradients: only the shard stays; a block's other pages live from its backward to its
    // reduce-scatter. The 16-bit copy is only ever touched on the shard. (A partitioned arena
    // never counted the rest.)
    const bool track = !arena_->partitionedGrads();
    for (auto& g : groups_) {
      discardOutside(arena_->grads().data(), 4, g, gradCat, false, track);
      if (mixed)
        discardOutside(arena_->grads16().data(), 2, g, MemoryCategory::Gradients, false, track);
    }
  }
  if (stage_ >= 1)  // the reduce-scatter's output (stage 1 reduce-scatters too: 2Ψ, not 3Ψ)
    scratch_ = Tensor(backend_, tracker_, MemoryCategory::Workspace, DType::F32,
                      {std::max<int64_t>(1, maxOwned)});
  if (stage_ >= 3) {
    if (arena_->partitionedValues()) {
      // Only the shard was ever written (initialization and loads are partitioned).
      for (auto& g : groups_) g.gathered = false;
    } else {
      for (auto& g : groups_) release(g);
    }
  }
}

DataParallel::~DataParallel() {
  // The parameter file's reads and writes land before their buffers go.
  if (paramStore_) try {
      paramStore_->waitAll();
    } catch (...) {
    }
  for (auto& g : groups_) {
    unstage(g.readBuf);
    unstage(g.writeBuf);
  }
  // Nothing may still write into the arena once it is gone.
  if (scatter_) try {
      scatter_->wait();
    } catch (...) {
    }
  for (auto& p : pending_)
    if (p) try {
        p->wait();
      } catch (...) {
      }
  for (auto& g : groups_)
    if (g.pendingGather) try {
        g.pendingGather->wait();
      } catch (...) {
      }
}

OptimizerShard DataParallel::optimizerShard() const {
  if (stage_ == 0) return {};
  return {lo_, hi_};
}

int64_t DataParallel::ownedIn(const Group& g, bool values) const {
  const int64_t a = values ? g.vlo : g.lo, b = values ? g.vhi : g.hi;
  return std::max<int64_t>(0, std::min(b, values ? vhi_ : hi_) - std::max(a, values ? vlo_ : lo_));
}

std::vector<int64_t> DataParallel::countsOf(const Group& g, bool values) const {
  const int N = comm_->size();
  const int64_t ga = values ? g.vlo : g.lo, gb = values ? g.vhi : g.hi;
  std::vector<int64_t> counts(static_cast<size_t>(N));
  for (int r = 0; r < N; ++r) {
    const auto [a, b] = core::zeroShard(values ? arena_->size() : arena_->gradSize(), N, r);
    counts[size_t(r)] = std::max<int64_t>(0, std::min(gb, b) - std::max(ga, a));
  }
  return counts;
}

// The parts of g outside the shard: [g.lo, min(g.hi, lo)) and [max(g.lo, hi), g.hi), in gradient
// or value space (either may be empty).
std::array<std::pair<int64_t, int64_t>, 2> DataParallel::outside(const Group& g,
                                                                 bool values) const {
  const int64_t ga = values ? g.vlo : g.lo, gb = values ? g.vhi : g.hi;
  const int64_t sa = values ? vlo_ : lo_, sb = values ? vhi_ : hi_;
  return {{{ga, std::min(gb, sa)}, {std::max(ga, sb), gb}}};
}

void DataParallel::discardOutside(void* base, size_t elemBytes, const Group& g, MemoryCategory cat,
                                  bool values, bool track) {
  for (const auto& [a, e] : outside(g, values)) {
    if (e <= a) continue;
    backend_->discard(static_cast<char*>(base) + a * int64_t(elemBytes), size_t(e - a) * elemBytes);
    if (tracker_ && track) tracker_->remove(MemoryTier::Device, cat, (e - a) * int64_t(elemBytes));
  }
}

void DataParallel::commitOutside(void* base, size_t elemBytes, const Group& g, MemoryCategory cat,
                                 bool values) {
  for (const auto& [a, e] : outside(g, values)) {
    if (e <= a) continue;
    backend_->commit(static_cast<char*>(base) + a * int64_t(elemBytes), size_t(e - a) * elemBytes);
    if (tracker_) tracker_->add(MemoryTier::Device, cat, (e - a) * int64_t(elemBytes));
  }
}

void DataParallel::gradsLive(Group& g) {
  if (stage_ < 2 || g.gradsLive) return;
  commitOutside(arena_->grads().data(), 4, g,
                arena_->mixed() ? MemoryCategory::Workspace : MemoryCategory::Gradients);
  g.gradsLive = true;
}

void DataParallel::gradsDone(Group& g) {
  if (stage_ < 2 || !g.gradsLive) return;
  discardOutside(arena_->grads().data(), 4, g,
                 arena_->mixed() ? MemoryCategory::Workspace : MemoryCategory::Gradients);
  g.gradsLive = false;
}

DataParallel::Group* DataParallel::blockGroup(int layer) {
  for (auto& g : groups_)
    if (g.block == layer) return &g;
  return nullptr;
}

void DataParallel::reduceGroup(Group& g) {
  if (g.reduced) return;
  g.reduced = true;
  float* grads = arena_->grads().f32();
  if (!reduceThisMicro_) return;
  if (stage_ == 0) {
    pending_.push_back(comm_->allReduceSum(grads + g.lo, g.hi - g.lo));
    for (auto& p : pending_) p->test();  // progress the ones in flight
    return;
  }
  // Stage 2/3: the shard receives the sum over ranks of everyone's copy of it. Only this rank's
  // copy of its own part holds the earlier micro-batches' sum (the other ranks gave theirs back,
  // so theirs read zero plus this micro-batch): the result is the running total.
  // Asynchronous, one in flight: the previous group's result lands first (its scratch is
  // reused), then this group's starts and runs while the next block's backward computes.
  finishReduceScatter();
  ScopedRange r("reduce_scatter", SpanCategory::Communication);
  scattering_ = &g;
  scatter_ = comm_->reduceScatterSum(grads + g.lo, scratch_.f32(), countsOf(g));
  scatter_->test();  // progress it
}

void DataParallel::finishReduceScatter() {
  if (!scattering_) return;
  Group& g = *scattering_;
  {
    ScopedRange r("reduce_scatter_wait", SpanCategory::Communication);
    scatter_->wait();
  }
  scatter_.reset();
  scattering_ = nullptr;
  const int64_t mine = ownedIn(g);
  if (mine > 0)
    backend_->copyOnDevice(arena_->grads().f32() + std::max(g.lo, lo_), scratch_.f32(),
                           mine * int64_t(sizeof(float)));
  // Stage 1 keeps whole gradient buffers (only its shard is used from here); 2/3 give the
  // rest back, now that the collective has read them.
  gradsDone(g);
}

void DataParallel::waitPending() {
  if (pending_.empty()) return;
  ScopedRange r("all_reduce_wait", SpanCategory::Communication);
  for (auto& p : pending_) p->wait();
  pending_.clear();
}

// ---- Stage 3: parameters ----------------------------------------------------------------------

void DataParallel::gather(Group& g, bool async) {
  if (stage_ < 3) return;
  if (!g.gathered && !g.pendingGather) {
    const bool mixed = arena_->mixed();
    commitOutside(arena_->storedValues(), arena_->storedElementBytes(), g,
                  MemoryCategory::Parameters, true);
    if (mixed)  // the fp32 compute copy
      commitOutside(arena_->values().data(), 4, g, MemoryCategory::Workspace, true);
    if (paramsOffloaded()) fetchOwned(g);  // this rank's part comes from its tier first
    const size_t eb = arena_->storedElementBytes();
    g.pendingGather = comm_->allGather(
        static_cast<char*>(arena_->storedValues()) + g.vlo * int64_t(eb), countsOf(g, true), eb);
  }
  if (!async) awaitGather(g);
}

void DataParallel::awaitGather(Group& g) {
  if (!g.pendingGather) return;
  {
    ScopedRange r("all_gather_wait", SpanCategory::Communication);
    g.pendingGather->wait();
  }
  g.pendingGather.reset();
  // The fp32 compute copy of the whole group from the gathered 16-bit weights.
  arena_->finishWeightUpdate(g.vlo, g.vhi, false);
  g.gathered = true;
  if (onGathered && g.block >= 0) onGathered(g.block);
}

void DataParallel::release(Group& g) {
  if (stage_ < 3) return;
  awaitGather(g);
  if (!g.gathered) return;
  if (arena_->mixed()) {
    discardOutside(arena_->values16().data(), 2, g, MemoryCategory::Parameters, true);
    discardOutside(arena_->values().data(), 4, g, MemoryCategory::Workspace, true);
  } else {
    discardOutside(arena_->values().data(), 4, g, MemoryCategory::Parameters, true);
  }
  if (paramsOffloaded()) dropOwned(g);
  g.gathered = false;
  if (onReleased && g.block >= 0) onReleased(g.block);
}

void DataParallel::gatherResident() {
  for (auto& g : groups_)
    if (g.block < 0) gather(g, true);
  for (auto& g : groups_)
    if (g.block < 0) awaitGather(g);
}

void DataParallel::releaseResident() {
  for (auto& g : groups_)
    if (g.block < 0) release(g);
}

void DataParallel::gatherAll() {
  for (auto& g : groups_) gather(g, true);
  for (auto& g : groups_) awaitGather(g);
}

void DataParallel::releaseAll() {
  for (auto& g : groups_) release(g);
}

void DataParallel::reshard() {
  // A load wrote this rank's shard only (ParamArena's partitioned weights): with parameter
  // offload it goes to its tier.
  if (stage_ < 3 || !paramsOffloaded()) return;
  for (auto& g : groups_) {
    storeOwned(g);
    if (!g.gathered) dropOwned(g, false);
  }
}

std::vector<std::pair<std::string, Tensor>> DataParallel::gatherOptimizerState(Optimizer& opt,
                                                                               int root) {
  std::vector<std::pair<std::string, Tensor>> out;
  const bool here = comm_->rank() == root;
  const int N = comm_->size();
  for (auto& [name, t] : opt.state()) {
    // Offloaded state lives in host memory (its own backend): gathered there, never through the
    // device (it may not fit).
    const bool host = t->tier() == MemoryTier::Host;
    kernels::Backend* be = host ? t->backend() : backend_;
    const MemoryTier tier = host ? MemoryTier::Host : MemoryTier::Device;
    auto gather = [&](const void* send, int64_t bytes, void* recv) {
      if (host)
        comm_->gatherHostBytes(send, bytes, recv, root);
      else
        comm_->gatherBytes(send, bytes, recv, root);
    };
    if (const auto c = opt.compactSlice(name)) {
      // Compact state (8-bit AdamW's): the ranks' buffers differ in length. Each sends its own
      // padded to the longest; the root keeps each rank's elements, in rank order.
      const int64_t eb = kernels::dtypeBits(t->dtype()) / 8;
      const auto counts = comm_->gatherStrings(std::to_string(t->numel()), root);
      const int64_t most = static_cast<int64_t>(comm_->allReduceMax(double(t->numel())));
      Tensor padded(be, tracker_, MemoryCategory::Workspace, t->dtype(), {most}, tier);
      padded.zero();
      if (t->numel() > 0) be->copyOnDevice(padded.data(), t->data(), t->bytes());
      Tensor all, full;
      if (here) {
        all = Tensor(be, tracker_, MemoryCategory::Workspace, t->dtype(), {most * N}, tier);
        full = Tensor(be, tracker_, MemoryCategory::Workspace, t->dtype(), {c->total}, tier);
      }
      gather(padded.data(), most * eb, here ? all.data() : nullptr);
      if (!here) continue;
      int64_t at = 0;
      for (int r = 0; r < N; ++r) {
        const int64_t n = std::stoll(counts.at(size_t(r)));
        if (at + n > c->total)
          throw std::logic_error("compact optimizer state: ranks' slices overrun '" + name + "'");
        if (n > 0)
          be->copyOnDevice(static_cast<char*>(full.data()) + at * eb,
                           static_cast<const char*>(all.data()) + int64_t(r) * most * eb, n * eb);
        at += n;
      }
      if (at != c->total)
        throw std::logic_error("compact optimizer state: the ranks' slices of '" + name +
                               "' do not add up to it");
      out.emplace_back(name, std::move(full));
      continue;
    }
    Tensor full;
    if (here)
      full = Tensor(be, tracker_, MemoryCategory::Workspace, t->dtype(),
                    {t->numel() * comm_->size()}, tier);
    gather(t->data(), t->bytes(), here ? full.data() : nullptr);
    if (here) out.emplace_back(name, std::move(full));
  }
  return out;
}

Decoder::Hooks DataParallel::hooks() {
  Decoder::Hooks h;
  const int L = [&] {
    int n = 0;
    for (const auto& g : groups_) n = std::max(n, g.block + 1);
    return n;
  }();
  if (stage_ >= 3) {
    h.beforeBlockForward = [this, L](int l, bool recompute) {
      if (Group* g = blockGroup(l)) gather(*g, false);
      if (!recompute && l + 1 < L)
        if (Group* n = blockGroup(l + 1)) gather(*n, true);       // prefetch
      if (!recompute && l + 2 < L) readAhead(blockGroup(l + 2));  // offloaded: its bytes
    };
    h.afterBlockForward = [this](int l, bool recompute) {
      if (recompute) return;  // its backward follows
      if (Group* g = blockGroup(l)) release(*g);
    };
  }
  h.beforeBlockBackward = [this](int l) {
    Group* g = blockGroup(l);
    if (!g) return;
    gather(*g, false);
    if (stage_ >= 3 && l > 0)
      if (Group* p = blockGroup(l - 1)) gather(*p, true);  // prefetch
    if (stage_ >= 3 && l > 1) readAhead(blockGroup(l - 2));
    gradsLive(*g);
  };
  h.blockGradientsReady = [this](int l) {
    Group* g = blockGroup(l);
    if (!g) return;
    reduceGroup(*g);
    release(*g);
  };
  return h;
}

// ---- The step ---------------------------------------------------------------------------------

void DataParallel::beginStep() {
  // Offloaded parameters: the first blocks' bytes start coming while the rest is gathered.
  readAhead(blockGroup(0));
  readAhead(blockGroup(1));
  gatherResident();
}

void DataParallel::beginMicroBatch(bool last) {
  // Stages 0/1 reduce once per step (the last micro-batch carries the accumulated sum);
  // 2/3 reduce-scatter every micro-batch, so the full gradients never accumulate.
  reduceThisMicro_ = stage_ >= 2 || last;
  for (auto& g : groups_) g.reduced = false;
}

void DataParallel::beginBackward() {
  for (auto& g : groups_)
    if (g.block < 0) gradsLive(g);  // the head's and embeddings' gradients
}

void DataParallel::endMicroBatch() {
  for (auto& g : groups_)
    if (g.block < 0) reduceGroup(g);
  finishReduceScatter();
  if (reduceThisMicro_) waitPending();
}

void DataParallel::zeroGrad() {
  if (stage_ <= 1) {
    arena_->zeroGrad();
    return;
  }
  // The shard only: the other pages are given back (they read zero).
  backend_->fillF32(arena_->grads().f32() + lo_, 0.f, hi_ - lo_);
}

void DataParallel::roundGrads() {
  if (stage_ == 0)
    arena_->roundGrads();
  else
    arena_->roundGradsRange(lo_, hi_);
}

void DataParallel::scaleGrads(float s) {
  backend_->scale(arena_->grads().f32() + gradLo(), gradHi() - gradLo(), s);
}

int64_t DataParallel::countNonFinite() {
  const int64_t n = backend_->countNonFinite(arena_->grads().f32() + gradLo(), gradHi() - gradLo());
  if (stage_ == 0) return n;  // every rank holds the same reduced gradients
  return static_cast<int64_t>(comm_->allReduceSum(static_cast<double>(n)));
}

double DataParallel::clipGradNorm(double maxNorm) {
  ScopedRange r("grad_norm", SpanCategory::Optimizer);
  float* g = arena_->grads().f32() + gradLo();
  const int64_t n = gradHi() - gradLo();
  double ss = backend_->sumSquares(g, n);
  if (stage_ >= 1) ss = comm_->allReduceSum(ss);
  const double norm = std::sqrt(ss);
  if (maxNorm > 0 && std::isfinite(norm) && norm > maxNorm)
    backend_->scale(g, n, static_cast<float>(maxNorm / (norm + 1e-6)));
  return norm;
}

void DataParallel::optimizerStep(Optimizer& opt, float lr) {
  // Offloaded parameters: the whole shard on the device for the update, back to its tier after.
  if (paramsOffloaded())
    for (size_t i = 0; i < groups_.size(); ++i) {
      if (i + 1 < groups_.size()) readAhead(&groups_[i + 1]);
      if (!groups_[i].gathered) fetchOwned(groups_[i]);
    }
  opt.step(lr);
  // Back to its tier once the new weights are in: the shard's device pages go again.
  auto evict = [&] {
    if (!paramsOffloaded()) return;
    for (auto& g : groups_) {
      storeOwned(g);
      if (!g.gathered) dropOwned(g);
    }
  };
  // Stage 3 notifies with the shard alone here: fp8 copies are made per block when gathered
  // (Gpt's fp8PerBlock), not from these partial weights.
  if (paramsOffloaded() && arena_->allTrainable()) {
    arena_->finishWeightUpdate(vlo_, vhi_, true);
    evict();
    return;
  }
  if (stage_ == 0) return;  // every rank ran the whole update
  if (!arena_->allTrainable()) {
    // Frozen tensors (a LoRA run): the trainable shards' new values (the optimizer's fp32
    // master, gradient space) are gathered whole (the adapters: small) and set on every rank;
    // under stage 3 what lands on unowned value pages goes back again.
    ScopedRange r("all_gather_weights", SpanCategory::Communication);
    const Tensor* m = opt.shardMaster();
    if (!m) throw std::logic_error("a sharded optimizer over frozen tensors keeps a master");
    Tensor full(backend_, tracker_, MemoryCategory::Workspace, DType::F32, {arena_->gradSize()});
    if (m->tier() == MemoryTier::Host)  // an offloaded optimizer's master
      backend_->copyToDevice(full.f32() + lo_, m->f32(), size_t(hi_ - lo_) * sizeof(float));
    else
      backend_->copyOnDevice(full.f32() + lo_, m->f32(), (hi_ - lo_) * int64_t(sizeof(float)));
    const std::vector<int64_t> counts(static_cast<size_t>(comm_->size()), hi_ - lo_);
    comm_->allGather(full.data(), counts, sizeof(float))->wait();
    arena_->setWeightsFrom(full.f32());  // stage 3: only the owned values are written
    evict();
    return;
  }
  if (stage_ >= 3) {
    // Each rank's shard is current; the rest is gathered when a block next needs it.
    arena_->finishWeightUpdate(vlo_, vhi_, true);
    return;
  }
  ScopedRange r("all_gather_weights", SpanCategory::Communication);
  const int N = comm_->size();
  std::vector<int64_t> counts(size_t(N), (hi_ - lo_));
  comm_->allGather(arena_->storedValues(), counts, arena_->storedElementBytes())->wait();
  arena_->finishWeightUpdate();
}

void DataParallel::offloadParams(const std::string& where, const std::string& dir) {
  if (stage_ < 3) throw std::invalid_argument("parallel.offload_params needs ZeRO stage 3");
  const int64_t bytes = (vhi_ - vlo_) * int64_t(arena_->storedElementBytes());
  if (where == "cpu") {
    hostBackend_ = kernels::makeCpuBackend();
    hostParams_ = Tensor(hostBackend_.get(), nullptr, MemoryCategory::Parameters, DType::I8,
                         {bytes}, MemoryTier::Host);
  } else if (where == "nvme") {
    namespace fs = std::filesystem;
    paramStore_ = std::make_unique<OffloadStore>(
        OffloadStore::Options{
            (fs::path(dir) / ("rank" + std::to_string(comm_->rank()))).string() + "-params", 2},
        std::vector<std::pair<std::string, int64_t>>{{"params", bytes}});
  } else {
    throw std::invalid_argument("parallel.offload_params must be cpu or nvme");
  }
  paramWhere_ = where;
  if (tracker_)
    tracker_->add(where == "cpu" ? MemoryTier::Host : MemoryTier::Nvme, MemoryCategory::Parameters,
                  bytes);
  // Every group is released (not gathered) here: the shard moves out now.
  for (auto& g : groups_) {
    storeOwned(g);
    if (!g.gathered) dropOwned(g);
  }
}

// The nvme parameter file's host staging (read-ahead and write-behind buffers): host workspace
// while it lives.
void DataParallel::stage(std::vector<char>& buf, size_t bytes) {
  unstage(buf);
  buf.resize(bytes);
  if (tracker_) tracker_->add(MemoryTier::Host, MemoryCategory::Workspace, int64_t(bytes));
}

void DataParallel::unstage(std::vector<char>& buf) {
  if (buf.empty()) return;
  if (tracker_) tracker_->remove(MemoryTier::Host, MemoryCategory::Workspace, int64_t(buf.size()));
  std::vector<char>().swap(buf);
}

std::pair<int64_t, int64_t> DataParallel::ownedRange(const Group& g) const {
  return {std::max(g.vlo, vlo_), std::min(g.vhi, vhi_)};
}

void DataParallel::readAhead(Group* g) {
  if (!g || !paramStore_ || g->readIssued || g->gathered) return;
  const auto [a, b] = ownedRange(*g);
  if (b <= a) return;
  const int64_t eb = int64_t(arena_->storedElementBytes());
  // Its last write must land first: a read in flight with it may see either.
  paramStore_->wait(g->writeTicket);
  g->writeTicket = 0;
  unstage(g->writeBuf);
  stage(g->readBuf, size_t((b - a) * eb));
  g->readTicket = paramStore_->read(0, (a - vlo_) * eb, g->readBuf.data(), (b - a) * eb);
  g->readIssued = true;
}

void DataParallel::fetchOwned(Group& g) {
  const auto [a, b] = ownedRange(g);
  if (b <= a) return;
  const size_t eb = arena_->storedElementBytes();
  const size_t bytes = size_t(b - a) * eb;
  char* dev = static_cast<char*>(arena_->storedValues()) + a * int64_t(eb);
  backend_->commit(dev, bytes);  // dropOwned gave these pages back
  if (arena_->mixed()) backend_->commit(arena_->values().f32() + a, size_t(b - a) * sizeof(float));
  const char* src = nullptr;
  if (hostParams_.empty()) {
    readAhead(&g);  // (already started when the group before it was gathered)
    {
      ScopedRange r("param_read_wait", SpanCategory::IO);
      paramStore_->wait(g.readTicket);
    }
    src = g.readBuf.data();
  } else {
    src = static_cast<const char*>(hostParams_.data()) + (a - vlo_) * int64_t(eb);
  }
  backend_->copyToDevice(dev, src, bytes);
  if (paramStore_) {
    g.readTicket = 0;
    g.readIssued = false;
    unstage(g.readBuf);
  }
  if (arena_->mixed()) arena_->finishWeightUpdate(a, b, false);  // its fp32 compute copy
  if (tracker_) {
    tracker_->add(MemoryTier::Device, MemoryCategory::Parameters, int64_t(bytes));
    if (arena_->mixed()) tracker_->add(MemoryTier::Device, MemoryCategory::Workspace, (b - a) * 4);
  }
}

void DataParallel::storeOwned(Group& g) {
  const auto [a, b] = ownedRange(g);
  if (b <= a) return;
  const size_t eb = arena_->storedElementBytes();
  const size_t bytes = size_t(b - a) * eb;
  const char* dev = static_cast<const char*>(arena_->storedValues()) + a * int64_t(eb);
  if (hostParams_.empty()) {
    // Written behind: the device pages may go at once, the host copy stays until it lands.
    paramStore_->wait(g.writeTicket);
    if (g.readIssued) {  // a read-ahead of the old bytes is stale now
      paramStore_->wait(g.readTicket);
      g.readIssued = false;
      unstage(g.readBuf);
    }
    stage(g.writeBuf, bytes);
    backend_->copyToHost(g.writeBuf.data(), dev, bytes);
    g.writeTicket =
        paramStore_->write(0, (a - vlo_) * int64_t(eb), g.writeBuf.data(), int64_t(bytes));
  } else {
    backend_->copyToHost(static_cast<char*>(hostParams_.data()) + (a - vlo_) * int64_t(eb), dev,
                         bytes);
  }
}

void DataParallel::dropOwned(Group& g, bool track) {
  const auto [a, b] = ownedRange(g);
  if (b <= a) return;
  const size_t eb = arena_->storedElementBytes();
  backend_->discard(static_cast<char*>(arena_->storedValues()) + a * int64_t(eb),
                    size_t(b - a) * eb);
  if (arena_->mixed()) backend_->discard(arena_->values().f32() + a, size_t(b - a) * sizeof(float));
  if (tracker_ && track) {
    tracker_->remove(MemoryTier::Device, MemoryCategory::Parameters, (b - a) * int64_t(eb));
    if (arena_->mixed())
      tracker_->remove(MemoryTier::Device, MemoryCategory::Workspace, (b - a) * 4);
  }
}

nlohmann::json DataParallel::takeStepStats() {
  nlohmann::json j = nlohmann::json::object();
  if (!paramsOffloaded()) return j;
  j["offload_params"] = paramWhere_;
  if (paramStore_) j.update(paramStore_->takeStepFields("offload_param_"));
  return j;
}

void DataParallel::endStep() {
  releaseResident();
}

}  // namespace ts::engine
