#pragma once
// The one description of a model, shared by the engine and the estimator: every parameter
// tensor (name, shape, role, block, trainable) and every buffer the engine keeps for a
// micro-batch (saved activations and backward workspace, with shape and element size). The
// engine allocates from it and the estimator sums it, so predicted and measured memory cannot
// drift apart. Adding an architecture is a new description here plus its ops in the engine.
//
// Names are the engine's (GPT-2: "wte", "h.0.attn.c_attn.weight", as in the GPT-2 checkpoints)
// and Hugging Face's for LLaMA ("model.layers.0.self_attn.q_proj.weight"); weights are stored
// (out, in) like torch.nn.Linear.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/core/config/Config.h"
#include "trainscope/core/plan/MemoryTable.h"

namespace ts::core {

// The resolved shape of a decoder. gpt2: LayerNorm, learned positions, biases, tied head,
// fused c_attn; the llama-like families: RMSNorm, rotary positions, no biases, separate q/k/v,
// and what each family adds (docs/models.md): q/k/v biases, q/k norms, norms after the
// branches, GeGLU, scaled embeddings, sliding windows, rotary scaling.
struct ArchSpec {
  std::string arch = "gpt2";  // the family (ModelFamily::name)
  int64_t layers = 0, heads = 0, kvHeads = 0, dModel = 0, dFf = 0, seqLen = 0, vocab = 0;
  int64_t headDimSet = 0;  // model.head_dim (0: dModel / heads)
  bool bias = true, learnedPos = true, tiedHead = true, fusedQkv = true;
  bool swiglu = false, rmsNorm = false, relu = false;
  bool geglu = false;    // gelu_tanh(gate) * up (Gemma); swiglu is set too: the same [gate|up]
  bool qkvBias = false;  // q/k/v projections have biases, the rest none (Qwen2)
  enum class QkNorm { None, PerHead, Whole };  // RMSNorm of q and k before the rotation
  QkNorm qkNorm = QkNorm::None;
  bool preNorm = true;     // norms before attention and MLP (OLMo 2 has none)
  bool postNorm = false;   // norms on the branches' outputs before the residual add
  float normOffset = 0.f;  // RMSNorm multiplies by (normOffset + w): Gemma's 1 + w
  double normEps = 1e-5;
  bool embedScale = false;  // embeddings times sqrt(dModel) (Gemma)
  double ropeTheta = 10000.0;
  ModelConfig::RopeScaling rope;
  double partialRotary = 1.0;
  int64_t maxPositions = 0;  // max_position_embeddings (0: seqLen)
  int64_t slidingWindow = 0;
  int slidingPattern = 0;
  double ropeLocalTheta = 0.0;
  double queryPreAttnScalar = 0.0;
  double attnSoftcap = 0.0, finalSoftcap = 0.0;

  int64_t headDim() const {
    return headDimSet > 0 ? headDimSet : heads > 0 ? dModel / heads : dModel;
  }
  int64_t qDim() const { return heads * headDim(); }
  int64_t kvDim() const { return kvHeads * headDim(); }
  int64_t qkvDim() const { return qDim() + 2 * kvDim(); }
  // The rotated dims of a head (even; Phi-3's partial_rotary_factor).
  int64_t rotaryDim() const {
    return learnedPos ? 0 : (int64_t(double(headDim()) * partialRotary) / 2) * 2;
  }
  // Whether layer l attends through the sliding window.
  bool slidingLayer(int64_t l) const {
    return slidingWindow > 0 && (slidingPattern <= 0 || (l + 1) % slidingPattern != 0);
  }
  // The attention scale (0: 1/sqrt(head dim)).
  double attnScale() const {
    return queryPreAttnScalar > 0 ? 1.0 / std::sqrt(queryPreAttnScalar) : 0.0;
  }
};
// model.* of a run config; `vocab` is the resolved vocabulary (model.vocab 0 = the data's).
ArchSpec archSpecOf(const ModelConfig& model, int64_t vocab);

enum class TensorRole {
  TokenEmbedding,
  PositionEmbedding,
  NormWeight,
  NormBias,
  LinearWeight,  // a block's projection (q/k/v/o, c_attn, MLP): where LoRA, NF4 and fp8 apply
  LinearBias,
  Head,   // an untied LM head (tied: the token embedding is the head)
  LoraA,  // r x in, trainable
  LoraB,  // out x r, trainable
};

// Where a tensor sits in the block every architecture shares (pre-norm attention, then MLP):
// the engine wires its layers from these, so a new architecture needs no engine edits.
// QNorm / KNorm: norms of q and k before the rotation; PostAttnNorm / PostMlpNorm: norms of a
// branch's output before the residual add (Gemma's sandwich, OLMo 2's only norms).
enum class BlockSlot {
  None,
  Norm1,
  Qkv,
  AttnOut,
  Norm2,
  MlpUp,
  MlpDown,
  FinalNorm,
  QNorm,
  KNorm,
  PostAttnNorm,
  PostMlpNorm
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::NormWeight;
  int block = -1;  // -1: outside the blocks
  // The module it belongs to: a projection ("c_attn", "q_proj", ...: LoRA targets) or a norm
  // ("ln_1", "input_layernorm", ...).
  std::string module;
  bool trainable = true;
  // Residual-stream output projection (GPT-2 init scales it by 1/sqrt(2L)).
  bool residualProjection = false;
  BlockSlot slot = BlockSlot::None;  // LoRA adapters: None (they hang on their module)
  // Adjacent weights of one slot that one GEMM multiplies (llama's q|k|v, gate|up): the name of
  // that view, e.g. "model.layers.0.self_attn.qkv_proj.weight"; empty when the slot has one.
  std::string fusedName;
  int64_t numel() const;
  // Weight decay applies: matrices (incl. embeddings), as nanoGPT.
  bool decay() const {
    return shape.size() == 2 && role != TensorRole::LoraA && role != TensorRole::LoraB;
  }
};

// Every parameter tensor in storage order (block by block). With finetune.lora.r > 0 the base
// is frozen and each targeted projection gets its A and B after its weight.
std::vector<TensorSpec> modelTensors(const ArchSpec& arch, const FinetuneConfig& finetune = {});
// Whether a LoRA target name (short "q"/"k"/"v"/"o"/"fc"/"proj" or the module name) selects the
// projection with `module` name in `arch`.
bool loraTargets(const std::vector<std::string>& targets, const ArchSpec& arch,
                 const std::string& module);
// The modules of a block LoRA can adapt, in storage order (gpt2: c_attn, attn.c_proj, c_fc,
// mlp.c_proj; llama: q_proj ... down_proj).
std::vector<std::string> loraModules(const ArchSpec& arch);
// The adapted projections of one block, in storage order (empty when lora.r is 0).
struct LoraSite {
  std::string module;
  int64_t in = 0, out = 0;
};
std::vector<LoraSite> loraSites(const ArchSpec& arch, const LoraConfig& lora);

enum class ElementType { F32, I32, I8, BF16, F16 };
int elementBits(ElementType t);

// What the engine keeps for one micro-batch of `batch` sequences.
struct SavedStateOptions {
  int64_t batch = 1;
  bool flash = false;
  std::string compression = "none";  // none | int8 | sparse
  // How the saved activations backward can take approximately are stored without int8: F32, or
  // BF16 / F16 (the bf16, pure_bf16 and fp8 policies store them in bf16, fp16 in fp16). The
  // norms' inputs, norm statistics, flash's log-sum-exp, logits, checkpoints and LoRA's u stay
  // fp32; the norms' outputs are then not kept (backward recomputes them from those exactly).
  ElementType saved = ElementType::F32;
  int checkpointEvery = 0;  // segments of k blocks (0 = off)
  bool bf16Gemm = false;    // bf16 GEMM operand scratch
  std::string fp8;          // "" | "delayed" | "blockwise": fp8 GEMM operand scratch
  bool dropout = false;     // model.dropout > 0 (masks are recomputed, not stored)
  LoraConfig lora;          // adapters (r > 0): each keeps x A^T (B, T, r) per block
  bool nf4 = false;  // NF4 base (QLoRA): bf16 operand scratch and one dequantized bf16 weight
  // An inference model (the distillation teacher): one block set reused in place by every
  // layer, no checkpoints, no backward scratch.
  bool forwardOnly = false;
  bool distill = false;  // the distillation loss runs on this model's logits
  // The CPU kernels' scratch region ("kernelScratch", workspace): one slice per thread, each as
  // large as the largest lease of the kernels this model runs (kernels' ScratchSizes.h). 0: the
  // backend's kernels take none (CUDA).
  int kernelThreads = 0;
};
// kernelThreads: the CPU backend's thread count, 0 on a GPU.
SavedStateOptions savedStateOptionsOf(const RunConfig& config, int64_t layers, bool bf16Gemm,
                                      int kernelThreads = 0);
// The floats per thread of the kernel scratch region (0 when the model's kernels lease none).
int64_t kernelScratchPerThread(const ArchSpec& arch, const SavedStateOptions& options);

struct BufferSpec {
  std::string name;  // the field: "qkv", "att", "fcPre", ..., "logits", "dres"
  std::vector<int64_t> shape;
  ElementType type = ElementType::F32;
  MemoryCategory category = MemoryCategory::Activations;
  // Block set (>= 0: one per layer, or one of the k scratch sets under checkpointing), or -1
  // for buffers outside the blocks; checkpoints carry their segment in `index`.
  int set = -1;
  int index = 0;
  // Its size depends on the data (the sparse nonzeros): the engine allocates it per forward,
  // the estimator assumes half of `shape`.
  bool dataDependent = false;
  int64_t numel() const;
  double bytes() const;  // dataDependent: the estimator's assumption
};
// Every buffer, in allocation order. Checkpointing keeps k block sets (the first without its
// `input` when exact: that is the segment's checkpoint) plus one checkpoint per segment.
// Stored (16-bit or int8) tensors add, for naive attention, room to expand the probabilities
// ("attUnpack"); a packed residual stream (int8 keeps it bf16) the fp32 stream forward runs on
// ("stream"). An int8 tensor `x` has its per-row fp32 scales in "xScale".
std::vector<BufferSpec> savedState(const ArchSpec& arch, const SavedStateOptions& options);

}  // namespace ts::core
