#pragma once
// The decoder (GPT-2 and LLaMA from one description, core/ModelSpec.h) with a hand-written
// backward pass (no autograd).
//
// Parameters and gradients each live in ONE flat fp32 buffer; every named tensor is a view at
// an offset (ParamInfo). That keeps the optimizer, global-norm clipping, checkpoints and later
// ZeRO sharding (contiguous slices of the flat buffer) simple. Weights are stored (out, in) like
// torch.nn.Linear: y = x W^T + b. The LM head is tied to wte.
//
// What a block saves for backward is an explicit struct (BlockActivations), so recomputation,
// compression or a different attention (flash keeps only the log-sum-exp) can replace exactly
// those buffers. docs/memory.md lists the bytes of every buffer.
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/Config.h"
#include "trainscope/core/ModelSpec.h"
#include "trainscope/engine/Linear.h"
#include "trainscope/engine/MemoryTracker.h"
#include "trainscope/engine/Tensor.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/Fp8Quant.h"

namespace ts::engine {

struct GptConfig {
  // "gpt2" or "llama" (core/ModelSpec.h describes both: the same blocks with LayerNorm or
  // RMSNorm, learned or rotary positions, GELU/ReLU or SwiGLU, biases or none, tied or untied
  // head, multi-head or grouped-query attention).
  std::string architecture = "gpt2";
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
  // Activation checkpointing (docs/memory.md): 0 = off; k >= 1 = segments of k blocks, only
  // each segment's input is kept and backward recomputes the segment (k = 1: "all").
  int checkpointEvery = 0;
  // Saved-activation compression: int8 (per-row absmax scales) or sparse (post-ReLU bitmap +
  // nonzero values; needs relu). CPU backend only (packing runs on host pointers).
  enum class Compression { None, Int8, Sparse };
  Compression compression = Compression::None;
  // Working precision of parameters and gradients: F32, BF16 or F16 (precision.policy). With
  // 16 bits the model stores 2-byte weights (category parameters) and 2-byte gradients
  // (category gradients). This CPU path has no bf16/fp16 arithmetic, so forward/backward run on
  // fp32 copies upcast from them (category workspace, fp32 accumulation); the fp32 master
  // weights live in the optimizer (optimizer_state). CPU backend only.
  DType working = DType::F32;
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
  // bf16 GEMMs (working BF16, not fp8): the four linear layers of every block multiply the
  // stored bf16 weights with bf16-rounded inputs / output gradients (Backend::matmulBf16, fp32
  // accumulation) instead of the fp32 copies; two bf16 scratch operands (workspace).
  bool bf16Gemm = false;

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
// What precision.gemm "auto" means on `backend`: bf16 GEMMs only on a CPU with AMX whose bf16
// GEMM is native (without AMX oneDNN's bf16 kernels are slower than its fp32 sgemm,
// reference.md).
bool autoPicksBf16Gemm(const kernels::Backend* backend);
// Whether the config's precision.gemm resolves to bf16 GEMMs on `backend`.
bool useBf16Gemm(const core::RunConfig& config, const kernels::Backend* backend);

struct ParamInfo {
  std::string name;            // "wte", "h.0.attn.c_attn.weight", ...
  std::vector<int64_t> shape;  // (out, in) for linear weights
  int64_t offset = 0;          // in elements, into the flat buffer
  int64_t numel = 0;
  bool decay = false;     // weight decay applies (2-D weights incl. embeddings, as nanoGPT)
  core::TensorSpec spec;  // its entry in the model description (role, block, module)
};

// Everything one block keeps from forward for backward (all fp32; N = B*T rows).
struct BlockActivations {
  Tensor input;    // (B,T,C) residual stream entering the block (ln_1's input)
  Tensor ln1;      // (B,T,C) ln_1 output (c_attn's input)
  Tensor ln1Mean;  // (B,T)
  Tensor ln1Rstd;  // (B,T)
  Tensor qkv;      // (B,T,3C)
  Tensor att;      // naive: softmax probabilities (B,NH,T,T); flash: log-sum-exp (B,NH,T)
  Tensor attOut;   // (B,T,C) attention output, heads merged (c_proj's input)
  Tensor resid2;   // (B,T,C) input + attention branch (ln_2's input)
  Tensor ln2;      // (B,T,C)
  Tensor ln2Mean;  // (B,T)
  Tensor ln2Rstd;  // (B,T)
  Tensor fcPre;    // (B,T,4C) c_fc output before the activation
  Tensor fcAct;    // (B,T,4C) after the activation (mlp c_proj's input)
  // int8 compression replaces ln1, attOut, ln2 and fcAct by these (1 byte per value) plus one
  // fp32 scale per row (absmax / 127).
  Tensor ln1Q, attOutQ, ln2Q, fcActQ;                  // I8
  Tensor ln1Scale, attOutScale, ln2Scale, fcActScale;  // (B,T)
  // sparse compression replaces fcAct by a bitmap (1 bit per value, set = nonzero) and the
  // nonzero values in order; fcVals is re-allocated by every forward with the exact count.
  Tensor fcMask;  // I8, ceil(B*T*4C / 8) bytes
  Tensor fcVals;  // F32 (nnz)
};

// What compression did in the last forward (blocks computed in forward, not recomputation).
struct CompressionStats {
  int64_t rawBytes = 0;     // fp32 bytes of the tensors that were compressed
  int64_t storedBytes = 0;  // bytes they took compressed (values + scales / bitmap)
  int64_t reluValues = 0;   // ReLU outputs seen (sparse only)
  int64_t reluZeros = 0;    // of which exactly zero
};

struct Activations {
  int B = 0, T = 0;
  Tensor tokens;   // I32 (B,T)
  Tensor targets;  // I32 (B,T)
  // Without checkpointing: one per layer. With segments of k blocks: k scratch sets (slot 0 has
  // no `input`: it is the segment's checkpoint), shared by all segments.
  std::vector<BlockActivations> blocks;
  std::vector<Tensor> checkpoints;  // (B,T,C) input of blocks 0, k, 2k, ... (checkpointing only)
  Tensor residOut;                  // (B,T,C) output of the last block
  Tensor lnf;                       // (B,T,C)
  Tensor lnfMean;                   // (B,T)
  Tensor lnfRstd;                   // (B,T)
  Tensor logits;                    // (B,T,V); after a loss forward it holds dlogits
  Tensor losses;                    // (B,T)
};

// Backward scratch (category workspace), reused by every block.
struct Workspace {
  Tensor ones;  // (B*T) ones: bias add and bias gradient as GEMMs (device agnostic)
  Tensor dres;  // (B,T,C) gradient of the residual stream
  Tensor dtmp;  // (B,T,C) also the forward's projection output before the residual add
  Tensor dqkv;  // (B,T,3C)
  Tensor datt;  // (B,NH,T,T), naive attention only
  Tensor dfc;   // (B,T,4C)
  Tensor dfc2;  // (B,T,4C)
};

class Gpt {
 public:
  Gpt(const GptConfig& config, kernels::Backend* backend, MemoryTracker* tracker);
  Gpt(const Gpt&) = delete;  // holds pointers into its own parameter table
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }
  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo* find(const std::string& name) const;
  int64_t numParams() const { return numParams_; }
  Tensor& paramBuffer() { return paramBuf_; }
  Tensor& gradBuffer() { return gradBuf_; }
  float* param(const ParamInfo& p) { return paramBuf_.f32() + p.offset; }
  float* grad(const ParamInfo& p) { return gradBuf_.f32() + p.offset; }
  // The stored bf16/fp16 weights of p (working precision != F32).
  const uint16_t* weight16(const ParamInfo& p) const {
    return static_cast<const uint16_t*>(param16_.data()) + p.offset;
  }

  // 16-bit working precision (config().working != F32). paramBuffer()/gradBuffer() are then the
  // fp32 compute copies; these are the stored 16-bit tensors.
  bool mixed() const { return config_.working != DType::F32; }
  Tensor& workingParams() { return param16_; }
  Tensor& workingGrads() { return grad16_; }
  // Rounds `master` (numParams fp32 values in the backend's memory, e.g. the optimizer's master
  // copy or paramBuffer() itself) to the working dtype into workingParams() and
  // refreshes the fp32 compute copy from it, so forward sees exactly the 16-bit weights.
  void setWeightsFrom(const float* master);
  // Rounds the accumulated fp32 gradients to the working dtype (fp16 overflows to inf here, as
  // on hardware) and upcasts them back for the fp32 unscale / clip / update. No-op in fp32.
  void roundGrads();
  // Rounds the fp32 compute copy of the weights to the working dtype in place (pure_bf16: the
  // optimizer updated it directly) and refreshes workingParams().
  void roundWeights() { setWeightsFrom(paramBuf_.f32()); }

  // fp8 (config().fp8 != None): the fp8 copies of the block linear weights (1 byte each,
  // category parameters), and the delayed-scaling state of one block linear (l = layer,
  // j = 0 c_attn, 1 attn.c_proj, 2 mlp.c_fc, 3 mlp.c_proj).
  bool fp8() const { return config_.fp8 != GptConfig::Fp8Recipe::None; }
  const Tensor& fp8Weights() const { return w8_; }
  using Fp8Site = engine::Fp8Site;
  const Fp8Site& fp8Site(int l, int j) const { return linears_[4 * l + j].fp8Site(); }
  // The block projections, 4 per layer (c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj).
  const std::vector<Linear>& linears() const { return linears_; }
  // The fp8 scaling state for checkpoints: every site's amax histories with their ring
  // positions and scales, and the scale the fp8 weights were quantized with. Floats are stored
  // as their bit patterns (exact, and an overflowed step records inf, which JSON cannot hold).
  // loadFp8State() belongs after setWeightsFrom() on resume: it restores the histories and
  // re-quantizes the fp8 weights with the saved scales, so training continues bit for bit.
  // Throws std::invalid_argument naming the site and field that do not fit this model.
  nlohmann::json fp8State() const;
  void loadFp8State(const nlohmann::json& state);

  // GPT-2 init from `seed`: weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
  // N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weight 1 / bias 0.
  void initWeights(uint64_t seed);
  void zeroGrad();

  // Allocates activations and workspace for micro-batches of B sequences of up to seq_len.
  void allocate(int B);
  int allocatedBatch() const { return acts_.B; }
  const Activations& activations() const { return acts_; }

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
  void lossGradientWritten() { haveLoss_ = true; }
  // After a forward without targets: logits of row (b, t) copied to host (V floats).
  void logitsRow(int b, int t, float* dst) const;

  const CompressionStats& compressionStats() const { return stats_; }

  // Hooks of the decoder (ZeRO-3 gathers, gradient buckets and offload hang here): before block
  // l's forward (also before its recomputation under checkpointing, `recompute` true), and when
  // block l's parameter gradients are complete for this micro-batch (after its backward).
  struct Hooks {
    std::function<void(int layer, bool recompute)> beforeBlockForward;
    std::function<void(int layer)> blockGradientsReady;
  };
  void setHooks(Hooks hooks) { hooks_ = std::move(hooks); }

  // Training FLOPs per token (PaLM appendix B: 6*params + 12*L*C*T).
  double flopsPerToken(int T) const;

 private:
  void quantizeFp8Weights();
  // One block's forward from `in`; `out` == nullptr skips the final residual add (recompute).
  void blockForward(int l, BlockActivations& a, const float* in, float* out, bool recompute);
  void blockBackward(int l, BlockActivations& a, const float* in);
  void quantizeRows(Tensor& q, Tensor& scale, const float* x, int64_t rows, int64_t cols,
                    bool count);
  void dequantizeRows(float* x, const Tensor& q, const Tensor& scale, int64_t rows, int64_t cols);
  void packSparse(BlockActivations& a, const float* x, int64_t n, bool count);
  void unpackSparse(float* x, const BlockActivations& a, int64_t n);
  // A block's norms (bias null for RMSNorm); its projections are linears_[4l .. 4l+3].
  struct BlockParams {
    const ParamInfo *ln1w, *ln1b, *ln2w, *ln2b;
  };
  // llama: rotary positions on the q and k heads of a packed qkv (or their gradients), in place.
  void rope(float* qkv, bool backward);
  void normForward(float* out, float* mean, float* rstd, const float* in, const ParamInfo* w,
                   const ParamInfo* b, int N);
  void normBackward(float* dinp, const float* dout, const float* in, const ParamInfo* w,
                    const ParamInfo* b, const float* mean, const float* rstd, int N);

  GptConfig config_;
  core::ArchSpec arch_;  // config_.arch(), resolved once
  kernels::Backend* backend_;
  MemoryTracker* tracker_;
  std::vector<ParamInfo> params_;
  std::vector<BlockParams> blockParams_;
  const ParamInfo *wte_ = nullptr, *wpe_ = nullptr, *lnfw_ = nullptr, *lnfb_ = nullptr;
  const ParamInfo* head_ = nullptr;  // lm_head, or wte when tied
  std::deque<ParamInfo> fused_;      // views over adjacent tensors one GEMM multiplies (q|k|v)
  int64_t numParams_ = 0;
  Tensor paramBuf_;
  Tensor gradBuf_;
  Tensor param16_, grad16_;      // 16-bit working precision only
  Tensor w8_;                    // fp8 weight copies (fp8 only)
  std::vector<Linear> linears_;  // 4 per layer
  ParamStorage storage_;         // what the linears read: stable pointers to the buffers below
  LinearScratch scratch_;        // set by allocate()
  Tensor fp8X_, fp8G_, fp8W_;    // fp8: dequantized GEMM operands (workspace, fp32)
  Tensor x16_, g16_;             // bf16Gemm: bf16 inputs / output gradients (workspace)
  Tensor w8Scales_;              // fp8: the weights' dequantization scales (parameters, fp32)
  Tensor fp8TileScales_;         // blockwise: per-tile scales of X / G (workspace, fp32)
  Activations acts_;
  Workspace ws_;
  int curB_ = 0, curT_ = 0;
  CompressionStats stats_;
  Hooks hooks_;
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
