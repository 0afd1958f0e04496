// ZeRO-Offload / ZeRO-Infinity for the optimizer (parallel.offload_optimizer cpu | nvme): the
// rank's shard of AdamW state (m, v and an fp32 master) lives in host memory or in files under
// parallel.nvme_path, and the update runs on the host with the CPU kernel (OpenMP threads, AVX
// vectors). Each step the shard's reduced gradients come to the host, the updated weights go
// back to the device; with nvme the state streams through double-buffered host chunks, the next
// chunk read ahead and the last one written behind while the current one updates.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/engine/optim/OffloadStore.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using core::MemoryCategory;
using core::MemoryTier;
using profiler::ScopedRange;
using profiler::SpanCategory;

constexpr int64_t kChunk = int64_t(1) << 20;  // nvme: elements per streamed chunk (4 MiB)

// What the 32- and 8-bit offloaded AdamW share: the shard's range of gradient space, the host
// backend that runs the update, the gradients each step brings over, the step itself (the update
// in host memory or streamed through NVMe files, then the weights rounded once), publishing the
// new weights to the device and the step-event numbers.
class OffloadedOptimizerBase : public Optimizer {
 public:
  void step(float lr) final {
    ScopedRange r(stepName_, SpanCategory::Optimizer);
    ++t_;
    const int64_t n = hi_ - lo_;
    const auto t0 = std::chrono::steady_clock::now();
    backend_->copyToHost(grad_.data(), arena_.grads().f32() + lo_, size_t(n) * sizeof(float));
    moved_ += n * 4;
    if (store_ && (materialized_ || masterRead_)) dropHostCopies();  // stale after this step
    materialized_ = masterRead_ = false;
    if (store_)
      streamNvme(lr);
    else
      updateInMemory(lr);
    if (arena_.allTrainable()) arena_.roundWeightsRange(lo_, hi_);
    hostSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t s) override { t_ = s; }
  // Bytes moved and host time (the counters restart), and the store's I/O numbers.
  nlohmann::json takeStepStats() override {
    nlohmann::json j = {{"offload", opts_.where},
                        {"offload_bytes", moved_},
                        {"offload_host_ms", hostSeconds_ * 1000}};
    if (store_) j.update(store_->takeStepFields("offload_"));
    moved_ = 0;
    hostSeconds_ = 0;
    return j;
  }

 protected:
  OffloadedOptimizerBase(const core::OptimizerConfig& c, ParamArena& arena,
                         kernels::Backend* backend, MemoryTracker* tracker, OptimizerShard shard,
                         const OffloadOptions& o, const char* stepName)
      : config_(c),
        arena_(arena),
        backend_(backend),
        tracker_(tracker),
        opts_(o),
        stepName_(stepName) {
    lo_ = shard.sharded() ? shard.lo : 0;
    hi_ = shard.sharded() ? shard.hi : arena.gradSize();
    cpu_ = kernels::makeCpuBackend();
    cpu_->setThreads(backend->threads());
    // The reduced gradients arrive here each step (ZeRO-Offload: they go where the optimizer is).
    grad_ = Tensor(cpu_.get(), tracker, MemoryCategory::Gradients, DType::F32, {hi_ - lo_},
                   MemoryTier::Host);
  }
  virtual void updateInMemory(float lr) = 0;  // cpu: the state in host memory
  virtual void streamNvme(float lr) = 0;      // nvme: the state streamed through the files
  virtual void dropHostCopies() = 0;          // nvme: host copies a checkpoint made
  // This rank's directory of state files under parallel.nvme_path.
  std::string storeDir() const {
    return (std::filesystem::path(opts_.dir) / ("rank" + std::to_string(opts_.rank))).string();
  }
  float beta1() const { return float(config_.betas.size() > 0 ? config_.betas[0] : 0.9); }
  float beta2() const { return float(config_.betas.size() > 1 ? config_.betas[1] : 0.999); }
  // The updated master of gradient-space [a, b) into the device's weights (every tensor
  // trainable; step() rounds them to the stored 16-bit weights once), or left to the caller's
  // gather over a frozen base.
  void publish(const float* master, int64_t a, int64_t b) {
    if (!arena_.allTrainable() || b <= a) return;
    backend_->copyToDevice(arena_.values().f32() + a, master, size_t(b - a) * sizeof(float));
    moved_ += (b - a) * 4;
  }
  // A loaded master into the device's weights, rounded (after a checkpoint).
  void publishShard(const float* master) {
    publish(master, lo_, hi_);
    if (arena_.allTrainable()) arena_.roundWeightsRange(lo_, hi_);
  }

  core::OptimizerConfig config_;
  ParamArena& arena_;
  kernels::Backend* backend_;
  MemoryTracker* tracker_;
  OffloadOptions opts_;
  const char* stepName_;
  int64_t lo_ = 0, hi_ = 0, t_ = 0;
  std::unique_ptr<kernels::Backend> cpu_;  // runs the update
  Tensor grad_;
  Tensor stage_[2];  // nvme: double-buffered staging
  std::unique_ptr<OffloadStore> store_;
  bool materialized_ = false, masterRead_ = false;
  int64_t moved_ = 0;
  double hostSeconds_ = 0;
};

class OffloadedAdamW final : public OffloadedOptimizerBase {
 public:
  OffloadedAdamW(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
                 MemoryTracker* tracker, OptimizerShard shard, const OffloadOptions& o)
      : OffloadedOptimizerBase(c, arena, backend, tracker, shard, o, "adamw_offload") {
    const int64_t n = hi_ - lo_;
    std::vector<float> init(static_cast<size_t>(n), 0.f);
    // The master starts from the trainable weights of the shard.
    arena.trainableRangeToHost(init.data(), lo_, hi_);
    if (o.where == "cpu") {
      for (Tensor* t : {&m_, &v_, &master_})
        *t = Tensor(cpu_.get(), tracker, MemoryCategory::OptimizerState, DType::F32, {n},
                    MemoryTier::Host);
      m_.zero();
      v_.zero();
      master_.copyFromHost(init.data());
    } else {
      store_ = std::make_unique<OffloadStore>(
          OffloadStore::Options{storeDir(), 2},
          std::vector<std::pair<std::string, int64_t>>{
              {"exp_avg", n * 4}, {"exp_avg_sq", n * 4}, {"master", n * 4}});
      if (tracker) tracker->add(MemoryTier::Nvme, MemoryCategory::OptimizerState, 3 * n * 4);
      // Double-buffered staging: two chunks of each of the three state buffers.
      const int64_t chunk = std::min(kChunk, std::max<int64_t>(n, 1));
      for (auto& s : stage_)
        s = Tensor(cpu_.get(), tracker, MemoryCategory::Workspace, DType::F32, {3 * chunk},
                   MemoryTier::Host);
      const std::vector<float> zeros(static_cast<size_t>(n), 0.f);
      store_->write(0, 0, zeros.data(), n * 4);
      store_->write(1, 0, zeros.data(), n * 4);
      store_->write(2, 0, init.data(), n * 4);
      store_->waitAll();
      (void)store_->takeStats();
    }
  }
  ~OffloadedAdamW() override {
    if (store_ && tracker_)
      tracker_->remove(MemoryTier::Nvme, MemoryCategory::OptimizerState, 3 * (hi_ - lo_) * 4);
  }

  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (store_) materialize();
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}, {"master", &master_}};
  }
  void stateLoaded() override {
    if (!store_) {
      publishShard(master_.f32());
      return;
    }
    // Loaded into the host copies: they become the files' contents.
    const int64_t n = hi_ - lo_;
    store_->write(0, 0, m_.data(), n * 4);
    store_->write(1, 0, v_.data(), n * 4);
    store_->write(2, 0, master_.data(), n * 4);
    store_->waitAll();
    publishShard(master_.f32());
    dropHostCopies();
  }
  std::string name() const override { return "adamw"; }
  const Tensor* shardMaster() const override {
    if (store_) const_cast<OffloadedAdamW*>(this)->readMaster();
    return &master_;
  }

 private:
  void updateInMemory(float lr) override {
    update(master_.f32(), m_.f32(), v_.f32(), lo_, hi_, lr);
    publish(master_.f32(), lo_, hi_);
  }
  // AdamW on [a, b) of gradient space (inside the shard), tensor by tensor (weight decay is per
  // tensor); w, m, v point at element a.
  void update(float* w, float* m, float* v, int64_t a, int64_t b, float lr) {
    const float b1 = beta1(), b2 = beta2(), eps = float(config_.eps);
    const float* g = grad_.f32() + (a - lo_);
    for (const auto& p : arena_.params()) {
      if (!p.trainable()) continue;
      const int64_t s = std::max(p.gradOffset, a), e = std::min(p.gradOffset + p.numel, b);
      if (e <= s) continue;
      const float wd = p.decay ? float(config_.weight_decay) : 0.f;
      const int64_t o = s - a;
      cpu_->adamwUpdate(w + o, g + o, m + o, v + o, e - s, lr, b1, b2, eps, wd, t_);
    }
  }
  void streamNvme(float lr) override {
    const int64_t n = hi_ - lo_;
    const int64_t chunk = stage_[0].numel() / 3;
    float* buf[2] = {stage_[0].f32(), stage_[1].f32()};
    OffloadStore::Ticket reads[2][3] = {}, writes[2][3] = {};
    auto fetch = [&](int slot, int64_t c0) {
      const int64_t len = std::min(chunk, n - c0);
      for (auto& w : writes[slot]) store_->wait(w);  // the slot's last write-behind is done
      for (int k = 0; k < 3; ++k)
        reads[slot][k] = store_->read(k, c0 * 4, buf[slot] + k * chunk, len * 4);
    };
    if (n > 0) fetch(0, 0);
    int slot = 0;
    for (int64_t c0 = 0; c0 < n; c0 += chunk, slot ^= 1) {
      const int64_t len = std::min(chunk, n - c0);
      if (c0 + chunk < n) fetch(slot ^ 1, c0 + chunk);  // read ahead
      for (auto& t : reads[slot]) store_->wait(t);
      float* m = buf[slot];
      float* v = m + chunk;
      float* w = v + chunk;
      update(w, m, v, lo_ + c0, lo_ + c0 + len, lr);
      publish(w, lo_ + c0, lo_ + c0 + len);
      for (int k = 0; k < 3; ++k)  // write behind
        writes[slot][k] = store_->write(k, c0 * 4, buf[slot] + k * chunk, len * 4);
    }
    store_->waitAll();
  }
  // nvme: host copies of the state for a checkpoint (read from the files; dropped at the next
  // step).
  void materialize() {
    if (materialized_) return;
    const int64_t n = hi_ - lo_;
    for (Tensor* t : {&m_, &v_, &master_})
      if (t->empty())
        *t = Tensor(cpu_.get(), tracker_, MemoryCategory::Workspace, DType::F32, {n},
                    MemoryTier::Host);
    store_->read(0, 0, m_.data(), n * 4);
    store_->read(1, 0, v_.data(), n * 4);
    store_->read(2, 0, master_.data(), n * 4);
    store_->waitAll();
    materialized_ = true;
  }
  // nvme: the master alone (a frozen base's caller gathers it after every step).
  void readMaster() {
    if (materialized_ || masterRead_) return;
    const int64_t n = hi_ - lo_;
    if (master_.empty())
      master_ = Tensor(cpu_.get(), tracker_, MemoryCategory::Workspace, DType::F32, {n},
                       MemoryTier::Host);
    store_->wait(store_->read(2, 0, master_.data(), n * 4));
    masterRead_ = true;
  }
  void dropHostCopies() override {
    m_ = Tensor();
    v_ = Tensor();
    master_ = Tensor();
    materialized_ = masterRead_ = false;
  }

  Tensor m_, v_, master_;
};

// 8-bit AdamW offloaded (optimizer.state_bits 8): the shard's state as the device AdamW8 keeps
// it (uint8 codes and per-256 absmaxes for tensors of at least 4096 elements, fp32 m and v for
// smaller ones, compact in arena order) plus an fp32 master, in host memory or NVMe files,
// updated on the host by the CPU kernel. nvme streams it item by item (a tensor's piece of the
// shard, cut into at most kChunk elements on block boundaries), the next item read ahead and
// the last written behind. Its state names and layout are the device optimizer's, so their
// checkpoints move between the two.
class OffloadedAdamW8 final : public OffloadedOptimizerBase {
 public:
  enum Buf { Master, Qm, Qv, Am, Av, M, V, kBuffers };
  OffloadedAdamW8(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
                  MemoryTracker* tracker, OptimizerShard shard, const OffloadOptions& o)
      : OffloadedOptimizerBase(c, arena, backend, tracker, shard, o, "adamw_8bit_offload") {
    const int64_t n = hi_ - lo_;
    constexpr int64_t kBlock = core::kAdam8Block;
    auto blocksOf = [](int64_t k) { return (k + kBlock - 1) / kBlock; };
    layout_ = adam8Layout(arena, shard);
    const int64_t big = layout_.codes, blocks = layout_.blocks, small = layout_.small;
    // Items: each piece cut into at most kChunk elements (a multiple of the block).
    for (const auto& pc : layout_.pieces)
      for (int64_t s = pc.a; s < pc.b; s += kChunk) {
        const int64_t d = s - pc.a;
        items_.push_back({pc.p, s, std::min(pc.b, s + kChunk), pc.big, pc.q + d,
                          pc.block + d / kBlock, pc.f + d});
      }
    elems_ = {n, big, big, blocks, blocks, small, small};
    const auto ms = kernels::dynamicMap(true), mu = kernels::dynamicMap(false);
    for (auto [t, m] : {std::pair{&mapM_, &ms}, {&mapV_, &mu}}) {
      *t = Tensor(cpu_.get(), nullptr, MemoryCategory::Workspace, DType::F32, {256},
                  MemoryTier::Host);
      t->copyFromHost(m->data());
    }
    // Initial state: the master from the shard's trainable weights, zero moments (the code of
    // 0.0 in each map).
    // (nvme: a transient copy written to the files below, uncounted like the 32-bit one's.)
    allocateHost(MemoryCategory::OptimizerState, o.where == "cpu" ? tracker : nullptr);
    arena.trainableRangeToHost(host_[Master].f32(), lo_, hi_);
    std::fill_n(static_cast<uint8_t*>(host_[Qm].data()), big, kernels::nearestCode(ms.data(), 0.f));
    std::fill_n(static_cast<uint8_t*>(host_[Qv].data()), big, kernels::nearestCode(mu.data(), 0.f));
    for (Buf b : {Am, Av, M, V}) host_[b].zero();
    if (o.where == "nvme") {
      std::vector<std::pair<std::string, int64_t>> files;
      for (int k = 0; k < kBuffers; ++k)
        files.push_back({kNames[k], std::max<int64_t>(1, bytesOf(k, elems_[size_t(k)]))});
      store_ = std::make_unique<OffloadStore>(OffloadStore::Options{storeDir(), 2}, files);
      if (tracker) tracker->add(MemoryTier::Nvme, MemoryCategory::OptimizerState, stateBytes());
      writeAll();
      (void)store_->takeStats();
      dropHostCopies();
      // Double-buffered staging: each slot holds one item of every buffer.
      const int64_t c = std::min(kChunk, std::max<int64_t>(n, 1));
      cap_ = {c,
              c,
              c,
              blocksOf(c),
              blocksOf(c),
              std::min(c, core::kAdam8Min),
              std::min(c, core::kAdam8Min)};
      int64_t slot = 0;
      for (int k = 0; k < kBuffers; ++k) slot += bytesOf(k, cap_[size_t(k)]);
      for (auto& st : stage_)
        st = Tensor(cpu_.get(), tracker, MemoryCategory::Workspace, DType::I8, {slot},
                    MemoryTier::Host);
    }
  }
  ~OffloadedAdamW8() override {
    if (store_ && tracker_)
      tracker_->remove(MemoryTier::Nvme, MemoryCategory::OptimizerState, stateBytes());
  }

  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (store_) materialize();
    std::vector<std::pair<std::string, Tensor*>> out;
    for (int k : {Qm, Am, Qv, Av, M, V, Master}) out.push_back({kNames[k], &host_[k]});
    return out;
  }
  void stateLoaded() override {
    if (store_) {
      writeAll();
      materialized_ = false;
    }
    publishShard(host_[Master].f32());
    if (store_) dropHostCopies();
  }
  std::string name() const override { return "adamw8bit"; }
  const Tensor* shardMaster() const override {
    if (store_) const_cast<OffloadedAdamW8*>(this)->readMaster();
    return &host_[Master];
  }
  std::optional<CompactSlice> compactSlice(const std::string& name) const override {
    if (name == kNames[Master]) return std::nullopt;
    if (name == kNames[Qm] || name == kNames[Qv]) return layout_.codesSlice;
    if (name == kNames[Am] || name == kNames[Av]) return layout_.absmaxSlice;
    return layout_.fp32Slice;
  }

 private:
  static constexpr const char* kNames[kBuffers] = {
      "master",       "exp_avg.codes",  "exp_avg_sq.codes", "exp_avg.absmax", "exp_avg_sq.absmax",
      "exp_avg.fp32", "exp_avg_sq.fp32"};
  static DType typeOf(int k) { return k == Qm || k == Qv ? DType::I8 : DType::F32; }
  static int64_t bytesOf(int k, int64_t elements) {
    return elements * (typeOf(k) == DType::I8 ? 1 : 4);
  }
  // One tensor's piece of the shard (at most kChunk elements): gradient space [a, b) and its
  // offsets into the compact buffers.
  struct Item {
    const ParamInfo* p;
    int64_t a, b;
    bool big;
    int64_t q, block, f;
  };
  using Pointers = std::array<char*, kBuffers>;
  // Element k of an item: where it starts in buffer k.
  int64_t startOf(const Item& it, int k) const {
    switch (k) {
      case Master:
        return it.a - lo_;
      case Qm:
      case Qv:
        return it.q;
      case Am:
      case Av:
        return it.block;
      default:
        return it.f;
    }
  }
  int64_t countOf(const Item& it, int k) const {
    if (k == Master) return it.b - it.a;
    if (k == Qm || k == Qv) return it.big ? it.b - it.a : 0;
    if (k == Am || k == Av)
      return it.big ? (it.b - it.a + core::kAdam8Block - 1) / core::kAdam8Block : 0;
    return it.big ? 0 : it.b - it.a;
  }
  Pointers pointersAt(const Item& it) {
    Pointers ptr{};
    for (int k = 0; k < kBuffers; ++k)
      ptr[size_t(k)] = static_cast<char*>(host_[k].data()) + bytesOf(k, startOf(it, k));
    return ptr;
  }
  void updateInMemory(float lr) override {
    for (const Item& it : items_) update(it, pointersAt(it), lr);
    publish(host_[Master].f32(), lo_, hi_);
  }
  void update(const Item& it, const Pointers& ptr, float lr) {
    const float b1 = beta1(), b2 = beta2(), eps = float(config_.eps);
    const float wd = it.p->decay ? float(config_.weight_decay) : 0.f;
    auto* w = reinterpret_cast<float*>(ptr[Master]);
    const float* g = grad_.f32() + (it.a - lo_);
    const int64_t len = it.b - it.a;
    if (it.big)
      cpu_->adamw8bitUpdate(w, g, reinterpret_cast<uint8_t*>(ptr[Qm]),
                            reinterpret_cast<uint8_t*>(ptr[Qv]), reinterpret_cast<float*>(ptr[Am]),
                            reinterpret_cast<float*>(ptr[Av]), mapM_.f32(), mapV_.f32(), len,
                            int(core::kAdam8Block), lr, b1, b2, eps, wd, t_);
    else
      cpu_->adamwUpdate(w, g, reinterpret_cast<float*>(ptr[M]), reinterpret_cast<float*>(ptr[V]),
                        len, lr, b1, b2, eps, wd, t_);
  }
  void streamNvme(float lr) override {
    std::array<int64_t, kBuffers> at{};  // each buffer's region in a slot (bytes)
    for (int k = 1; k < kBuffers; ++k)
      at[size_t(k)] = at[size_t(k - 1)] + bytesOf(k - 1, cap_[size_t(k - 1)]);
    auto slotPointers = [&](int slot) {
      Pointers ptr{};
      for (int k = 0; k < kBuffers; ++k)
        ptr[size_t(k)] = static_cast<char*>(stage_[slot].data()) + at[size_t(k)];
      return ptr;
    };
    std::vector<OffloadStore::Ticket> reads[2], writes[2];
    auto io = [&](int slot, const Item& it, bool write) {
      const Pointers ptr = slotPointers(slot);
      auto& tickets = write ? writes[slot] : reads[slot];
      for (int k = 0; k < kBuffers; ++k) {
        const int64_t count = countOf(it, k);
        if (count == 0) continue;
        const int64_t off = bytesOf(k, startOf(it, k)), bytes = bytesOf(k, count);
        tickets.push_back(write ? store_->write(k, off, ptr[size_t(k)], bytes)
                                : store_->read(k, off, ptr[size_t(k)], bytes));
      }
    };
    auto waitFor = [&](std::vector<OffloadStore::Ticket>& tickets) {
      for (auto t : tickets) store_->wait(t);
      tickets.clear();
    };
    if (!items_.empty()) io(0, items_[0], false);
    int slot = 0;
    for (size_t i = 0; i < items_.size(); ++i, slot ^= 1) {
      if (i + 1 < items_.size()) {  // read ahead, once the slot's last write-behind is done
        waitFor(writes[slot ^ 1]);
        io(slot ^ 1, items_[i + 1], false);
      }
      waitFor(reads[slot]);
      const Pointers ptr = slotPointers(slot);
      update(items_[i], ptr, lr);
      publish(reinterpret_cast<const float*>(ptr[Master]), items_[i].a, items_[i].b);
      io(slot, items_[i], true);  // write behind
    }
    store_->waitAll();
  }
  int64_t stateBytes() const {
    int64_t b = 0;
    for (int k = 0; k < kBuffers; ++k) b += bytesOf(k, elems_[size_t(k)]);
    return b;
  }
  void allocateHost(MemoryCategory cat, MemoryTracker* tracker) {
    for (int k = 0; k < kBuffers; ++k)
      host_[k] = Tensor(cpu_.get(), tracker, cat, typeOf(k), {elems_[size_t(k)]}, MemoryTier::Host);
  }
  void writeAll() {
    for (int k = 0; k < kBuffers; ++k)
      if (elems_[size_t(k)] > 0)
        store_->write(k, 0, host_[k].data(), bytesOf(k, elems_[size_t(k)]));
    store_->waitAll();
  }
  void dropHostCopies() override {
    for (auto& t : host_) t = Tensor();
    materialized_ = masterRead_ = false;
  }
  // nvme: host copies of the state for a checkpoint (dropped at the next stateLoaded or kept
  // until the next step makes them stale).
  void materialize() {
    if (materialized_) return;
    for (int k = 0; k < kBuffers; ++k)
      if (host_[k].empty())
        host_[k] = Tensor(cpu_.get(), tracker_, MemoryCategory::Workspace, typeOf(k),
                          {elems_[size_t(k)]}, MemoryTier::Host);
    for (int k = 0; k < kBuffers; ++k)
      if (elems_[size_t(k)] > 0) store_->read(k, 0, host_[k].data(), bytesOf(k, elems_[size_t(k)]));
    store_->waitAll();
    materialized_ = true;
  }
  // nvme: the master alone (a frozen base's caller gathers it after every step).
  void readMaster() {
    if (materialized_ || masterRead_) return;
    if (host_[Master].empty())
      host_[Master] = Tensor(cpu_.get(), tracker_, MemoryCategory::Workspace, DType::F32,
                             {elems_[Master]}, MemoryTier::Host);
    store_->wait(store_->read(Master, 0, host_[Master].data(), bytesOf(Master, elems_[Master])));
    masterRead_ = true;
  }

  std::vector<Item> items_;
  std::array<int64_t, kBuffers> elems_{}, cap_{};
  Adam8Layout layout_;
  Tensor mapM_, mapV_;
  std::array<Tensor, kBuffers> host_;  // the state (cpu), or host copies of it (nvme)
};

}  // namespace

std::unique_ptr<Optimizer> makeOffloadedOptimizer(const core::OptimizerConfig& config,
                                                  ParamArena& arena, kernels::Backend* backend,
                                                  MemoryTracker* tracker, OptimizerShard shard,
                                                  const OffloadOptions& offload) {
  if (config.type != "adamw")
    throw std::invalid_argument(
        "parallel.offload_optimizer runs AdamW on the host (optimizer.type adamw, 32- or 8-bit "
        "state)");
  if (arena.options().pureBf16())
    throw std::invalid_argument(
        "parallel.offload_optimizer keeps an fp32 master on the host; pure_bf16 has none (use "
        "precision.policy bf16)");
  if (arena.gradWindow() || arena.valueWindow())
    throw std::logic_error(
        "the offloaded optimizer copies fp32 gradients out and fp32 values in: build the model "
        "without the gradient and value windows (core::gradWindowOf, valueWindowOf)");
  if (offload.where != "cpu" && offload.where != "nvme")
    throw std::invalid_argument("parallel.offload_optimizer must be cpu or nvme");
  if (config.state_bits == 8)
    return std::make_unique<OffloadedAdamW8>(config, arena, backend, tracker, shard, offload);
  return std::make_unique<OffloadedAdamW>(config, arena, backend, tracker, shard, offload);
}

}  // namespace ts::engine
