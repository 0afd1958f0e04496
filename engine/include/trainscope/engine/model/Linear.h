#pragma once
// A projection y = x W^T + b (W stored (out, in) like torch.nn.Linear) over Backend ops. It owns
// how its weight is stored and multiplied: fp32, the stored bf16 weights in a bf16 GEMM, or
// fp8 copies with delayed or blockwise scaling (an fp8 GEMM emulated on fp32), or NF4 parts
// (QLoRA's frozen base) dequantized to bf16 for each bf16 GEMM. A frozen linear
// (trainable false) skips dW. LoRA adapters hang on it: y += scaling * B A dropout(x) on their
// rows of the output (a packed q|k|v linear carries one adapter per module), in fp32 GEMMs.
#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/engine/model/Dropout.h"
#include "trainscope/engine/params/Tensor.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/Fp8Quant.h"

namespace ts::engine {

struct ParamInfo;
class ParamArena;

// The model's parameter storage the linears read (owned by the model; stable pointers).
struct ParamStorage {
  Tensor* values = nullptr;    // fp32 (the compute copy under a 16-bit policy)
  Tensor* grads = nullptr;     // fp32, gradient space (ParamInfo::gradOffset)
  Tensor* values16 = nullptr;  // the stored bf16/fp16 weights (16-bit policies)
  Tensor* w8 = nullptr;        // fp8 weight copies (fp8)
  Tensor* w8Scales = nullptr;  // their dequantization scales (fp8)
  // NF4 weights are dequantized through the arena; under its windows a block linear's fp32
  // weight and gradient exist only around the GEMM that uses them (ParamArena::openWeight*).
  ParamArena* arena = nullptr;
};

// Scratch every linear of a model shares (allocated with the activations).
struct LinearScratch {
  Tensor* ones = nullptr;                 // (N) ones: the bias add and its gradient as rank-1 GEMMs
  Tensor *x16 = nullptr, *g16 = nullptr;  // bf16 GEMM operands
  Tensor* nf4W = nullptr;                 // NF4: the dequantized bf16 weight
  Tensor *fp8X = nullptr, *fp8G = nullptr, *fp8W = nullptr, *fp8TileScales = nullptr;
  Tensor *loraDU = nullptr, *loraX = nullptr;  // LoRA: dL/du (N, r), the dropped input (N, in)
  const DropoutContext* dropout = nullptr;     // seed, micro-batch key, training mode
};

// A LoRA adapter (Hu et al.; PEFT's semantics): A (r, in), B (rows, r) adding
// scaling * dropout(x) A^T B^T to rows [outOffset, outOffset + rows) of the output.
struct LoraAdapter {
  const ParamInfo* a = nullptr;
  const ParamInfo* b = nullptr;
  int64_t outOffset = 0;
  float scaling = 1.f;       // alpha / r, or alpha / sqrt(r) with use_rslora
  float dropout = 0.f;       // on the adapter's input only
  int layer = 0, index = 0;  // its dropout stream (site 2 + index) and its saved u
  Tensor* u = nullptr;       // (N, r) x A^T, saved for dB; bound by the model per block set
};

// fp8 scaling state of one linear: input, weight and output-gradient histories (delayed), the
// scales the last forward / backward used, and where its fp8 weight and scales live.
struct Fp8Site {
  const ParamInfo* w = nullptr;
  int64_t w8Offset = 0;                     // into ParamStorage::w8
  kernels::Fp8DelayedScale x, wt, g;        // input, weight, output gradient (delayed)
  float xUsed = 1.f, gUsed = 1.f;           // scales of the last forward / backward (delayed)
  int64_t scaleOffset = 0, scaleCount = 0;  // its dequantization scales in ParamStorage::w8Scales
  float wUsed = 1.f;                        // delayed: the scale the fp8 weight was quantized with
};

class Linear {
 public:
  enum class Format { F32, Bf16Gemm, Fp8Delayed, Fp8Blockwise, Nf4 };
  Linear(kernels::Backend* backend, const ParamStorage* storage, const ParamInfo* weight,
         const ParamInfo* bias, Format format);

  Format format() const { return format_; }
  bool fp8() const { return format_ == Format::Fp8Delayed || format_ == Format::Fp8Blockwise; }
  const ParamInfo& weight() const { return *w_; }
  int64_t in() const;
  int64_t out() const;
  bool trainable = true;  // false: no dW (a frozen base weight); from the weight's view
  std::vector<LoraAdapter> adapters;
  // NF4: the quantized tensors this linear's rows are made of, in order (one, or q|k|v), each
  // dequantized into its rows of the bf16 weight before a GEMM. Sets the format to Nf4.
  void setNf4Parts(std::vector<const ParamInfo*> parts);

  // fp8: the site's state (checkpoints), and re-quantizing the fp8 weight after an update.
  Fp8Site& fp8Site() { return site_; }
  const Fp8Site& fp8Site() const { return site_; }
  void initFp8(int64_t w8Offset, int64_t scaleOffset, int history, int margin, bool gradE4M3);
  int64_t fp8ScaleCount() const;  // one per tensor (delayed) or per 128x128 block (blockwise)
  void quantizeFp8Weight();
  // Delayed recipe: the fp8 bytes of the weight at `scale` (recorded as the weight's scale).
  void quantizeFp8WeightDelayed(float scale);

  // Its GEMM multiplies the input rounded to bf16 and nothing else reads the fp32 input in
  // backward (bf16 or NF4 weights, no adapters): a caller holding the input as bf16 (16-bit
  // saved activations) passes that instead of having it rounded again.
  bool readsBf16Input() const {
    return (format_ == Format::Bf16Gemm || format_ == Format::Nf4) && adapters.empty();
  }
  // out (N, out) = inp W^T + b (+ the adapters). Recomputation (checkpointing) reuses the
  // forward's fp8 scales. inp16: the input already rounded to bf16 (readsBf16Input() only).
  void forward(float* out, const float* inp, int N, const LinearScratch& s, bool recompute,
               const uint16_t* inp16 = nullptr);
  // dW += dout^T inp, db += 1^T dout, dinp = dout W (dinp may be null: not needed); the
  // adapters' dA, dB accumulate and their share of dinp is added. With inp16 (see forward)
  // inp may be null.
  void backward(float* dinp, const float* dout, const float* inp, int N, const LinearScratch& s,
                const uint16_t* inp16 = nullptr);

 private:
  void forwardBase(float* out, const float* inp, int N, const LinearScratch& s, bool recompute,
                   const uint16_t* inp16);
  void backwardBase(float* dinp, const float* dout, const float* inp, int N, const LinearScratch& s,
                    const uint16_t* inp16);
  // The bf16 GEMM input: inp16, or inp rounded into the scratch.
  const uint16_t* bf16Input(const float* inp, const uint16_t* inp16, int N,
                            const LinearScratch& s) const;
  // The adapter's input: x, or dropout(x) in s.loraX (training, dropout > 0).
  const float* adapterInput(const LoraAdapter& ad, const float* inp, int N,
                            const LinearScratch& s) const;
  float* value(const ParamInfo& p) const;
  float* grad(const ParamInfo& p) const;
  float* wScaleInv() const;
  void dequantizeFp8Weight(float* dst) const;
  const uint16_t* dequantizeNf4Weight(const LinearScratch& s) const;

  kernels::Backend* backend_;
  const ParamStorage* storage_;
  const ParamInfo* w_;
  const ParamInfo* b_;
  Format format_;
  Fp8Site site_;
  int margin_ = 0;
  std::vector<const ParamInfo*> nf4Parts_;
};

}  // namespace ts::engine
