#include "trainscope/engine/train/Trainer.h"

#include "trainscope/engine/platform/GemmCalibration.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "trainscope/core/config/Schedule.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/engine/parallel/DataParallel.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/loss/DistillationLoss.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/LossScaler.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/optim/OffloadStore.h"
#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/ProfileSchedule.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::EventType;
using Clock = std::chrono::steady_clock;

std::vector<core::ConfigIssue> unsupportedFeatures(const core::RunConfig& c) {
  std::vector<core::ConfigIssue> out;
  auto add = [&](std::string path, nlohmann::json value, std::string why) {
    out.push_back({std::move(path), value.dump(), std::move(why)});
  };
  const std::string later = "is not implemented by this engine yet";
  core::modelFamily(core::archSpecOf(c.model, 2).arch).refusals(c, add);
  const auto& pol = c.precision.policy;
  if (pol != "fp32" && pol != "bf16" && pol != "fp16" && pol != "fp8" && pol != "pure_bf16")
    add("precision.policy", pol, pol + " " + later + " (use fp32, bf16, fp16, fp8 or pure_bf16)");
  if (c.optimizer.state_bits == 8 && c.optimizer.type != "adamw")
    add("optimizer.state_bits", c.optimizer.state_bits,
        "8-bit state is 8-bit AdamW: needs optimizer.type adamw");
  if (c.optimizer.state_bits == 8 && c.precision.policy == "pure_bf16")
    add("optimizer.state_bits", c.optimizer.state_bits,
        "8-bit AdamW keeps an fp32 master; pure_bf16 has none (use bf16)");
  if (c.memory.activation_compression == "sparse" && c.device.backend == "cuda")
    add("memory.activation_compression", c.memory.activation_compression,
        "sparse compression packs on the host: the cpu backend only (int8 runs on cuda)");
  const int stage = c.parallel.zero_stage;
  if (stage >= 1 && pol == "pure_bf16" && c.finetune.lora.r > 0)
    add("parallel.zero_stage", stage,
        "pure_bf16 keeps no fp32 master to shard over a frozen base: use precision.policy bf16");
  if (c.parallel.offload_optimizer != "none" && (c.optimizer.type != "adamw" || pol == "pure_bf16"))
    add("parallel.offload_optimizer", c.parallel.offload_optimizer,
        "the offloaded optimizer is AdamW (32- or 8-bit state) with an fp32 master "
        "(optimizer.type adamw, a policy other than pure_bf16)");

  if (c.finetune.base_quant == "nf4" && pol == "fp8")
    add("finetune.base_quant", c.finetune.base_quant,
        "an NF4 base multiplies in bf16 GEMMs: use precision.policy bf16 or fp32 with it");
  return out;
}

Trainer::Trainer(core::RunConfig config, kernels::Backend* backend, TrainerOptions options)
    : config_(std::move(config)), backend_(backend), options_(std::move(options)) {}

Trainer::~Trainer() = default;

void Trainer::post(const core::Command& command) {
  std::lock_guard lock(mutex_);
  commands_.push_back(command);
}

namespace {

// A ZeRO optimizer's state gathered on rank 0, as the checkpoint writer reads an optimizer.
class GatheredOptimizer final : public Optimizer {
 public:
  GatheredOptimizer(Optimizer& of, std::vector<std::pair<std::string, Tensor>>& state)
      : of_(of), state_(state) {}
  void step(float) override { throw std::logic_error("a gathered optimizer state only saves"); }
  int64_t stepCount() const override { return of_.stepCount(); }
  void setStepCount(int64_t) override {}
  std::vector<std::pair<std::string, Tensor*>> state() override {
    std::vector<std::pair<std::string, Tensor*>> out;
    for (auto& [n, t] : state_) out.emplace_back(n, &t);
    return out;
  }
  std::string name() const override { return of_.name(); }

 private:
  Optimizer& of_;
  std::vector<std::pair<std::string, Tensor>>& state_;
};

double msSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

nlohmann::json memoryFields(kernels::Backend* backend, const MemoryTracker& tracker,
                            const core::RunConfig& config, const CompressionStats& st,
                            const MemoryTracker* teacher, const nlohmann::json& params) {
  nlohmann::json j = core::toJson(tracker.report());
  if (!params.is_null()) j["params"] = params;
  // The distillation teacher's share (already counted in the categories above).
  if (teacher) j["teacher"] = core::toJson(teacher->report());
  // Compression of the last forward: ratio = fp32 bytes / stored bytes of the compressed
  // tensors; sparsity = fraction of ReLU outputs that were zero (sparse only).
  const std::string& mode = config.memory.activation_compression;
  if (mode != "none") {
    nlohmann::json c = {{"mode", mode},
                        {"raw_bytes", st.rawBytes},
                        {"stored_bytes", st.storedBytes},
                        {"ratio", st.storedBytes > 0 ? double(st.rawBytes) / st.storedBytes : 1.0}};
    if (st.reluValues > 0) c["sparsity"] = double(st.reluZeros) / double(st.reluValues);
    j["activation_compression"] = std::move(c);
  }
  j["process"] = {{"rss", processRssBytes()},
                  {"peak_rss", processPeakRssBytes()},
                  {"tracked", tracker.totalCurrent()},
                  {"tracked_peak", tracker.totalPeak()}};
  // The device's own count (CUDA: cudaMemGetInfo) beside the tracker's device tier: what the
  // tracker misses (the context, the library workspaces, untracked buffers) is the difference.
  int64_t used = 0, total = 0;
  if (backend->deviceMemory(&used, &total)) {
    int64_t tracked = 0;
    for (int c = 0; c < core::kMemoryCategoryCount; ++c)
      tracked += tracker.current(core::MemoryTier::Device, static_cast<core::MemoryCategory>(c));
    j["device_memory"] = {
        {"used", used}, {"total", total}, {"tracked", tracked}, {"untracked", used - tracked}};
  }
  return j;
}

}  // namespace

TrainResult Trainer::run() {
  TrainResult result;
  auto emit = [&](EventType t, nlohmann::json f, bool droppable = false) {
    if (options_.emit) options_.emit(t, std::move(f), droppable);
  };
  auto fail = [&](std::string reason, bool badInput) {
    emit(EventType::Error, {{"message", reason}, {"fatal", true}});
    result.status = "failed";
    result.reason = std::move(reason);
    result.badInput = badInput;
    return result;
  };
  auto log = [&](const std::string& msg) { emit(EventType::Log, {{"message", msg}}); };

  if (auto issues = unsupportedFeatures(config_); !issues.empty()) {
    std::string msg = "config uses features this engine cannot run:";
    for (const auto& i : issues) msg += "\n  " + i.toString();
    return fail(msg, true);
  }

  // ---- Ranks ------------------------------------------------------------------------------
  std::unique_ptr<Communicator> single;
  Communicator* comm = options_.comm;
  if (!comm) {
    single = makeSingleCommunicator();
    comm = single.get();
  }
  comm->interrupt = options_.interrupt;
  const int ranks = comm->size(), rank = comm->rank();
  if (ranks != config_.parallel.ranks)
    return fail("parallel.ranks is " + std::to_string(config_.parallel.ranks) +
                    " but the engine was started on " + std::to_string(ranks) +
                    " rank(s): start it with mpirun -np " + std::to_string(config_.parallel.ranks) +
                    " (scripts/trainscope run and the app do), or set parallel.ranks " +
                    std::to_string(ranks),
                true);
  if (ranks > 1)
    log("data parallel over " + std::to_string(ranks) + " ranks (" + comm->name() +
        "), ZeRO stage " + std::to_string(config_.parallel.zero_stage) + "; micro-batch " +
        std::to_string(config_.train.micro_batch) + " per rank");

  // ---- Data -------------------------------------------------------------------------------
  std::unique_ptr<Dataset> data;
  try {
    profiler::ScopedRange r("data_load", profiler::SpanCategory::Data);
    data = makeDataset(config_);
  } catch (const std::exception& e) {
    return fail(std::string("data: ") + e.what(), true);
  }
  const int dataVocab = data->vocabSize();
  const int vocab = config_.model.vocab > 0 ? config_.model.vocab : dataVocab;
  if (vocab < dataVocab)
    return fail("model.vocab " + std::to_string(vocab) +
                    " is smaller than the data's vocabulary (" + std::to_string(dataVocab) + ")",
                true);
  log("data: " + data->describe());

  // ---- Model + optimizer ------------------------------------------------------------------
  const int B = config_.train.micro_batch, T = config_.model.seq_len;
  const int accum = std::max(1, config_.train.grad_accum);
  std::unique_ptr<Gpt> model;
  std::unique_ptr<Optimizer> opt;
  auto outOfMemory = [&] {
    return fail("out of memory allocating the model (" + std::to_string(tracker_.totalCurrent()) +
                    " bytes tracked so far)",
                false);
  };
  try {
    GptConfig gc = gptConfigFrom(config_, vocab, backend_);
    if (ranks > 1) {  // ZeRO-3's weights, 2's gradients: this rank's shard only, from the start
      gc.partitionRanks = ranks;
      gc.partitionRank = rank;
      gc.partitionValues = config_.parallel.zero_stage >= 3;
      gc.partitionGrads = config_.parallel.zero_stage >= 2;
      gc.fp8PerBlock = gc.fp8 != GptConfig::Fp8Recipe::None && config_.parallel.zero_stage >= 3;
    }
    model = std::make_unique<Gpt>(gc, backend_, &tracker_);
    model->initWeights(config_.train.seed);
    model->allocate(B);
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  } catch (const std::exception& e) {
    return fail(std::string("model: ") + e.what(), true);
  }
  // Fine-tuning: the base's weights (the adapters keep their init: B = 0, so step 0 is the base).
  std::string baseChecksum;
  if (!config_.finetune.base_checkpoint.empty()) {
    try {
      const std::string& path = config_.finetune.base_checkpoint;
      const BaseWeights base = loadBase(path, model->arena(), &config_.model, vocab);
      if (model->mixed()) model->roundWeights();
      baseChecksum = base.checksum;
      log("base: " + std::to_string(base.tensors) + " tensors from the " + base.what + " " + path);
    } catch (const std::exception& e) {
      return fail(std::string("finetune.base_checkpoint: ") + e.what(), true);
    }
  } else if (config_.finetune.lora.r > 0) {
    emit(EventType::Warning,
         {{"message",
           "finetune.lora without finetune.base_checkpoint: the adapters train on a "
           "randomly initialised base (train.seed), which stays frozen"}});
  }
  std::unique_ptr<DataParallel> dp;
  try {
    if (ranks > 1) {
      dp = std::make_unique<DataParallel>(comm, &model->arena(), backend_, &tracker_,
                                          config_.parallel.zero_stage);
      model->setHooks(dp->hooks());
      if (model->config().fp8PerBlock) {
        dp->onGathered = [m = model.get()](int layer) { m->fp8BlockGathered(layer); };
        dp->onReleased = [m = model.get()](int layer) { m->fp8BlockReleased(layer); };
      }
    }
    if (config_.parallel.offload_optimizer != "none") {
      OffloadOptions oo;
      oo.where = config_.parallel.offload_optimizer;
      oo.dir = config_.parallel.nvme_path;
      oo.rank = rank;
      opt = makeOffloadedOptimizer(config_.optimizer, model->arena(), backend_, &tracker_,
                                   dp ? dp->optimizerShard() : OptimizerShard{}, oo);
      log("optimizer offloaded to " + oo.where +
          (oo.where == "nvme" ? " (" + oo.dir + "/rank" + std::to_string(rank) + ")" : "") +
          ": AdamW state and fp32 master of this rank's shard, updated on the host");
    } else {
      opt = makeOptimizer(config_.optimizer, model->arena(), backend_, &tracker_,
                          dp ? dp->optimizerShard() : OptimizerShard{});
    }
    // After the optimizer took its master from the weights: the shard leaves the device.
    if (dp && config_.parallel.offload_params != "none") {
      dp->offloadParams(config_.parallel.offload_params, config_.parallel.nvme_path);
      log("parameters offloaded to " + config_.parallel.offload_params +
          ": this rank's shard comes to the device with each gathered block");
    }
  } catch (const std::bad_alloc&) {
    return outOfMemory();
  } catch (const OffloadError& e) {
    return fail(std::string("parallel.nvme_path: ") + e.what(), true);
  } catch (const std::exception& e) {
    return fail(std::string("model: ") + e.what(), true);
  }
  {
    const ParamArena& pa = model->arena();
    log("model: " + std::to_string(pa.numParams()) + " parameters (" +
        std::to_string(pa.trainableParams()) + " trainable, " +
        std::to_string(pa.numParams() - pa.trainableParams()) + " frozen), vocab " +
        std::to_string(vocab));
    if (pa.nf4Bytes() > 0) {
      int64_t n = 0;
      for (const auto& p : pa.params())
        if (p.quantized()) n += p.numel;
      char bits[32];
      std::snprintf(bits, sizeof bits, "%.4f", 8.0 * double(pa.nf4Bytes()) / double(n));
      log("QLoRA: " + std::to_string(n) + " frozen linear weights stored as NF4 (" +
          std::to_string(pa.nf4Bytes()) + " bytes, " + bits +
          " bits/param with double quantization), dequantized to bf16 for each GEMM");
    }
  }
  // Distillation: the teacher, forward only, frozen, stored as distill.teacher_dtype.
  MemoryTracker teacherTracker;
  teacherTracker.setParent(&tracker_);
  std::unique_ptr<Gpt> teacher;
  const auto& dc = config_.distill;
  if (!dc.teacher_checkpoint.empty()) {
    const bool sixteen = model->mixed();
    const std::string dtype =
        dc.teacher_dtype == "auto" ? (sixteen ? "bf16" : "fp32") : dc.teacher_dtype;
    try {
      auto lm =
          loadModelFrom(dc.teacher_checkpoint, backend_, &teacherTracker, 0, [&](GptConfig& g) {
            g.inferenceOnly = true;
            g.flash = config_.attention.impl == "flash";
            g.working = dtype == "bf16" ? DType::BF16 : DType::F32;
            g.bf16Gemm = dtype == "bf16" && model->config().bf16Gemm;
            g.nf4Base = dtype == "nf4";
          });
      teacher = std::move(lm.model);
      const GptConfig& tg = teacher->config();
      if (tg.vocab != vocab)
        throw std::invalid_argument("the teacher's vocabulary is " + std::to_string(tg.vocab) +
                                    " tokens, the student's " + std::to_string(vocab) +
                                    " (distillation compares their distributions token by token)");
      if (tg.seq_len < T)
        throw std::invalid_argument("the teacher has " + std::to_string(tg.seq_len) +
                                    " positions, the run's model.seq_len is " + std::to_string(T));
      teacher->allocate(B);
      teacher->setTraining(false);
      log("teacher: " + std::to_string(teacher->numParams()) + " parameters (" + tg.architecture +
          ", " + std::to_string(tg.layers) + " layers, d_model " + std::to_string(tg.d_model) +
          ") from " + dc.teacher_checkpoint + ", stored " + dtype +
          ", forward only; loss = alpha T^2 KL + (1 - alpha) CE with T " +
          nlohmann::json(dc.temperature).dump() + ", alpha " + nlohmann::json(dc.alpha).dump());
    } catch (const std::bad_alloc&) {
      return outOfMemory();
    } catch (const std::exception& e) {
      return fail(std::string("distill.teacher_checkpoint: ") + e.what(), true);
    }
  }
  // Parameter counts for the dashboard (memory events): trainable vs frozen, NF4, teacher.
  nlohmann::json paramCounts;
  {
    const ParamArena& pa = model->arena();
    paramCounts = {{"total", pa.numParams()},
                   {"trainable", pa.trainableParams()},
                   {"frozen", pa.numParams() - pa.trainableParams()},
                   {"nf4_bytes", pa.nf4Bytes()},
                   {"teacher", teacher ? teacher->numParams() : 0}};
  }
  const DistillationLoss distillLoss(backend_, static_cast<float>(dc.temperature),
                                     static_cast<float>(dc.alpha));
  if (config_.precision.policy == "fp8")
    log("precision fp8 (" + config_.precision.fp8.recipe +
        " scaling): block linear GEMMs emulated on this CPU (operands quantized to fp8, "
        "dequantized, fp32 sgemm); weights bf16 + fp8 copies, fp32 master");
  else if (config_.precision.policy == "pure_bf16")
    log("precision pure_bf16: bf16 weights, gradients and optimizer state, no fp32 master "
        "(updates below half a bf16 ulp of a weight are lost)");
  if (config_.precision.policy == "bf16" || config_.precision.policy == "pure_bf16") {
    std::string impl;
    const bool native = kernels::cpu::matmulBf16Native(&impl);
    if (model->config().bf16Gemm && native)
      log("block linear GEMMs in bf16 (fp32 accumulation): oneDNN " + impl);
    else if (model->config().bf16Gemm)
      emit(EventType::Warning,
           {{"message", "precision.gemm bf16: bf16 GEMMs are emulated on this CPU (" + impl +
                            "), which is slower than precision.gemm fp32"}});
    else
      log("block linear GEMMs on fp32 copies of the bf16 weights (precision.gemm " +
          config_.precision.gemm +
          (config_.precision.gemm == "auto"
               ? "; auto: " + (native ? "oneDNN's bf16 kernel measured " +
                                            std::to_string(gemmCalibration().ratio()) +
                                            "x sgemm here (" + gemmCalibration().source + ")"
                                      : impl)
               : "") +
          ")");
  }

  if (model->config().flashBf16)
    log("flash attention on bf16 tensor cores (" + backend_->name() + ", head dim " +
        std::to_string(model->config().arch().headDim()) + ")");

  const nlohmann::json configJson = core::toJson(config_);
  const std::string ckptDir =
      (std::filesystem::path(options_.runDir.empty() ? "." : options_.runDir) / "checkpoints")
          .string();

  // fp16 only: dynamic (or static) loss scaling with GradScaler semantics.
  std::optional<LossScaler> scaler;
  if (config_.precision.policy == "fp16") {
    try {
      scaler.emplace(config_.precision.loss_scale);
    } catch (const std::exception& e) {
      return fail(e.what(), true);
    }
  }

  int64_t step = 0;
  int64_t tokens = 0;
  double bestVal = NAN;
  if (!options_.resumePath.empty()) {
    try {
      auto loaded = loadCheckpoint(options_.resumePath, model->arena(), opt.get(),
                                   dp ? dp->optimizerShard() : OptimizerShard{});
      if (loaded.state.extra.contains("base_checkpoint")) {
        const auto& b = loaded.state.extra["base_checkpoint"];
        if (b.value("checksum", "") != baseChecksum)
          throw CheckpointError(
              "the checkpoint's adapters were trained on the base " + b.value("path", "?") +
              " (checksum " + b.value("checksum", "?") + "), but finetune.base_checkpoint is " +
              (config_.finetune.base_checkpoint.empty()
                   ? std::string("not set")
                   : config_.finetune.base_checkpoint + " (checksum " + baseChecksum + ")"));
      }
      data->restore(loaded.state.data);
      step = loaded.state.step;
      tokens = loaded.state.tokens;
      if (loaded.state.extra.contains("best_val_loss") &&
          loaded.state.extra["best_val_loss"].is_number())
        bestVal = loaded.state.extra["best_val_loss"].get<double>();
      if (scaler && loaded.state.extra.contains("loss_scaler"))
        scaler->loadState(loaded.state.extra["loss_scaler"]);
      result.lastCheckpoint = loaded.path;
      // 16-bit working copy from the loaded (16-bit representable) weights.
      if (model->mixed()) model->roundWeights();
      // The fp8 weights at the saved scales (ZeRO-3: per block, at each gather).
      if (model->fp8()) {
        if (loaded.state.extra.contains("fp8"))
          model->loadFp8State(loaded.state.extra["fp8"]);
        else
          emit(EventType::Warning,
               {{"message", "checkpoint " + loaded.path +
                                " has no fp8 scaling state (written before it was saved): the "
                                "amax histories start empty"}});
      }
      if (dp) dp->reshard();  // ZeRO-3 parameter offload: the loaded shard goes to its tier
      log("resumed from " + loaded.path + " at step " + std::to_string(step));
    } catch (const std::exception& e) {
      return fail("resume: " + std::string(e.what()), true);
    }
  }

  // ZeRO 2/3: the setup peak (initialization and loading, which touch only this rank's shard)
  // is reported on its own, and the peaks from here on are the training's.
  int64_t setupPeak = -1;
  if (dp && dp->stage() >= 2) {
    setupPeak = tracker_.totalPeak();
    tracker_.resetPeaks();
  }

  // ---- Helpers ----------------------------------------------------------------------------
  auto saveCkpt = [&](const char* why) -> bool {
    TrainingState st;
    st.step = step;
    st.tokens = tokens;
    st.data = data->state();
    st.attachments = data->tokenizerFiles();
    st.extra = {
        {"best_val_loss", std::isfinite(bestVal) ? nlohmann::json(bestVal) : nlohmann::json()},
        {"reason", why}};
    if (scaler) st.extra["loss_scaler"] = scaler->state();
    if (model->fp8()) st.extra["fp8"] = model->fp8State();
    // An adapter checkpoint is only meaningful on its base: say which one.
    if (!baseChecksum.empty())
      st.extra["base_checkpoint"] = {{"path", config_.finetune.base_checkpoint},
                                     {"checksum", baseChecksum}};
    // ZeRO: the shards come together on rank 0, which writes one checkpoint in this run's layout
    // (recorded, so any number of ranks can resume it); the other ranks write nothing.
    std::vector<std::pair<std::string, Tensor>> gathered;
    if (dp && dp->stage() >= 1) {
      try {
        gathered = dp->gatherOptimizerState(*opt, 0);
        dp->gatherAll();
      } catch (const std::exception& e) {
        emit(EventType::Warning, {{"message", std::string("checkpoint at step ") +
                                                  std::to_string(step) + " failed: " + e.what()}});
        return false;
      }
      const ParamArena& pa = model->arena();
      st.extra["zero_layout"] = {{"ranks", ranks},
                                 {"stage", dp->stage()},
                                 {"align", pa.options().align},
                                 {"pad_to", pa.options().padTo},
                                 {"tensor_align", pa.options().tensorAlign}};
    }
    struct Release {
      DataParallel* dp;
      ~Release() {
        if (dp && dp->stage() >= 1) dp->releaseAll();
      }
    } release{dp.get()};
    if (rank != 0) return true;
    try {
      GatheredOptimizer full(*opt, gathered);
      Optimizer& writeOpt = gathered.empty() ? *opt : static_cast<Optimizer&>(full);
      auto info = saveCheckpoint(ckptDir, model->arena(), writeOpt, configJson, st);
      pruneCheckpoints(ckptDir, std::max(1, options_.keepCheckpoints));
      result.lastCheckpoint = info.path;
      emit(EventType::Checkpoint, {{"path", info.path},
                                   {"step", info.step},
                                   {"checksum", info.checksum},
                                   {"bytes", info.bytes},
                                   {"reason", why}});
      return true;
    } catch (const std::exception& e) {
      emit(EventType::Warning,
           {{"message",
             std::string("checkpoint at step ") + std::to_string(step) +
                 " failed, previous checkpoint kept" +
                 (result.lastCheckpoint.empty() ? "" : " (" + result.lastCheckpoint + ")") + ": " +
                 e.what()}});
      return false;
    }
  };

  // Compression numbers of the last training micro-batch (eval forwards would mix in prompts).
  CompressionStats compStats;
  // Every rank's memory in one event: rank 0 gathers the others' tables (all ranks call this).
  auto memoryEvent = [&] {
    nlohmann::json f = memoryFields(backend_, tracker_, config_, compStats,
                                    teacher ? &teacherTracker : nullptr, paramCounts);
    if (setupPeak >= 0) f["process"]["setup_peak"] = setupPeak;
    if (ranks > 1) {
      nlohmann::json mine = {{"ranks", f["ranks"]}, {"process", f["process"]}};
      const auto all = comm->gatherStrings(mine.dump(), 0);
      if (rank != 0) return;
      nlohmann::json rs = nlohmann::json::array(), procs = nlohmann::json::array();
      for (size_t i = 0; i < all.size(); ++i) {
        const auto j = nlohmann::json::parse(all[i]);
        for (auto rr : j.at("ranks")) {
          rr["rank"] = static_cast<int>(i);
          rs.push_back(std::move(rr));
        }
        procs.push_back(j.at("process"));
      }
      f["ranks"] = std::move(rs);
      f["rank_process"] = std::move(procs);
    }
    emit(EventType::Memory, std::move(f));
  };
  const int evalB = B;
  auto evaluate = [&]() {
    profiler::ScopedRange r("eval", profiler::SpanCategory::Other);
    // ZeRO-3: the embeddings and head gathered for the evaluation's forwards.
    struct Resident {
      DataParallel* dp;
      explicit Resident(DataParallel* d) : dp(d) {
        if (dp) dp->gatherResident();
      }
      ~Resident() {
        if (dp) dp->releaseResident();
      }
    } resident(dp.get());
    model->setTraining(false);  // no dropout while evaluating
    struct Training {
      Gpt* m;
      ~Training() { m->setTraining(true); }
    } training{model.get()};
    nlohmann::json ev = {{"step", step}};
    // Several ranks: each evaluates its rows of the global validation batch (ranks * B rows,
    // as one rank with that micro-batch would), the sums are added up.
    const int64_t nb =
        std::min<int64_t>(data->valBatchCount(evalB * ranks, T), options_.evalBatches);
    std::vector<int32_t> in(static_cast<size_t>(evalB) * T * ranks), tg(in.size());
    const int64_t mine = int64_t(rank) * evalB * T;
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < nb; ++i) {
      data->valBatch(i, in.data(), tg.data(), evalB * ranks, T);
      int64_t c = 0;
      sum += model->forward(in.data() + mine, tg.data() + mine, evalB, T, 0.f, &c);
      count += c;
    }
    if (ranks > 1) {
      sum = comm->allReduceSum(sum);
      count = static_cast<int64_t>(comm->allReduceSum(static_cast<double>(count)));
    }
    if (count > 0) {
      const double vl = sum / static_cast<double>(count);
      ev["val_loss"] = vl;
      ev["val_tokens"] = count;
      result.finalValLoss = vl;
      if (!std::isfinite(bestVal) || vl < bestVal) bestVal = vl;
    }
    if (data->hasExactMatch()) {
      auto samples = data->exactMatchSamples(options_.exactMatchSamples);
      int64_t correct = 0;
      // Greedy decoding, batched over samples with equal prompt length.
      std::vector<size_t> order(samples.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return samples[a].first.size() < samples[b].first.size();
      });
      std::vector<float> row(static_cast<size_t>(vocab));
      size_t pos = 0;
      while (pos < order.size()) {
        size_t end = pos;
        const size_t plen = samples[order[pos]].first.size();
        while (end < order.size() && end - pos < static_cast<size_t>(evalB) &&
               samples[order[end]].first.size() == plen)
          ++end;
        const int nb2 = static_cast<int>(end - pos);
        size_t maxAns = 0;
        for (size_t k = pos; k < end; ++k)
          maxAns = std::max(maxAns, samples[order[k]].second.size());
        std::vector<std::vector<int32_t>> seqs, gen(nb2);
        for (size_t k = pos; k < end; ++k) seqs.push_back(samples[order[k]].first);
        for (size_t g = 0; g < maxAns; ++g) {
          const int len = static_cast<int>(std::min<size_t>(seqs[0].size(), T));
          std::vector<int32_t> batch(static_cast<size_t>(nb2) * len);
          for (int b = 0; b < nb2; ++b)
            std::copy(seqs[b].end() - len, seqs[b].end(), batch.begin() + int64_t(b) * len);
          model->forward(batch.data(), nullptr, nb2, len, 0.f);
          for (int b = 0; b < nb2; ++b) {
            model->logitsRow(b, len - 1, row.data());
            const int32_t next = static_cast<int32_t>(
                std::max_element(row.begin(), row.begin() + dataVocab) - row.begin());
            seqs[b].push_back(next);
            gen[b].push_back(next);
          }
        }
        for (int b = 0; b < nb2; ++b) {
          const auto& want = samples[order[pos + b]].second;
          if (std::equal(want.begin(), want.end(), gen[b].begin())) ++correct;
        }
        pos = end;
      }
      if (!samples.empty()) {
        result.accuracy = static_cast<double>(correct) / static_cast<double>(samples.size());
        ev["accuracy"] = result.accuracy;
        ev["exact_match_samples"] = samples.size();
      }
    }
    if (std::isfinite(bestVal)) ev["best_val_loss"] = bestVal;
    emit(EventType::Eval, ev);
    memoryEvent();
  };

  profiler::ProfileController profile(
      config_.profile.enabled
          ? profiler::ProfileSchedule(config_.profile.wait, config_.profile.warmup,
                                      config_.profile.active, config_.profile.repeat)
          : profiler::ProfileSchedule());
  // Several ranks: every rank profiles the same steps; rank 0 gathers their timelines and
  // emits each rank's batches (the timeline's lane groups), its own summary first.
  auto emitWindow = [&](const profiler::ProfileWindow& w) {
    auto mine = profiler::kernelsBatches(w, rank, profiler::Tracer::instance().epochUnixNs());
    if (ranks > 1) {
      const auto all = comm->gatherStrings(nlohmann::json(mine).dump(), 0);
      if (rank != 0) return;
      emit(EventType::KernelSummary, profiler::toJson(profiler::summarize(w, 0)));
      for (const auto& text : all)
        for (auto& batch : nlohmann::json::parse(text))
          emit(EventType::Kernels, std::move(batch), true);
      return;
    }
    emit(EventType::KernelSummary, profiler::toJson(profiler::summarize(w, 0)));
    for (auto& batch : mine) emit(EventType::Kernels, std::move(batch), true);
  };

  // ---- Loop ---------------------------------------------------------------------------------
  bool paused = false, stopRequested = false, ckptRequested = false;
  int profileAsk = 0;  // steps a profile command asked for (applied in syncControl)
  auto drainCommands = [&] {
    std::deque<core::Command> cmds;
    {
      std::lock_guard lock(mutex_);
      cmds.swap(commands_);
    }
    for (const auto& c : cmds) {
      switch (c.type) {
        case core::CommandType::Stop:
          stopRequested = true;
          break;
        case core::CommandType::Pause:
          if (!paused) log("paused at step " + std::to_string(step));
          paused = true;
          break;
        case core::CommandType::Resume:
          if (paused) log("resumed at step " + std::to_string(step));
          paused = false;
          break;
        case core::CommandType::Checkpoint:
          ckptRequested = true;
          break;
        case core::CommandType::Profile:
          profileAsk = c.steps > 0                  ? c.steps
                       : config_.profile.active > 0 ? config_.profile.active
                                                    : 3;
          log("profiling the next " + std::to_string(c.steps > 0 ? c.steps : 3) + " steps");
          break;
        default:
          emit(EventType::Warning, {{"message", "unknown command ignored: " + c.raw}});
      }
    }
  };
  auto interrupted = [&] { return options_.interrupt && options_.interrupt->load(); };
  // Commands reach rank 0 only (mpirun forwards stdin there) and signals may reach ranks at
  // different steps: every decision that starts or skips collectives (stop, pause, an extra
  // checkpoint, a profiled window) is agreed on by all ranks at the step boundary.
  auto syncControl = [&] {
    if (ranks > 1) {
      const bool stop = stopRequested || interrupted();
      stopRequested = comm->allReduceMax(stop ? 1.0 : 0.0) > 0;
      // Rank 0's word (the others offer -1): it alone reads the commands.
      auto fromRoot = [&](double v) { return comm->allReduceMax(rank == 0 ? v : -1.0); };
      paused = fromRoot(paused ? 1.0 : 0.0) > 0;
      ckptRequested = fromRoot(ckptRequested ? 1.0 : 0.0) > 0;
      profileAsk = static_cast<int>(fromRoot(static_cast<double>(profileAsk)));
    }
    if (profileAsk > 0) profile.requestSteps(profileAsk);
    profileAsk = 0;
  };

  const int64_t perMicro = static_cast<int64_t>(B) * T;
  std::vector<int32_t> inputs(static_cast<size_t>(perMicro * accum)), targets(inputs.size());
  const int64_t firstStep = step;
  double sumStepMs = 0;
  int64_t stepsHere = 0, tokensHere = 0;
  bool failed = false;

  while (step < config_.train.steps) {
    drainCommands();
    syncControl();
    // Several ranks stop on the agreed flag only (a signal seen by one rank alone waits a step).
    auto stopNow = [&] { return stopRequested || (ranks == 1 && interrupted()); };
    while (paused && !stopNow()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      drainCommands();
      syncControl();
    }
    if (stopNow()) break;

    profile.beginStep(step);
    profiler::Tracer::instance().setStep(step);
    const auto t0 = Clock::now();
    const float lossScale = scaler ? scaler->scale() : 1.f;
    double lossSum = 0;
    DistillationSums dsum;  // distillation: both terms of the step
    double difficulty = 1.0;
    int64_t count = 0;
    {
      profiler::ScopedRange sr("step", profiler::SpanCategory::Step);
      {
        profiler::ScopedRange r("data", profiler::SpanCategory::Data);
        difficulty = core::curriculumFraction(config_, step);
        data->setDifficulty(difficulty);
        if (ranks == 1) {
          for (int a = 0; a < accum; ++a)
            data->nextTrainBatch(inputs.data() + a * perMicro, targets.data() + a * perMicro, B, T);
        } else {
          // The global micro-batch is ranks * B rows (what one rank with micro_batch ranks * B
          // would see); this rank reads rows [rank * B, (rank + 1) * B) of it.
          for (int a = 0; a < accum; ++a)
            data->nextTrainRows(inputs.data() + a * perMicro, targets.data() + a * perMicro,
                                B * ranks, T, rank * B, B);
        }
      }
      int64_t total = 0;
      for (int32_t t : targets) total += t >= 0 ? 1 : 0;
      // The loss is normalized by the global batch's target tokens.
      if (ranks > 1) total = static_cast<int64_t>(comm->allReduceSum(static_cast<double>(total)));
      // Gradient accumulation: every token loss is divided by the total number of target tokens
      // of the whole step, not by each micro-batch's own count.
      // fp16: the loss (hence every gradient) is multiplied by the loss scale before backward.
      const float dloss = total > 0 ? lossScale / static_cast<float>(total) : 0.f;
      if (dp) {
        dp->beginStep();
        dp->zeroGrad();
      } else {
        model->zeroGrad();
      }
      for (int a = 0; a < accum; ++a) {
        int64_t c = 0;
        if (dp) dp->beginMicroBatch(a == accum - 1);
        // Dropout masks keyed by the global micro-step: a resumed run draws the same ones.
        model->setDropoutKey(static_cast<uint64_t>(step) * accum + a);
        const int32_t* in = inputs.data() + a * perMicro;
        const int32_t* tg = targets.data() + a * perMicro;
        if (teacher) {
          teacher->forward(in, nullptr, B, T, 0.f);
          model->forward(in, nullptr, B, T, 0.f);
          // The per-row KL goes to the teacher's loss buffer (unused by its forward).
          const auto s = distillLoss.forwardBackward(
              model->logits(), teacher->logits(), model->targetsBuffer(), model->lossesBuffer(),
              teacher->lossesBuffer(), tg, B * T, vocab, dloss);
          model->lossGradientWritten();
          lossSum += s.objective(dc.temperature, dc.alpha);
          dsum.ce += s.ce;
          dsum.kl += s.kl;
          c = s.count;
        } else {
          lossSum += model->forward(in, tg, B, T, dloss, &c);
        }
        // fp8: every rank keeps the amax histories of the whole batch.
        auto maxOverRanks = [&](std::vector<double>& v) { comm->allReduceMax(v); };
        if (ranks > 1 && model->fp8()) model->reduceFp8Amaxes(false, maxOverRanks);
        count += c;
        compStats = model->compressionStats();
        if (dp) dp->beginBackward();
        model->backward();
        if (ranks > 1 && model->fp8()) model->reduceFp8Amaxes(true, maxOverRanks);
        if (dp) dp->endMicroBatch();
      }
    }
    if (ranks > 1) {  // the global batch's loss
      lossSum = comm->allReduceSum(lossSum);
      count = static_cast<int64_t>(comm->allReduceSum(static_cast<double>(count)));
      dsum.ce = comm->allReduceSum(dsum.ce);
      dsum.kl = comm->allReduceSum(dsum.kl);
    }
    const double loss = count > 0 ? lossSum / static_cast<double>(count) : 0.0;
    if (!std::isfinite(loss)) {
      profile.endStep(step);
      failed = true;
      const std::string where = result.lastCheckpoint.empty()
                                    ? "no checkpoint was written before it"
                                    : "last good checkpoint kept: " + result.lastCheckpoint;
      emit(EventType::Error,
           {{"message", "loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                            " at step " + std::to_string(step + 1) + "; training stopped (" +
                            where + "). Lower optimizer.lr or enable train.grad_clip."},
            {"step", step + 1},
            {"fatal", true}});
      result.reason = "loss became non-finite at step " + std::to_string(step + 1);
      break;
    }
    // 16-bit gradients; fp16: unscale in fp32, skip the step on inf/NaN (GradScaler).
    dp ? dp->roundGrads() : model->roundGrads();
    bool skipped = false;
    if (scaler) {
      ParamArena& pa = model->arena();
      if (dp) {
        dp->scaleGrads(1.f / lossScale);
        skipped = !scaler->update(dp->countNonFinite() > 0);
      } else {
        pa.scaleGrads(1.f / lossScale);
        skipped = !scaler->update(pa.gradNonFinite() > 0);
      }
    }
    double gradNorm = 0.0;  // not computed for a skipped step (its gradients hold inf/NaN)
    const double lr = core::learningRate(config_, step);
    if (!skipped) {
      if (dp) {
        gradNorm = dp->clipGradNorm(config_.train.grad_clip);
        dp->optimizerStep(*opt, static_cast<float>(lr));
      } else {
        gradNorm = clipGradNorm(model->arena(), backend_, config_.train.grad_clip);
        opt->step(static_cast<float>(lr));
      }
    }
    if (dp) dp->endStep();
    const double stepMs = msSince(t0);
    ++step;
    tokens += perMicro * accum * ranks;
    ++stepsHere;
    tokensHere += perMicro * accum * ranks;
    sumStepMs += stepMs;
    result.finalLoss = loss;

    core::StepEvent se;
    se.step = step;
    se.loss = loss;
    se.lr = lr;
    se.grad_norm = gradNorm;
    se.tokens = tokens;
    se.step_ms = stepMs;
    se.tokens_per_s = stepMs > 0 ? perMicro * accum * ranks / (stepMs / 1000.0) : 0;
    se.loss_scale = lossScale;  // the scale this step's backward used
    se.skipped = skipped;
    nlohmann::json sf = core::toJson(se);
    sf["total_steps"] = config_.train.steps;
    sf["target_tokens"] = count;
    if (ranks > 1) {
      sf["ranks"] = ranks;
      sf["comm_bytes"] = comm->takeBytesSent();  // this rank's, as a ring sends them
    }
    nlohmann::json optStats = opt->takeStepStats();
    if (dp) optStats.update(dp->takeStepStats());
    for (auto it = optStats.begin(); it != optStats.end(); ++it) sf[it.key()] = it.value();
    // Curriculum: the fraction of the data's difficulty (or length) range this batch drew from.
    if (config_.curriculum.type != "none") sf["difficulty"] = difficulty;
    if (teacher && count > 0) {  // both terms, per token: loss = alpha T^2 kl + (1 - alpha) ce
      sf["distill_ce"] = dsum.ce / double(count);
      sf["distill_kl"] = dsum.kl / double(count);
    }
    emit(EventType::Step, sf);
    if (auto w = profile.endStep(step - 1)) emitWindow(*w);
    for (auto& w : profile.takeWarnings()) emit(EventType::Warning, {{"message", w}});

    if (step == firstStep + 1) memoryEvent();
    const bool last = step >= config_.train.steps;
    if ((config_.train.eval_every > 0 && step % config_.train.eval_every == 0) || last) evaluate();
    drainCommands();
    syncControl();
    if (!last &&
        ((config_.train.checkpoint_every > 0 && step % config_.train.checkpoint_every == 0) ||
         ckptRequested)) {
      saveCkpt(ckptRequested ? "requested" : "periodic");
      ckptRequested = false;
    }
  }

  result.steps = step;
  result.bestValLoss = bestVal;
  result.tokensPerSecond = sumStepMs > 0 ? tokensHere / (sumStepMs / 1000.0) : 0;
  result.memory = tracker_.report();
  result.peakBytes = tracker_.totalPeak();
  if (failed) {
    result.status = "failed";
    return result;
  }
  const bool stopped = step < config_.train.steps;
  saveCkpt(stopped ? "stopped" : "final");
  if (stopped) {
    result.status = "stopped";
    result.interrupted = interrupted();
    result.reason = result.interrupted ? "interrupted by signal at step " + std::to_string(step)
                                       : "stop requested at step " + std::to_string(step);
  } else {
    result.status = "completed";
    result.reason = "trained " + std::to_string(step) + " steps";
  }
  (void)stepsHere;
  return result;
}

}  // namespace ts::engine
