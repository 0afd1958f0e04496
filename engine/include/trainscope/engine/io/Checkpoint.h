#pragma once
// Checkpoints: a directory per checkpoint holding
//   model.safetensors      the weights under their names (wte, h.0.attn.c_attn.weight, ...); with
//                          frozen tensors (LoRA) only the trainable ones ("weights": "trainable")
//   optimizer.safetensors  optimizer state, one flat tensor per state (exp_avg, exp_avg_sq, ...)
//   tokenizer.json, ...    the run's tokenizer files when it had them (TrainingState::attachments)
//   state.json             the sidecar: step, tokens, optimizer step count, data position (the
//                          Dataset state with its RNG), resolved config, each file's size and
//                          FNV-1a 64 checksum, and a checksum of the sidecar itself.
// Written into a temporary directory (every file fsync'ed) and renamed into place, so a crash
// or a full disk leaves the previous checkpoint untouched. Loading verifies every size and
// checksum and every tensor name/shape BEFORE anything is copied into the model.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/engine/optim/Optimizer.h"
#include "trainscope/engine/params/ParamArena.h"

namespace ts::engine {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainingState {
  int64_t step = 0;                                 // optimizer steps completed
  int64_t tokens = 0;                               // training tokens seen
  nlohmann::json data = nlohmann::json::object();   // Dataset::state()
  nlohmann::json extra = nlohmann::json::object();  // best val loss, ...
  // Files copied into the checkpoint as they are (the run's tokenizer.json and
  // tokenizer_config.json), listed and verified like the others; export-hf passes them on.
  std::vector<std::string> attachments;
};

struct CheckpointInfo {
  std::string path;      // the checkpoint directory
  std::string checksum;  // hex FNV-1a 64 of the sidecar (which covers the other files)
  int64_t step = 0;
  int64_t bytes = 0;  // all files
};

// Writes `<parentDir>/step_<step>` atomically. Throws CheckpointError (with the OS error) and
// removes the partial temporary directory on any failure.
CheckpointInfo saveCheckpoint(const std::string& parentDir, ParamArena& arena, Optimizer& optimizer,
                              const nlohmann::json& config, const TrainingState& state);

struct LoadedCheckpoint {
  TrainingState state;
  nlohmann::json config;  // the config the checkpoint was trained with
  std::string path;
  std::string checksum;
};

// Accepts the checkpoint directory or its state.json. Verifies everything, then loads weights
// into the arena's fp32 values (and optimizer state when `optimizer` is given); under a 16-bit
// policy the caller then rounds them (ParamArena::setWeightsFrom). Throws CheckpointError naming
// the file and the problem (missing, truncated, checksum mismatch, shape mismatch); the model is
// untouched in that case.
// A ZeRO rank reads its shard of the optimizer state (`shard`); a checkpoint written by another
// number of ranks (its state.json's extra.zero_layout) is remapped tensor by tensor.
LoadedCheckpoint loadCheckpoint(const std::string& path, ParamArena& arena, Optimizer* optimizer,
                                OptimizerShard shard = {});

// A checkpoint of weights only (import-hf): `dir` itself, atomically, with model.safetensors,
// an empty optimizer.safetensors (optimizer "none": it is a base to fine-tune, not a run to
// resume) and state.json with `config`.
CheckpointInfo saveWeightsCheckpoint(const std::string& dir, ParamArena& arena,
                                     const nlohmann::json& config,
                                     const nlohmann::json& extra = nlohmann::json::object(),
                                     const std::vector<std::string>& attachments = {});

// The files a checkpoint carries besides weights and state (tokenizer.json, ...), each verified
// against the sidecar: full paths. Throws CheckpointError on a damaged one.
std::vector<std::string> checkpointAttachments(const std::string& path);

// A fine-tuning base (finetune.base_checkpoint): the full weights of a trainscope checkpoint
// (verified as loadCheckpoint does) into the arena's fp32 values by name; every tensor of the
// model must be there except LoRA adapters, which a base does not have (the caller initialises
// them). Returns the names loaded and the base's sidecar checksum. Throws CheckpointError naming
// the file and tensor (missing, shape, a Hugging Face folder, an adapter-only checkpoint); the
// arena is untouched then.
struct LoadedBase {
  std::vector<std::string> tensors;
  std::string checksum;
};
LoadedBase loadBaseWeights(const std::string& path, ParamArena& arena);

// Removes checkpoint directories `step_*` under parentDir except the newest `keep`.
void pruneCheckpoints(const std::string& parentDir, int keep);

}  // namespace ts::engine
