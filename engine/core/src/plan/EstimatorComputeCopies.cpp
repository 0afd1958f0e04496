// The engine's fp32 compute copies under a 16-bit policy (workspace): of every weight (frozen
// ones too) and of the trainable gradients, whole or, on one rank with the optimizer on the
// device, only in part (ParamArena's windows; core::gradWindowOf / valueWindowOf).
#include <set>
#include <utility>

#include "EstimatorInternal.h"

namespace ts::core::estimator {
namespace {

double valueAt(const std::map<int, double>& m, int block) {
  auto it = m.find(block);
  return it == m.end() ? 0.0 : it->second;
}

// Element counts of the groups the windows open: outside the blocks (before the first, after
// the last) and per block.
struct GroupSizes {
  // The trainable elements (gradients) before the first block and after the last.
  double gradFirst = 0, gradLast = 0;
  double firstV = 0, lastV = 0;  // the values before the first block and after the last
  double headW = 0;              // an untied LM head (its own windows; in lastV too)
  bool headTrains = false;
  // Per block: the values and gradients outside the linear weights (norms, biases, adapters),
  // the largest linear weight window (values or gradient; gradient only), the largest
  // trainable linear weight, and whether anything trains.
  std::map<int, double> smallV, smallG, gemmMax, gradGemmMax, tensorMax;
  std::map<int, bool> trains;
  std::set<int> blocks;
};

// A block's linear weights have windows of their own (ParamArena::openWeight*), open one GEMM
// at a time: its gradient around the GEMM that accumulates it, its fp32 values around each GEMM
// that reads them (not under bf16 GEMMs, nor for NF4 weights). A fused weight (llama's q|k|v,
// gate|up) opens whole; the optimizer opens tensor by tensor. The rest of a block (norms,
// biases, adapters) opens with its group.
GroupSizes groupSizesOf(const EstimateInputs& in) {
  GroupSizes g;
  std::map<std::pair<int, int>, double> gemmV, gemmG;
  bool pastBlocks = false;
  for (const auto& t : in.tensors) {
    const double n = static_cast<double>(t.numel());
    const bool nf4Weight =
        in.nf4 && !t.trainable && t.block >= 0 && t.role == TensorRole::LinearWeight;
    if (t.block >= 0) pastBlocks = true;
    if (t.block < 0) {
      if (t.trainable) (pastBlocks ? g.gradLast : g.gradFirst) += n;
      (pastBlocks ? g.lastV : g.firstV) += n;
      if (t.role == TensorRole::Head) {
        g.headW = n;
        g.headTrains = t.trainable;
      }
      continue;
    }
    g.blocks.insert(t.block);
    if (t.trainable) g.trains[t.block] = true;
    if (t.role == TensorRole::LinearWeight) {
      const std::pair<int, int> key{t.block, static_cast<int>(t.slot)};
      if (!in.bf16Gemm && !nf4Weight) gemmV[key] += n;
      if (t.trainable) {
        gemmG[key] += n;
        g.tensorMax[t.block] = std::max(g.tensorMax[t.block], n);
      }
      continue;
    }
    g.smallV[t.block] += n;
    if (t.trainable) g.smallG[t.block] += n;
  }
  for (const auto& [key, n] : gemmV) g.gemmMax[key.first] = std::max(g.gemmMax[key.first], n);
  for (const auto& [key, n] : gemmG) {
    g.gemmMax[key.first] = std::max(g.gemmMax[key.first], n);
    g.gradGemmMax[key.first] = std::max(g.gradGemmMax[key.first], n);
  }
  return g;
}

// Values and gradients under windows: the most open at once (elements). The embeddings' fp32
// values around their forward (fp32 GEMMs; a bf16 embedding reads the bf16 tables); the final
// norm's (and the token table's when a tied head reads it in fp32) around its and the head's
// forward and backward, with their gradients, and an untied head's own window (its gradient,
// or its fp32 values, not read by a bf16 head); at block l's backward its group's values and
// gradients and one linear weight's window; pure_bf16's optimizer updates a group in place
// and then each own-window weight with its values and gradient open. Between steps none.
double valueWindowMoment(const EstimateInputs& in, const GroupSizes& g, double tiedFirst) {
  const bool pure = in.policy == "pure_bf16";
  const double lastSmallV = g.lastV - g.headW;
  const double lastSmallG = g.gradLast - (g.headTrains ? g.headW : 0.0);
  // The head and embedding read the bf16 tables under bf16 GEMMs and with a bf16 NF4 base.
  const bool bf16Tables =
      in.bf16Gemm || (in.nf4 && (in.policy == "bf16" || in.policy == "pure_bf16"));
  const double headOwn = (g.headTrains || !bf16Tables) ? g.headW : 0.0;
  const double headV = lastSmallV + (in.s.tied && !bf16Tables ? g.firstV : 0.0);
  double moment = std::max(
      {lastSmallG + tiedFirst + headV + headOwn, g.gradFirst, bf16Tables ? 0.0 : g.firstV});
  if (pure)
    moment = std::max({moment, g.firstV + g.gradFirst,
                       lastSmallV + lastSmallG + (g.headTrains ? 2 * g.headW : 0.0)});
  for (int b : g.blocks) {
    const double smallV = valueAt(g.smallV, b), smallG = valueAt(g.smallG, b);
    moment = std::max(moment, smallV + tiedFirst + smallG + valueAt(g.gemmMax, b));
    if (pure && g.trains.count(b) && g.trains.at(b))
      moment = std::max(moment, smallV + smallG + 2 * valueAt(g.tensorMax, b));
  }
  return moment;
}

// Gradients only under windows (fp8 quantizes from the whole fp32 weights after every step):
// a block's while its backward runs; the final norm's and head's (after the last block) for
// their backward; the embeddings' (before the first block) for theirs, or from the start when
// the head is tied (it writes the token table's gradient first).
double gradWindowMoment(const GroupSizes& g, double tiedFirst) {
  double moment = std::max(g.gradLast + tiedFirst, g.gradFirst);
  for (int b : g.blocks)
    moment = std::max(moment, tiedFirst + valueAt(g.smallG, b) + valueAt(g.gradGemmMax, b));
  return moment;
}

}  // namespace

WorkspaceBytes computeCopyWorkspace(const EstimateInputs& in, const ModelStateBytes& ms,
                                    const ParameterCounts& params) {
  // (NF4 weights have no fp32 copy: they are dequantized per GEMM.)
  const double values = 4.0 * (static_cast<double>(params.total) - ms.nf4Elements);
  const double grads32 = 4.0 * static_cast<double>(params.trainable);
  WorkspaceBytes ws;
  if (!in.valueWindow && !in.gradWindow) {
    ws.peak = values + grads32;
    ws.steady = values + grads32;
    return ws;
  }
  const GroupSizes g = groupSizesOf(in);
  const double tiedFirst = in.s.tied ? g.gradFirst : 0.0;
  if (in.valueWindow) {
    ws.peak = 4.0 * valueWindowMoment(in, g, tiedFirst);
  } else {
    ws.peak = values + 4.0 * gradWindowMoment(g, tiedFirst);
    ws.steady = values;
  }
  // (fp8 and bf16 GEMM operand scratch are buffers of the saved state.)
  return ws;
}

}  // namespace ts::core::estimator
