#pragma once
// The normalisation layers: LayerNorm (GPT-2: mean and variance, weight and bias) and RMSNorm
// (LLaMA: root mean square, weight only), behind one interface so a block holds either.
// Forward saves per-row statistics (NormSaved); backward accumulates (+=) into dinp and into the
// weight's (and bias's) gradient when they are trainable.
#include <memory>

#include "trainscope/engine/model/LayerContext.h"

namespace ts::engine {

// What a norm keeps for backward (its input is kept by whoever owns it: the residual stream).
struct NormSaved {
  Tensor mean;  // (N) LayerNorm only
  Tensor rstd;  // (N)
};

class Norm {
 public:
  virtual ~Norm() = default;
  virtual void forward(const LayerContext& c, float* out, NormSaved& s, const float* in) const = 0;
  virtual void backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                        const NormSaved& s) const = 0;
};

class LayerNorm final : public Norm {
 public:
  LayerNorm(const ParamInfo* weight, const ParamInfo* bias, int dim, float eps = 1e-5f)
      : w_(weight), b_(bias), dim_(dim), eps_(eps) {}
  void forward(const LayerContext& c, float* out, NormSaved& s, const float* in) const override;
  void backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                const NormSaved& s) const override;

 private:
  const ParamInfo *w_, *b_;
  int dim_;
  float eps_;
};

// RMSNorm: x * rstd * (offset + w); offset 1 is Gemma's (1 + w).
class RMSNorm final : public Norm {
 public:
  RMSNorm(const ParamInfo* weight, int dim, float eps = 1e-5f, float offset = 0.f)
      : w_(weight), dim_(dim), eps_(eps), offset_(offset) {}
  void forward(const LayerContext& c, float* out, NormSaved& s, const float* in) const override;
  void backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                const NormSaved& s) const override;
  // As backward, writing (=) dinp instead of accumulating (a norm on a branch's output).
  void backwardWrite(const LayerContext& c, float* dinp, const float* dout, const float* in,
                     const NormSaved& s) const;

 private:
  const ParamInfo* w_;
  int dim_;
  float eps_, offset_;
};

// No norm (OLMo 2's blocks have none before their branches): the output is a copy of the input
// and backward passes the gradient through.
class IdentityNorm final : public Norm {
 public:
  explicit IdentityNorm(int dim) : dim_(dim) {}
  void forward(const LayerContext& c, float* out, NormSaved& s, const float* in) const override;
  void backward(const LayerContext& c, float* dinp, const float* dout, const float* in,
                const NormSaved& s) const override;

 private:
  int dim_;
};

// The norm a description asks for: RMSNorm when it has no bias, none without a weight.
std::unique_ptr<Norm> makeNorm(const ParamInfo* weight, const ParamInfo* bias, int dim,
                               float eps = 1e-5f, float offset = 0.f);

}  // namespace ts::engine
