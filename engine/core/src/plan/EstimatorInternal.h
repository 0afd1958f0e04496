#pragma once
// Internal to the estimator: the pieces of estimateMemory's memory model, shared by its driver
// (Estimator.cpp), the per-category functions (EstimatorCategories.cpp) and the engine's ZeRO
// layout per rank (EstimatorZero.cpp).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/plan/ZeroLayout.h"

namespace ts::core::estimator {

using Cat = MemoryCategory;
using Tier = MemoryTier;

inline int64_t ceilDiv(int64_t a, int64_t b) {
  return b <= 0 ? 0 : (a + b - 1) / b;
}
inline int64_t roundBytes(double b) {
  return b <= 0 ? 0 : static_cast<int64_t>(std::llround(b));
}

inline std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// The dimensions the formulas use, from the shared model description (ModelSpec.h).
struct Shape {
  int64_t L = 0, H = 0, KV = 0, C = 0, F = 0, T = 0, V = 0;
  bool bias = true, learnedPos = true, tied = true, swiglu = false, rms = false;
  int64_t headDim() const { return H > 0 ? C / H : C; }
  int64_t kvDim() const { return KV * headDim(); }
};

Shape shapeOf(const ArchSpec& a);
Shape shapeOf(const ModelConfig& m, int64_t vocab);

// Bytes per element of each model-state buffer for a precision policy.
struct PrecisionBytes {
  double param = 4;   // working weights (trainable)
  double frozen = 4;  // frozen base weights (not NF4)
  double grad = 4;
  double master = 0;   // fp32 master copy (optimizer_state)
  double state = 4;    // one optimizer state element (m, v or momentum) at 32-bit
  double act = 4;      // saved activations
  double fp8Copy = 0;  // fp8 weight copy kept next to the bf16 weights
};

// Activations and workspace of one micro-batch.
struct ActBytes {
  double steady = 0;  // allocated between steps
  double peak = 0;
  double wsSteady = 0;
  double wsPeak = 0;
};

// Adds steady (current) and the larger of steady and peak to one entry of the table.
inline void setEntry(RankMemory& rm, Tier t, Cat c, double steady, double peak) {
  auto& e = rm.at(t, c);
  e.current += roundBytes(steady);
  e.peak += roundBytes(std::max(steady, peak));
}

// What estimateMemory reads from the config and its options, resolved once.
struct EstimateInputs {
  EstimateInputs(const RunConfig& c, const EstimateOptions& o) : cfg(c), opt(o) {}
  const RunConfig& cfg;
  const EstimateOptions& opt;
  bool engineModel = true;  // the engine's activation model (not PyTorch's)
  std::string policy;       // precision.policy, lower case
  PrecisionBytes pb;
  // A 16-bit policy under the engine model: the engine computes on fp32 copies.
  bool engine16 = false;
  bool bf16Gemm = false;
  // One rank, optimizer on the device: the fp32 gradients (and values) a block at a time.
  bool gradWindow = false, valueWindow = false;
  int ranks = 1, stage = 0;
  bool nf4 = false;
  Shape s;
  ArchSpec arch;
  std::vector<TensorSpec> tensors;
  int64_t batch = 1;  // micro-batch
  int kernelThreads = 0;
};

// Resolves est.vocab, est.params and the inputs; adds the notes about precision.
EstimateInputs estimateInputsOf(const RunConfig& cfg, const EstimateOptions& opt,
                                MemoryEstimate& est);

// Model-state bytes before sharding.
struct ModelStateBytes {
  double trainParam = 0, frozen = 0, grad = 0, opt = 0;
  double largestBlockLinear = 0, nf4Elements = 0;
  double fp8Extra = 0;   // fp8 copies of every block linear weight and their scales
  double fp8Copies = 0;  // the copies alone
  std::map<int, double> fp8PerBlock;
};
ModelStateBytes modelStateBytes(const EstimateInputs& in);

// The student's activations and workspace for one micro-batch.
ActBytes studentActivations(const EstimateInputs& in);

// A distillation teacher: its frozen weights, logits and forward transient.
struct TeacherBytes {
  double params = 0, actPeak = 0, actSteady = 0, ws = 0;
};
// Sets est.params.teacher.
TeacherBytes teacherBytes(const EstimateInputs& in, MemoryEstimate& est);

// Where the model state lives, and the engine's ZeRO layout when it applies.
struct Placement {
  Tier optTier = Tier::Device, paramTier = Tier::Device;
  int64_t trainable = 0;    // P
  bool frozenBase = false;  // a frozen base (LoRA): not every tensor trains
  bool zeroEngine = false;  // the engine's ZeRO layout exactly (EstimatorZero.cpp)
  bool paramsOff = false;   // ZeRO-3 parameter offload
  bool fp8Transient = false;
  double fp8BlockPages = 0;  // one block's fp8 copies on whole pages
  int ckSegment = 0;         // the engine's checkpoint segment: 0 none, 1 every block
  std::vector<ZeroGroup> zgroups, vgroups;  // gradient space, value space
  std::vector<int64_t> zoffs;               // each tensor's gradient-space offset
  int64_t zeroTotal = 0, valueTotal = 0;
};
// Adds a note when parameter offload cannot apply.
Placement placementOf(const EstimateInputs& in, const ModelStateBytes& ms, MemoryEstimate& est);

// Workspace to add to the activations' (steady, peak).
struct WorkspaceBytes {
  double steady = 0, peak = 0;
};

// Everything one rank's table is computed from.
struct RankInputs {
  const EstimateInputs& in;
  const ModelStateBytes& ms;
  const ActBytes& act;
  const TeacherBytes& teacher;
  const Placement& pl;
  const ParameterCounts& params;
  WorkspaceBytes computeCopies;  // the engine's fp32 compute copies (not under its ZeRO)
};

// The engine's fp32 compute copies of a 16-bit policy, on one rank or without its ZeRO.
WorkspaceBytes computeCopyWorkspace(const EstimateInputs& in, const ModelStateBytes& ms,
                                    const ParameterCounts& params);

// Model state of rank r without the engine's ZeRO layout (replicated, or textbook shards).
void replicatedParameters(const RankInputs& ri, int r, RankMemory& rm);
void replicatedGradients(const RankInputs& ri, int r, RankMemory& rm);
void replicatedOptimizerState(const RankInputs& ri, int r, RankMemory& rm);
WorkspaceBytes replicatedWorkspace(const RankInputs& ri);
void hostStaging(const RankInputs& ri, RankMemory& rm);

// Model state and workspace of rank r under the engine's ZeRO layout; returns the device
// workspace.
WorkspaceBytes zeroRankMemory(const RankInputs& ri, int r, RankMemory& rm);

}  // namespace ts::core::estimator
