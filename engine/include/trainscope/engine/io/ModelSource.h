#pragma once
// A model from where it is kept, for inference and export: a trainscope checkpoint (full
// weights; or a LoRA run's adapters on top of the base the checkpoint names), or a Hugging Face
// folder (HfModel.h). Built on the given backend in fp32.
#include <functional>
#include <memory>
#include <string>

#include "trainscope/core/config/Config.h"
#include "trainscope/engine/model/Gpt.h"

namespace ts::engine {

struct LoadedModel {
  std::unique_ptr<Gpt> model;
  core::RunConfig config;  // the run config it was trained with (a folder's: model.* only)
  std::string base;        // a LoRA checkpoint's base; empty otherwise
  bool hfFolder = false;
  bool adapterOnly = false;  // a checkpoint of the trainable tensors (LoRA)
};

// A fine-tuning base into `arena` (LoRA adapters keep their init): a Hugging Face folder
// (HfModel.h; with `run`, the run's model.* must describe it, every differing key listed) or a
// trainscope checkpoint's full weights (loadBaseWeights). `checksum` identifies the base (the
// folder's fingerprint, the checkpoint's sidecar checksum); `what` says what it was.
struct BaseWeights {
  size_t tensors = 0;
  std::string checksum, what;
};
BaseWeights loadBase(const std::string& path, ParamArena& arena,
                     const core::ModelConfig* run = nullptr, int64_t vocab = 0);

// The model.* of what a path holds (a checkpoint's run config, a folder's config.json), without
// reading its weights: the distillation teacher's shape for the estimator.
core::ModelConfig modelConfigAt(const std::string& path);

// The tokenizer.json a model carries: a Hugging Face folder's, a checkpoint's (the run's
// tokenizer, kept with it), else the base's of a checkpoint that has none; "" when none.
std::string modelTokenizer(const std::string& path);

// `seqLen` > 0 overrides model.seq_len where the architecture allows (llama: any; gpt2: at
// most its position table). `adjust` may change the fp32 inference config before the model is
// built (the distillation teacher: forward only, bf16 or NF4 storage). Throws CheckpointError or
// FormatError naming the file.
LoadedModel loadModelFrom(const std::string& path, kernels::Backend* backend,
                          MemoryTracker* tracker, int seqLen = 0,
                          const std::function<void(GptConfig&)>& adjust = {});

}  // namespace ts::engine
