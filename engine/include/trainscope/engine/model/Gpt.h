#pragma once
// The decoder (GPT-2 and LLaMA from one description, core/ModelSpec.h) with a hand-written
// backward pass (no autograd).
//
// The model is composed of layers (Embedding, Decoder of Blocks of Norm / Attention / Mlp over
// Linear, the final Norm and the Head), each with forward, backward and an explicit struct of
// what it saves (BlockActivations and its parts), so recomputation, compression or a different
// attention (flash keeps only the log-sum-exp) replace exactly those buffers. The loss is not
// part of it (CrossEntropyLoss.h). Parameters live in a ParamArena: flat buffers with a named
// view per tensor, gradients only for trainable ones; the optimizer, clipping and checkpoints
// work on the arena. Weights are stored (out, in) like torch.nn.Linear: y = x W^T + b.
// docs/memory.md lists the bytes of every buffer.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/model/Decoder.h"
#include "trainscope/engine/model/Embedding.h"
#include "trainscope/engine/model/Head.h"
#include "trainscope/engine/model/Linear.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/engine/params/ParamArena.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/Fp8Quant.h"

namespace ts::engine {

struct GptConfig {
  // "gpt2" or "llama" (core/ModelSpec.h describes both: the same blocks with LayerNorm or
  // RMSNorm, learned or rotary positions, GELU/ReLU or SwiGLU, biases or none, tied or untied
  // head, multi-head or grouped-query attention).
  std::string architecture = "gpt2";
  // The family's shape keys beyond the fields below (head_dim, norm_eps, tie_embeddings,
  // rope_scaling, sliding windows, ...: core::ModelConfig); its sizes are ignored.
  core::ModelConfig shape;
  int kvHeads = 0;  // 0 = heads
  int dFf = 0;      // 0 = 4 * d_model
  double ropeTheta = 10000.0;
  int layers = 2;
  int heads = 4;
  int d_model = 64;
  int seq_len = 32;  // maximum sequence length (rows of wpe)
  int vocab = 256;
  bool relu = false;   // activation: GELU (tanh approximation) unless relu
  bool flash = false;  // attention.impl == flash
  // Flash attention on bf16 tensor cores (Op::FlashAttentionBf16) for head dims 64 and 128:
  // under the bf16-working policies where the backend runs it natively (a GPU from sm_80;
  // the CPU's twin is a reference, so never there).
  bool flashBf16 = false;
  // Activation checkpointing (docs/memory.md): 0 = off; k >= 1 = segments of k blocks, only
  // each segment's input is kept and backward recomputes the segment (k = 1: "all").
  int checkpointEvery = 0;
  // Saved-activation compression: int8 (per-row absmax scales) or sparse (post-ReLU bitmap +
  // nonzero values; needs relu; packs on host pointers, so the CPU backend only).
  enum class Compression { None, Int8, Sparse };
  Compression compression = Compression::None;
  // Working precision of parameters and gradients: F32, BF16 or F16 (precision.policy). With
  // 16 bits the model stores 2-byte weights (category parameters) and 2-byte gradients
  // (category gradients). This CPU path has no bf16/fp16 arithmetic, so forward/backward run on
  // fp32 copies upcast from them (category workspace, fp32 accumulation); the fp32 master
  // weights live in the optimizer (optimizer_state). The copies open and close in windows,
  // so the backend must give pages back (Backend::discard / commit).
  DType working = DType::F32;
  // How saved activations that backward can take approximately are stored (without int8
  // compression): F32, or the 16-bit working dtype under the mixed policies (gptConfigFrom).
  DType saved = DType::F32;
  // pure_bf16: no fp32 master; the optimizer updates the bf16 weights directly (its state in
  // bf16 too). Only meaningful with working == BF16.
  bool masterWeights = true;
  // fp8 GEMMs (precision.policy "fp8", working BF16): the four linear layers of every block
  // multiply fp8-quantized operands (kernels/Fp8Quant.h): inputs and weights E4M3, output
  // gradients E5M2 ("hybrid") or E4M3 (fp8GradE4M3). Delayed: per-tensor scales from an amax
  // history of fp8History entries; blockwise: DeepSeek-V3 tiles (1x128 activations/gradients
  // along the reduction dimension, 128x128 weight blocks) scaled by their current amax. The
  // embeddings, LayerNorms, attention and the tied LM head stay in bf16 weights / fp32 math.
  enum class Fp8Recipe { None, Delayed, Blockwise };
  Fp8Recipe fp8 = Fp8Recipe::None;
  int fp8History = 1024;
  int fp8Margin = 0;
  bool fp8GradE4M3 = false;
  // ZeRO-3 over several ranks: each block's fp8 weights exist only while the block is gathered
  // (made then, given back with it), laid out on whole pages per block. Set by the trainer
  // (DataParallel gathers the blocks; nothing else would make the copies).
  bool fp8PerBlock = false;
  // bf16 GEMMs (working BF16, not fp8): the four linear layers of every block multiply the
  // stored bf16 weights with bf16-rounded inputs / output gradients (Backend::matmulBf16, fp32
  // accumulation) instead of the fp32 copies; two bf16 scratch operands (workspace).
  bool bf16Gemm = false;
  // model.dropout on the embeddings and each residual branch (LayerContext.h), with masks from
  // seed dropoutSeed (train.seed) and the micro-batch key (Gpt::setDropoutKey).
  float dropout = 0.f;
  uint64_t dropoutSeed = 0;
  // Tensors without gradients: exact names or prefixes ending in '.' ("h.0." freezes block 0).
  // The description's own trainable flags (a LoRA run's frozen base) apply as well.
  std::vector<std::string> freeze;
  // Parameter arena: each group (embeddings, every block, the head) starts at a multiple of
  // this many elements (ParamArena.h; a ZeRO shard or a block as one aligned slice).
  int64_t arenaAlign = 1;
  int64_t arenaPadTo = 1;        // total length padded to a multiple (ZeRO: ranks x aligned shards)
  int64_t arenaTensorAlign = 1;  // trainable tensors start on multiples (ZeRO with 8-bit AdamW)
  // ZeRO partitioned from construction (ArenaOptions): ranks, this rank, ZeRO-3's weights,
  // stage >= 2's gradients. Set by the trainer (the arena of a run with DataParallel).
  int partitionRanks = 1, partitionRank = 0;
  bool partitionValues = false, partitionGrads = false;
  // 16-bit gradients without a resident fp32 copy (ParamArena's gradWindow; one rank, the
  // optimizer on the device: core::gradWindowOf).
  bool gradWindow = false;
  // The blocks' fp32 compute copies only while a block runs (ParamArena's valueWindow;
  // core::valueWindowOf).
  bool valueWindow = false;
  // finetune.lora: adapters on the targeted projections (r > 0); the base is then frozen.
  core::LoraConfig lora;
  // finetune.base_quant nf4 (QLoRA, needs lora): the frozen block linear weights are stored as
  // NF4 with double quantization (ParamArena.h) and multiplied in bf16 GEMMs after an on-the-fly
  // dequantization, in forward and backward.
  bool nf4Base = false;
  // An inference model (the distillation teacher): every tensor frozen, forward-only
  // activations (one block set reused in place; core::SavedStateOptions::forwardOnly), no
  // backward. With nf4Base its block linears are NF4.
  bool inferenceOnly = false;
  bool distill = false;  // the distillation loss runs on its logits (it sizes kernel scratch)

  // The shared model description (core/ModelSpec.h) of this shape, and what it keeps for a
  // micro-batch of B sequences: the engine allocates exactly these, the estimator sums them.
  core::ArchSpec arch() const;
  core::SavedStateOptions savedState(int B) const;
};
// k for memory.checkpointing (all -> 1, every_k -> checkpoint_every or round(sqrt(L)), capped
// at L; none -> 0).
int checkpointSegment(const std::string& mode, int every, int layers);
// model.*, attention.impl, memory.* and precision.* of a run config; `vocab` is the resolved
// vocabulary size. precision.gemm "auto" resolves against `backend` (bf16 GEMMs only where it
// runs them natively on AMX; never without a backend).
GptConfig gptConfigFrom(const core::RunConfig& config, int vocab,
                        const kernels::Backend* backend = nullptr);
// What precision.gemm "auto" means on `backend`: bf16 GEMMs on a CPU whose native bf16 GEMM
// (AMX, AVX512-BF16) measured faster than sgemm here (GemmCalibration); never on an emulated one.
bool autoPicksBf16Gemm(const kernels::Backend* backend);
// Whether the config's precision.gemm resolves to bf16 GEMMs on `backend`.
bool useBf16Gemm(const core::RunConfig& config, const kernels::Backend* backend);

// The model's top-level saved state: the decoder's (blocks, checkpoints) plus the final norm,
// the logits and the loss's per-token values.
struct Activations : DecoderActivations {
  int B = 0, T = 0;
  Tensor tokens;                     // I32 (B,T)
  Tensor targets;                    // I32 (B,T)
  SavedTensor residOut;              // (B,T,C) output of the last block
  SavedTensor lnf;                   // (B,T,C)
  NormSaved lnfSaved;                // final norm's mean (LayerNorm) and rstd
  Tensor logits;                     // (B,T,V); after a loss forward it holds dlogits
  Tensor losses;                     // (B,T)
  Tensor ropeTable, ropeTableLocal;  // (T, rotary dims): constants, uploaded by allocate
  Tensor softcapGrad;                // (B,T,V) the logits' soft-cap derivative (final_softcap > 0)
};

class Gpt {
 public:
  Gpt(const GptConfig& config, kernels::Backend* backend, MemoryTracker* tracker);
  ~Gpt();
  Gpt(const Gpt&) = delete;  // its layers hold pointers into its own parameter table
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }
  // The parameters: the optimizer, clipping and checkpoints take the arena.
  ParamArena& arena() { return arena_; }
  const ParamArena& arena() const { return arena_; }
  const std::vector<ParamInfo>& params() const { return arena_.params(); }
  const ParamInfo* find(const std::string& name) const { return arena_.find(name); }
  int64_t numParams() const { return arena_.numParams(); }
  Tensor& paramBuffer() { return arena_.values(); }
  Tensor& gradBuffer() { return arena_.grads(); }  // under gradWindow: see gradientsToHost
  // Every gradient (gradient space) on the host, as the optimizer reads it, in every mode.
  std::vector<float> gradientsToHost() { return arena_.gradsToHost(); }
  float* param(const ParamInfo& p) { return arena_.value(p); }
  float* grad(const ParamInfo& p) { return arena_.grad(p); }  // null when frozen
  // The stored bf16/fp16 weights of p (working precision != F32).
  const uint16_t* weight16(const ParamInfo& p) const { return arena_.value16(p); }

  // 16-bit working precision (config().working != F32). paramBuffer()/gradBuffer() are then the
  // fp32 compute copies; these are the stored 16-bit tensors.
  bool mixed() const { return arena_.mixed(); }
  Tensor& workingParams() { return arena_.values16(); }
  Tensor& workingGrads() { return arena_.grads16(); }
  // ParamArena::setWeightsFrom / roundGrads / roundWeights (fp8 copies re-quantized).
  void setWeightsFrom(const float* master) { arena_.setWeightsFrom(master); }
  void roundGrads() { arena_.roundGrads(); }
  void roundWeights() { arena_.roundWeights(); }

  // fp8 (config().fp8 != None): the fp8 copies of the block linear weights (1 byte each,
  // category parameters), and the delayed-scaling state of one block linear (l = layer,
  // j = 0 c_attn, 1 attn.c_proj, 2 mlp.c_fc, 3 mlp.c_proj).
  bool fp8() const { return config_.fp8 != GptConfig::Fp8Recipe::None; }
  const Tensor& fp8Weights() const { return w8_; }
  using Fp8Site = engine::Fp8Site;
  const Fp8Site& fp8Site(int l, int j) const { return linears_[4 * l + j].fp8Site(); }
  // The block projections, 4 per layer (c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj).
  const std::vector<Linear>& linears() const { return linears_; }
  // Data parallel, delayed fp8: the amaxes this micro-batch just recorded (its forward's
  // inputs, or with `grads` its backward's output gradients) become their max over the ranks,
  // so every rank keeps the histories one rank keeps over the whole batch (TransformerEngine
  // reduces amaxes over the data-parallel group the same way).
  void reduceFp8Amaxes(bool grads, const std::function<void(std::vector<double>&)>& maxOverRanks);
  // With fp8PerBlock (ZeRO-3): a block's weights exist only while it is gathered, so its fp8
  // weights are made then (after an update a new copy, its amax recorded once; else the same
  // copy at its saved scale) and given back with it.
  void fp8BlockGathered(int layer);
  void fp8BlockReleased(int layer);
  // The fp8 scaling state for checkpoints: every site's amax histories with their ring
  // positions and scales, and the scale the fp8 weights were quantized with. Floats are stored
  // as their bit patterns (exact, and an overflowed step records inf, which JSON cannot hold).
  // loadFp8State() belongs after setWeightsFrom() on resume: it restores the histories and
  // re-quantizes the fp8 weights with the saved scales, so training continues bit for bit.
  // Throws std::invalid_argument naming the site and field that do not fit this model.
  nlohmann::json fp8State() const;
  void loadFp8State(const nlohmann::json& state);

  // GPT-2 init from `seed`: weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
  // N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 / bias 0 (the same values with or
  // without LoRA). LoRA as PEFT: A kaiming-uniform (a = sqrt 5: U(-1/sqrt(in), 1/sqrt(in))) from
  // a stream of its own, B 0, so the adapted model starts as the base.
  void initWeights(uint64_t seed);
  void zeroGrad() { arena_.zeroGrad(); }
  // LoRA: re-initialises only the adapters (A kaiming-uniform, B 0), e.g. after loading a base.
  void initAdapters(uint64_t seed);
  // LoRA: every adapted base weight with its adapters merged, W + scaling * B A, by tensor name
  // (host copies; the model is not changed). Empty without adapters.
  std::map<std::string, std::vector<float>> mergedWeights() const;

  // Allocates activations and workspace for micro-batches of B sequences of up to seq_len.
  void allocate(int B);
  int allocatedBatch() const { return acts_.B; }
  const Activations& activations() const { return acts_; }

  // Dropout (config().dropout > 0) applies in training mode only (evaluation: setTraining
  // false). Each training micro-batch draws its masks from stream `key` (the trainer passes the
  // global micro-step, so a resumed run draws the same masks).
  void setTraining(bool training) { ctx_.dropout.training = training; }
  void setDropoutKey(uint64_t key) { ctx_.dropout.key = key; }

  // Forward on host token ids (B*T, B <= allocated, T <= seq_len). With targets (ignored < 0)
  // the fused cross-entropy also writes dlogits = dloss * (softmax - onehot) in place of the
  // logits, ready for backward(). Returns the SUM of token losses and the number of counted
  // targets through `count` (the caller normalises; see gradient accumulation).
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T, float dloss,
                 int64_t* count = nullptr);
  // Accumulates (+=) parameter gradients of the last loss forward.
  void backward();
  // For a loss of its own (forward without targets, then the loss writes dL/dlogits into
  // logits()): marks the gradient as present so backward() may run.
  Tensor& logits() { return acts_.logits; }
  // The loss's device buffers: targets (B*T int32) and per-row losses (B*T floats).
  Tensor& targetsBuffer() { return acts_.targets; }
  Tensor& lossesBuffer() { return acts_.losses; }
  void lossGradientWritten() { haveLoss_ = true; }
  // After a forward without targets: logits of row (b, t) copied to host (V floats).
  void logitsRow(int b, int t, float* dst) const;

  const CompressionStats& compressionStats() const { return compressor_.stats(); }

  // The decoder's hooks (ZeRO-3 gathers, gradient buckets and offload hang here).
  using Hooks = Decoder::Hooks;
  void setHooks(Hooks hooks) { decoder_->setHooks(std::move(hooks)); }

  // Training FLOPs per token (PaLM appendix B: 6*params + 12*L*C*T).
  double flopsPerToken(int T) const;

 private:
  // Construction (GptBuild.cpp), in this order: the config's checks, the arena from the
  // description, the block linears, their fp8 copies (GptFp8.cpp), LoRA adapters on them, the
  // blocks, the layers around them, and the context the layers share.
  void validateConfig() const;
  void validatePrecision() const;
  std::vector<core::TensorSpec> parameterTensors() const;  // the description, freezes applied
  void buildArena(std::vector<core::TensorSpec> tensors);
  // A projection slot's weight: the tensor, or a view over adjacent parts one GEMM multiplies.
  const ParamInfo* projectionWeight(int block, core::BlockSlot slot, core::TensorRole role);
  void buildLinears();
  void buildFp8Weights();
  void attachAdapters();
  void buildBlocks();
  void buildOuterLayers();  // embedding, final norm, head
  void buildContext();
  void uploadRotaryTables();  // the description's rotary tables into their buffers

  void quantizeFp8Weights();
  // Points the backend's kernels at this model's scratch region (a teacher's forward may have
  // bound its own in between).
  void bindKernelScratch();

  GptConfig config_;
  core::ArchSpec arch_;  // config_.arch(), resolved once
  kernels::Backend* backend_;
  MemoryTracker* tracker_;
  ParamArena arena_;
  std::deque<ParamInfo> fused_;   // views over adjacent tensors one GEMM multiplies (q|k|v)
  Tensor w8_;                     // fp8 weight copies (fp8 only)
  std::vector<char> fp8Stale_;    // per layer: weights updated since their fp8 copy was made
  std::vector<char> fp8Present_;  // fp8PerBlock: per layer, its fp8 weights' pages are in use
  std::vector<std::pair<int64_t, int64_t>> fp8Pages_;  // fp8PerBlock: per layer, its w8 bytes
  std::vector<Linear> linears_;  // 4 per layer; the layers point into it (never resized)
  ParamStorage storage_;         // what the linears read: stable pointers to the buffers
  LinearScratch scratch_;        // set by allocate()
  Tensor fp8X_, fp8G_, fp8W_;    // fp8: dequantized GEMM operands (workspace, fp32)
  Tensor x16_, g16_;             // bf16Gemm / NF4: bf16 inputs / output gradients (workspace)
  Tensor nf4W_;                  // NF4: the dequantized bf16 weight of the current GEMM
  Tensor w8Scales_;              // fp8: the weights' dequantization scales (parameters, fp32)
  Tensor fp8TileScales_;         // blockwise: per-tile scales of X / G (workspace, fp32)
  // The layers.
  std::optional<Embedding> embedding_;
  std::optional<Decoder> decoder_;
  std::unique_ptr<Norm> finalNorm_;
  std::optional<Head> head_;
  bool tiedHead_ = true;                        // the head multiplies by the token table
  float embedScale_ = 1.f;                      // Gemma: embeddings times sqrt(d_model)
  size_t embeddingsGroup_ = 0, lastGroup_ = 0;  // the arena groups before / after the blocks
  // valueWindow: the final norm's fp32 values around its and the head's forward and backward,
  // and the token table's when a tied head reads it in fp32 (a bf16 head reads the bf16 one;
  // an untied head opens its own window).
  void openHeadValues() {
    arena_.openValues(lastGroup_, false);
    if (tiedHead_ && !head_->bf16Gemm()) arena_.openValues(embeddingsGroup_, false);
  }
  void closeHeadValues() {
    arena_.closeValues(lastGroup_);
    arena_.closeValues(embeddingsGroup_);
  }
  ActivationCompressor compressor_;
  LayerContext ctx_;
  Activations acts_;
  Workspace ws_;
  bool haveLoss_ = false;
};

// Deterministic RNG (splitmix64) + Box-Muller normals: the same stream on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
  double normal();
  uint64_t state() const { return state_; }
  void setState(uint64_t s) { state_ = s; }

 private:
  uint64_t state_;
};

}  // namespace ts::engine
