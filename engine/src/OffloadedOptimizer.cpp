// ZeRO-Offload / ZeRO-Infinity for the optimizer (parallel.offload_optimizer cpu | nvme): the
// rank's shard of AdamW state (m, v and an fp32 master) lives in host memory or in files under
// parallel.nvme_path, and the update runs on the host with the CPU kernel (OpenMP threads, AVX
// vectors). Each step the shard's reduced gradients come to the host, the updated weights go
// back to the device; with nvme the state streams through double-buffered host chunks, the next
// chunk read ahead and the last one written behind while the current one updates.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "trainscope/engine/OffloadStore.h"
#include "trainscope/engine/Optimizer.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using core::MemoryCategory;
using core::MemoryTier;
using profiler::ScopedRange;
using profiler::SpanCategory;

constexpr int64_t kChunk = int64_t(1) << 20;  // nvme: elements per streamed chunk (4 MiB)

class OffloadedAdamW final : public Optimizer {
 public:
  OffloadedAdamW(const core::OptimizerConfig& c, ParamArena& arena, kernels::Backend* backend,
                 MemoryTracker* tracker, OptimizerShard shard, const OffloadOptions& o)
      : config_(c), arena_(arena), backend_(backend), tracker_(tracker), opts_(o) {
    lo_ = shard.sharded() ? shard.lo : 0;
    hi_ = shard.sharded() ? shard.hi : arena.gradSize();
    const int64_t n = hi_ - lo_;
    host_ = kernels::makeCpuBackend();
    host_->setThreads(backend->threads());
    // The reduced gradients arrive here each step (ZeRO-Offload: they go where the optimizer is).
    grad_ =
        Tensor(host_.get(), tracker, MemoryCategory::Gradients, DType::F32, {n}, MemoryTier::Host);
    std::vector<float> init(static_cast<size_t>(n), 0.f);
    // The master starts from the trainable weights of the shard.
    std::vector<float> values(static_cast<size_t>(arena.size()));
    arena.values().copyToHost(values.data());
    for (const auto& p : arena.params()) {
      if (!p.trainable()) continue;
      const int64_t a = std::max(p.gradOffset, lo_), b = std::min(p.gradOffset + p.numel, hi_);
      for (int64_t i = a; i < b; ++i)
        init[size_t(i - lo_)] = values[size_t(p.offset + (i - p.gradOffset))];
    }
    if (o.where == "cpu") {
      for (Tensor* t : {&m_, &v_, &master_})
        *t = Tensor(host_.get(), tracker, MemoryCategory::OptimizerState, DType::F32, {n},
                    MemoryTier::Host);
      m_.zero();
      v_.zero();
      master_.copyFromHost(init.data());
    } else {
      namespace fs = std::filesystem;
      const std::string dir = (fs::path(o.dir) / ("rank" + std::to_string(o.rank))).string();
      store_ = std::make_unique<OffloadStore>(
          OffloadStore::Options{dir, 2},
          std::vector<std::pair<std::string, int64_t>>{
              {"exp_avg", n * 4}, {"exp_avg_sq", n * 4}, {"master", n * 4}});
      if (tracker) tracker->add(MemoryTier::Nvme, MemoryCategory::OptimizerState, 3 * n * 4);
      // Double-buffered staging: two chunks of each of the three state buffers.
      const int64_t chunk = std::min(kChunk, std::max<int64_t>(n, 1));
      for (auto& s : stage_)
        s = Tensor(host_.get(), tracker, MemoryCategory::Workspace, DType::F32, {3 * chunk},
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

  void step(float lr) override {
    ScopedRange r("adamw_offload", SpanCategory::Optimizer);
    ++t_;
    const int64_t n = hi_ - lo_;
    const auto t0 = std::chrono::steady_clock::now();
    backend_->copyToHost(grad_.data(), arena_.grads().f32() + lo_, size_t(n) * sizeof(float));
    moved_ += n * 4;
    materialized_ = false;  // a checkpoint's copy of nvme state is stale after this step
    if (!store_) {
      update(master_.f32(), m_.f32(), v_.f32(), lo_, hi_, lr);
      publish(master_.f32());
    } else {
      streamNvme(lr);
    }
    hostSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  int64_t stepCount() const override { return t_; }
  void setStepCount(int64_t s) override { t_ = s; }
  std::vector<std::pair<std::string, Tensor*>> state() override {
    if (store_) materialize();
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}, {"master", &master_}};
  }
  void stateLoaded() override {
    if (!store_) {
      publish(master_.f32());
      return;
    }
    // Loaded into the host copies: they become the files' contents.
    const int64_t n = hi_ - lo_;
    store_->write(0, 0, m_.data(), n * 4);
    store_->write(1, 0, v_.data(), n * 4);
    store_->write(2, 0, master_.data(), n * 4);
    store_->waitAll();
    publish(master_.f32());
    dropMaterialized();
  }
  std::string name() const override { return "adamw"; }
  const Tensor* shardMaster() const override {
    if (store_) const_cast<OffloadedAdamW*>(this)->materialize();
    return &master_;
  }
  nlohmann::json takeStepStats() override {
    nlohmann::json j = {{"offload", opts_.where},
                        {"offload_bytes", moved_},
                        {"offload_host_ms", hostSeconds_ * 1000}};
    if (store_) {
      const auto s = store_->takeStats();
      j["offload_read_bytes"] = s.bytesRead;
      j["offload_write_bytes"] = s.bytesWritten;
      j["offload_io_ms"] = s.ioSeconds * 1000;
      j["offload_wait_ms"] = s.waitSeconds * 1000;
    }
    moved_ = 0;
    hostSeconds_ = 0;
    return j;
  }

 private:
  // AdamW on [a, b) of gradient space (inside the shard), tensor by tensor (weight decay is per
  // tensor); w, m, v point at element a.
  void update(float* w, float* m, float* v, int64_t a, int64_t b, float lr) {
    const float b1 = float(config_.betas.size() > 0 ? config_.betas[0] : 0.9);
    const float b2 = float(config_.betas.size() > 1 ? config_.betas[1] : 0.999);
    const float eps = float(config_.eps);
    const float* g = grad_.f32() + (a - lo_);
    for (const auto& p : arena_.params()) {
      if (!p.trainable()) continue;
      const int64_t s = std::max(p.gradOffset, a), e = std::min(p.gradOffset + p.numel, b);
      if (e <= s) continue;
      const float wd = p.decay ? float(config_.weight_decay) : 0.f;
      const int64_t o = s - a;
      host_->adamwUpdate(w + o, g + o, m + o, v + o, e - s, lr, b1, b2, eps, wd, t_);
    }
  }
  // The updated shard back on the device: into the values (every tensor trainable; rounded to
  // the stored 16-bit weights when mixed), or left to the caller's gather over a frozen base.
  void publish(const float* master) {
    if (!arena_.allTrainable()) return;
    backend_->copyToDevice(arena_.values().f32() + lo_, master, size_t(hi_ - lo_) * sizeof(float));
    moved_ += (hi_ - lo_) * 4;
    arena_.roundWeightsRange(lo_, hi_);
  }
  void streamNvme(float lr) {
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
      if (arena_.allTrainable()) {
        backend_->copyToDevice(arena_.values().f32() + lo_ + c0, w, size_t(len) * sizeof(float));
        moved_ += len * 4;
      }
      for (int k = 0; k < 3; ++k)  // write behind
        writes[slot][k] = store_->write(k, c0 * 4, buf[slot] + k * chunk, len * 4);
    }
    store_->waitAll();
    if (arena_.allTrainable()) arena_.roundWeightsRange(lo_, hi_);
  }
  // nvme: host copies of the state for a checkpoint (read from the files; dropped at the next
  // step).
  void materialize() {
    if (materialized_) return;
    const int64_t n = hi_ - lo_;
    for (Tensor* t : {&m_, &v_, &master_})
      if (t->empty())
        *t = Tensor(host_.get(), tracker_, MemoryCategory::Workspace, DType::F32, {n},
                    MemoryTier::Host);
    store_->read(0, 0, m_.data(), n * 4);
    store_->read(1, 0, v_.data(), n * 4);
    store_->read(2, 0, master_.data(), n * 4);
    store_->waitAll();
    materialized_ = true;
  }
  void dropMaterialized() {
    m_ = Tensor();
    v_ = Tensor();
    master_ = Tensor();
    materialized_ = false;
  }

  core::OptimizerConfig config_;
  ParamArena& arena_;
  kernels::Backend* backend_;
  MemoryTracker* tracker_;
  OffloadOptions opts_;
  int64_t lo_ = 0, hi_ = 0, t_ = 0;
  std::unique_ptr<kernels::Backend> host_;
  Tensor grad_, m_, v_, master_;
  Tensor stage_[2];
  std::unique_ptr<OffloadStore> store_;
  bool materialized_ = false;
  int64_t moved_ = 0;
  double hostSeconds_ = 0;
};

}  // namespace

std::unique_ptr<Optimizer> makeOffloadedOptimizer(const core::OptimizerConfig& config,
                                                  ParamArena& arena, kernels::Backend* backend,
                                                  MemoryTracker* tracker, OptimizerShard shard,
                                                  const OffloadOptions& offload) {
  if (config.type != "adamw" || config.state_bits != 32)
    throw std::invalid_argument(
        "parallel.offload_optimizer runs AdamW with 32-bit state on the host (optimizer.type "
        "adamw, optimizer.state_bits 32)");
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
  return std::make_unique<OffloadedAdamW>(config, arena, backend, tracker, shard, offload);
}

}  // namespace ts::engine
