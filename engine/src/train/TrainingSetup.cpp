// A run's setup: what the config asks is checked, then ranks, data, the model (and its base),
// the optimizer with data parallel and offload, the distillation teacher and the loss scaler,
// each logged as it comes. A step that cannot go on throws SetupFailure.
#include <cstdio>
#include <filesystem>

#include "TrainingSession.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/optim/OffloadStore.h"
#include "trainscope/engine/platform/GemmCalibration.h"
#include "trainscope/kernels/CpuOps.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using core::EventType;

void TrainingSession::checkSupported() {
  if (auto issues = unsupportedFeatures(config_); !issues.empty()) {
    std::string msg = "config uses features this engine cannot run:";
    for (const auto& i : issues) msg += "\n  " + i.toString();
    throw SetupFailure{msg, true};
  }
}

void TrainingSession::setUpRanks() {
  comm_ = options_.comm;
  if (!comm_) {
    single_ = makeSingleCommunicator();
    comm_ = single_.get();
  }
  comm_->interrupt = options_.interrupt;
  ranks_ = comm_->size();
  rank_ = comm_->rank();
  if (ranks_ != config_.parallel.ranks)
    throw SetupFailure{"parallel.ranks is " + std::to_string(config_.parallel.ranks) +
                           " but the engine was started on " + std::to_string(ranks_) +
                           " rank(s): start it with mpirun -np " +
                           std::to_string(config_.parallel.ranks) +
                           " (scripts/trainscope run and the app do), or set parallel.ranks " +
                           std::to_string(ranks_),
                       true};
  if (ranks_ > 1)
    log("data parallel over " + std::to_string(ranks_) + " ranks (" + comm_->name() +
        "), ZeRO stage " + std::to_string(config_.parallel.zero_stage) + "; micro-batch " +
        std::to_string(config_.train.micro_batch) + " per rank");
}

void TrainingSession::loadData() {
  try {
    profiler::ScopedRange r("data_load", profiler::SpanCategory::Data);
    data_ = makeDataset(config_);
  } catch (const std::exception& e) {
    throw SetupFailure{std::string("data: ") + e.what(), true};
  }
  dataVocab_ = data_->vocabSize();
  vocab_ = config_.model.vocab > 0 ? config_.model.vocab : dataVocab_;
  if (vocab_ < dataVocab_)
    throw SetupFailure{"model.vocab " + std::to_string(vocab_) +
                           " is smaller than the data's vocabulary (" + std::to_string(dataVocab_) +
                           ")",
                       true};
  log("data: " + data_->describe());
}

void TrainingSession::outOfMemory() {
  throw SetupFailure{"out of memory allocating the model (" +
                         std::to_string(tracker_.totalCurrent()) + " bytes tracked so far)",
                     false};
}

void TrainingSession::buildModel() {
  B_ = config_.train.micro_batch;
  T_ = config_.model.seq_len;
  accum_ = std::max(1, config_.train.grad_accum);
  try {
    GptConfig gc = gptConfigFrom(config_, vocab_, backend_);
    if (ranks_ > 1) {  // ZeRO-3's weights, 2's gradients: this rank's shard only, from the start
      gc.partitionRanks = ranks_;
      gc.partitionRank = rank_;
      gc.partitionValues = config_.parallel.zero_stage >= 3;
      gc.partitionGrads = config_.parallel.zero_stage >= 2;
      gc.fp8PerBlock = gc.fp8 != GptConfig::Fp8Recipe::None && config_.parallel.zero_stage >= 3;
    }
    model_ = std::make_unique<Gpt>(gc, backend_, &tracker_);
    model_->initWeights(config_.train.seed);
    model_->allocate(B_);
  } catch (const std::bad_alloc&) {
    outOfMemory();
  } catch (const std::exception& e) {
    throw SetupFailure{std::string("model: ") + e.what(), true};
  }
}

// Fine-tuning: the base's weights (the adapters keep their init: B = 0, so step 0 is the base).
void TrainingSession::loadBase() {
  if (!config_.finetune.base_checkpoint.empty()) {
    try {
      const std::string& path = config_.finetune.base_checkpoint;
      const BaseWeights base = engine::loadBase(path, model_->arena(), &config_.model, vocab_);
      if (model_->mixed()) model_->roundWeights();
      baseChecksum_ = base.checksum;
      log("base: " + std::to_string(base.tensors) + " tensors from the " + base.what + " " + path);
    } catch (const std::exception& e) {
      throw SetupFailure{std::string("finetune.base_checkpoint: ") + e.what(), true};
    }
  } else if (config_.finetune.lora.r > 0) {
    warn(
        "finetune.lora without finetune.base_checkpoint: the adapters train on a randomly "
        "initialised base (train.seed), which stays frozen");
  }
}

void TrainingSession::buildOptimizer() {
  try {
    if (ranks_ > 1) {
      dp_ = std::make_unique<DataParallel>(comm_, &model_->arena(), backend_, &tracker_,
                                           config_.parallel.zero_stage);
      model_->setHooks(dp_->hooks());
      if (model_->config().fp8PerBlock) {
        dp_->onGathered = [m = model_.get()](int layer) { m->fp8BlockGathered(layer); };
        dp_->onReleased = [m = model_.get()](int layer) { m->fp8BlockReleased(layer); };
      }
    }
    const OptimizerShard shard = dp_ ? dp_->optimizerShard() : OptimizerShard{};
    if (config_.parallel.offload_optimizer != "none") {
      OffloadOptions oo;
      oo.where = config_.parallel.offload_optimizer;
      oo.dir = config_.parallel.nvme_path;
      oo.rank = rank_;
      opt_ = makeOffloadedOptimizer(config_.optimizer, model_->arena(), backend_, &tracker_, shard,
                                    oo);
      log("optimizer offloaded to " + oo.where +
          (oo.where == "nvme" ? " (" + oo.dir + "/rank" + std::to_string(rank_) + ")" : "") +
          ": AdamW state and fp32 master of this rank's shard, updated on the host");
    } else {
      opt_ = makeOptimizer(config_.optimizer, model_->arena(), backend_, &tracker_, shard);
    }
    // After the optimizer took its master from the weights: the shard leaves the device.
    if (dp_ && config_.parallel.offload_params != "none") {
      dp_->offloadParams(config_.parallel.offload_params, config_.parallel.nvme_path);
      log("parameters offloaded to " + config_.parallel.offload_params +
          ": this rank's shard comes to the device with each gathered block");
    }
  } catch (const std::bad_alloc&) {
    outOfMemory();
  } catch (const OffloadError& e) {
    throw SetupFailure{std::string("parallel.nvme_path: ") + e.what(), true};
  } catch (const std::exception& e) {
    throw SetupFailure{std::string("model: ") + e.what(), true};
  }
}

void TrainingSession::logModel() {
  const ParamArena& pa = model_->arena();
  log("model: " + std::to_string(pa.numParams()) + " parameters (" +
      std::to_string(pa.trainableParams()) + " trainable, " +
      std::to_string(pa.numParams() - pa.trainableParams()) + " frozen), vocab " +
      std::to_string(vocab_));
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

// Distillation: the teacher, forward only, frozen, stored as distill.teacher_dtype. Then the
// parameter counts the dashboard shows (trainable vs frozen, NF4, teacher).
void TrainingSession::loadTeacher() {
  teacherTracker_.setParent(&tracker_);
  const auto& dc = config_.distill;
  if (!dc.teacher_checkpoint.empty()) {
    const bool sixteen = model_->mixed();
    const std::string dtype =
        dc.teacher_dtype == "auto" ? (sixteen ? "bf16" : "fp32") : dc.teacher_dtype;
    try {
      auto lm =
          loadModelFrom(dc.teacher_checkpoint, backend_, &teacherTracker_, 0, [&](GptConfig& g) {
            g.inferenceOnly = true;
            g.flash = config_.attention.impl == "flash";
            g.working = dtype == "bf16" ? DType::BF16 : DType::F32;
            g.bf16Gemm = dtype == "bf16" && model_->config().bf16Gemm;
            g.nf4Base = dtype == "nf4";
          });
      teacher_ = std::move(lm.model);
      const GptConfig& tg = teacher_->config();
      if (tg.vocab != vocab_)
        throw std::invalid_argument("the teacher's vocabulary is " + std::to_string(tg.vocab) +
                                    " tokens, the student's " + std::to_string(vocab_) +
                                    " (distillation compares their distributions token by token)");
      if (tg.seq_len < T_)
        throw std::invalid_argument("the teacher has " + std::to_string(tg.seq_len) +
                                    " positions, the run's model.seq_len is " + std::to_string(T_));
      teacher_->allocate(B_);
      teacher_->setTraining(false);
      log("teacher: " + std::to_string(teacher_->numParams()) + " parameters (" + tg.architecture +
          ", " + std::to_string(tg.layers) + " layers, d_model " + std::to_string(tg.d_model) +
          ") from " + dc.teacher_checkpoint + ", stored " + dtype +
          ", forward only; loss = alpha T^2 KL + (1 - alpha) CE with T " +
          nlohmann::json(dc.temperature).dump() + ", alpha " + nlohmann::json(dc.alpha).dump());
    } catch (const std::bad_alloc&) {
      outOfMemory();
    } catch (const std::exception& e) {
      throw SetupFailure{std::string("distill.teacher_checkpoint: ") + e.what(), true};
    }
  }
  const ParamArena& pa = model_->arena();
  paramCounts_ = {{"total", pa.numParams()},
                  {"trainable", pa.trainableParams()},
                  {"frozen", pa.numParams() - pa.trainableParams()},
                  {"nf4_bytes", pa.nf4Bytes()},
                  {"teacher", teacher_ ? teacher_->numParams() : 0}};
  distillLoss_.emplace(backend_, static_cast<float>(dc.temperature), static_cast<float>(dc.alpha));
}

void TrainingSession::logPrecision() {
  const std::string& policy = config_.precision.policy;
  if (policy == "fp8")
    log("precision fp8 (" + config_.precision.fp8.recipe +
        " scaling): block linear GEMMs emulated on this CPU (operands quantized to fp8, "
        "dequantized, fp32 sgemm); weights bf16 + fp8 copies, fp32 master");
  else if (policy == "pure_bf16")
    log("precision pure_bf16: bf16 weights, gradients and optimizer state, no fp32 master "
        "(updates below half a bf16 ulp of a weight are lost)");
  if (policy == "bf16" || policy == "pure_bf16") {
    std::string impl;
    const bool native = kernels::cpu::matmulBf16Native(&impl);
    if (model_->config().bf16Gemm && native)
      log("block linear GEMMs in bf16 (fp32 accumulation): oneDNN " + impl);
    else if (model_->config().bf16Gemm)
      warn("precision.gemm bf16: bf16 GEMMs are emulated on this CPU (" + impl +
           "), which is slower than precision.gemm fp32");
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
  if (model_->config().flashBf16)
    log("flash attention on bf16 tensor cores (" + backend_->name() + ", head dim " +
        std::to_string(model_->config().arch().headDim()) + ")");
}

// fp16 only: dynamic (or static) loss scaling with GradScaler semantics.
void TrainingSession::makeLossScaler() {
  configJson_ = core::toJson(config_);
  ckptDir_ =
      (std::filesystem::path(options_.runDir.empty() ? "." : options_.runDir) / "checkpoints")
          .string();
  if (config_.precision.policy == "fp16") {
    try {
      scaler_.emplace(config_.precision.loss_scale);
    } catch (const std::exception& e) {
      throw SetupFailure{e.what(), true};
    }
  }
}

}  // namespace ts::engine
