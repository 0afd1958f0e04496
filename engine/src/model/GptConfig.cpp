// GptConfig from a run config (model.*, attention.impl, memory.*, precision.*), and the
// shared description's view of it: the architecture's shape and what a micro-batch keeps.
#include <algorithm>
#include <cmath>

#include "trainscope/core/plan/ZeroLayout.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/platform/GemmCalibration.h"

namespace ts::engine {

bool autoPicksBf16Gemm(const kernels::Backend* backend) {
  if (!backend || !backend->supports(kernels::Op::MatmulBF16) ||
      backend->emulates(kernels::Op::MatmulBF16))
    return false;
  // A GPU with bf16 tensor cores (sm_80 and newer) always gains; a CPU only where its kernel
  // measured faster than sgemm here.
  if (backend->kind() == kernels::DeviceKind::Cuda) {
    const auto f = backend->device().features;
    return std::find(f.begin(), f.end(), "bf16") != f.end();
  }
  return gemmCalibration().choice == "bf16";
}

bool useBf16Gemm(const core::RunConfig& config, const kernels::Backend* backend) {
  const auto& p = config.precision;
  if (p.policy != "bf16" && p.policy != "pure_bf16") return false;
  return p.gemm == "bf16" || (p.gemm == "auto" && autoPicksBf16Gemm(backend));
}

GptConfig gptConfigFrom(const core::RunConfig& config, int vocab, const kernels::Backend* backend) {
  GptConfig g;
  g.architecture = config.model.arch;
  g.shape = config.model;
  g.kvHeads = config.model.kv_heads;
  g.dFf = config.model.d_ff;
  g.ropeTheta = config.model.rope_theta;
  g.layers = config.model.layers;
  g.heads = config.model.heads;
  g.d_model = config.model.d_model;
  g.seq_len = config.model.seq_len;
  g.vocab = vocab;
  g.relu = config.model.activation == "relu";
  g.flash = config.attention.impl == "flash";
  g.checkpointEvery =
      checkpointSegment(config.memory.checkpointing, config.memory.checkpoint_every, g.layers);
  const auto& comp = config.memory.activation_compression;
  g.compression = comp == "int8"     ? GptConfig::Compression::Int8
                  : comp == "sparse" ? GptConfig::Compression::Sparse
                                     : GptConfig::Compression::None;
  const auto& pol = config.precision.policy;
  g.working = pol == "fp16"                                         ? DType::F16
              : pol == "bf16" || pol == "fp8" || pol == "pure_bf16" ? DType::BF16
                                                                    : DType::F32;
  g.saved = g.working;  // bf16 under fp8 too
  g.masterWeights = pol != "pure_bf16";
  g.bf16Gemm = useBf16Gemm(config, backend);
  const int64_t headDim = g.arch().headDim();
  g.flashBf16 = g.flash && g.working == DType::BF16 && (headDim == 64 || headDim == 128) &&
                backend && backend->supports(kernels::Op::FlashAttentionBf16) &&
                !backend->emulates(kernels::Op::FlashAttentionBf16);
  g.dropout = static_cast<float>(config.model.dropout);
  g.dropoutSeed = static_cast<uint64_t>(config.train.seed);
  g.lora = config.finetune.lora;
  g.nf4Base = config.finetune.base_quant == "nf4";
  g.distill = !config.distill.teacher_checkpoint.empty();
  const auto zl = core::zeroLayoutOf(config.parallel.ranks, config.parallel.zero_stage,
                                     config.optimizer.state_bits);
  g.arenaAlign = zl.align;
  g.arenaPadTo = zl.padTo;
  g.arenaTensorAlign = zl.tensorAlign;
  // (The windows need a backend that gives pages back: the CPU's, CUDA's through VMM.)
  g.gradWindow = core::gradWindowOf(pol, config.parallel.ranks, config.parallel.offload_optimizer,
                                    config.parallel.offload_params);
  g.valueWindow = core::valueWindowOf(pol, config.parallel.ranks, config.parallel.offload_optimizer,
                                      config.parallel.offload_params);
  if (pol == "fp8") {
    const auto& f = config.precision.fp8;
    g.fp8 =
        f.recipe == "blockwise" ? GptConfig::Fp8Recipe::Blockwise : GptConfig::Fp8Recipe::Delayed;
    g.fp8History = f.amax_history;
    g.fp8Margin = f.margin;
    g.fp8GradE4M3 = f.format == "e4m3";
  }
  return g;
}

core::ArchSpec GptConfig::arch() const {
  core::ModelConfig m = shape;
  m.arch = architecture;
  m.kv_heads = kvHeads;
  m.d_ff = dFf;
  m.rope_theta = ropeTheta;
  m.layers = layers;
  m.heads = heads;
  m.d_model = d_model;
  m.seq_len = seq_len;
  m.activation = relu ? "relu" : "gelu";
  return core::archSpecOf(m, vocab);
}

core::SavedStateOptions GptConfig::savedState(int B) const {
  core::SavedStateOptions o;
  o.batch = B;
  o.flash = flash;
  o.compression = compression == Compression::Int8     ? "int8"
                  : compression == Compression::Sparse ? "sparse"
                                                       : "none";
  o.checkpointEvery = checkpointEvery;
  o.bf16Gemm = bf16Gemm;
  o.fp8 = fp8 == Fp8Recipe::Blockwise ? "blockwise" : fp8 == Fp8Recipe::Delayed ? "delayed" : "";
  o.dropout = dropout > 0.f;
  o.lora = lora;
  o.nf4 = nf4Base && (lora.r > 0 || inferenceOnly);
  o.forwardOnly = inferenceOnly;
  o.distill = distill;
  o.saved = saved == DType::BF16  ? core::ElementType::BF16
            : saved == DType::F16 ? core::ElementType::F16
                                  : core::ElementType::F32;
  return o;
}

int checkpointSegment(const std::string& mode, int every, int layers) {
  if (mode == "all") return 1;
  if (mode != "every_k") return 0;
  int k = every > 0 ? every : static_cast<int>(std::lround(std::sqrt(static_cast<double>(layers))));
  return std::clamp(k, 1, std::max(1, layers));
}

}  // namespace ts::engine
