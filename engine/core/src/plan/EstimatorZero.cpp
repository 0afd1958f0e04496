// The engine's ZeRO exactly (core/ZeroLayout.h): padded, page-aligned shards; what a rank holds
// at a step boundary (current) and the most it gathers or keeps live (peak), per category.
#include <utility>

#include "EstimatorInternal.h"

namespace ts::core::estimator {
namespace {

// 8-bit AdamW over a shard [lo, hi): each tensor's piece keeps its blocks' state (compact), the
// master the whole shard (Optimizer.cpp's AdamW8).
double adam8ShardBytes(const RankInputs& ri, int64_t lo, int64_t hi) {
  const auto& tensors = ri.in.tensors;
  const auto& offs = ri.pl.zoffs;
  double bytes = ri.in.pb.master * double(hi - lo);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (offs[i] < 0) continue;
    const int64_t n = tensors[i].numel();
    const int64_t k = std::max<int64_t>(0, std::min(offs[i] + n, hi) - std::max(offs[i], lo));
    bytes += n >= 4096 ? double(2 * k + 8 * ceilDiv(k, 256)) : double(8 * k);
  }
  return bytes;
}

double sum(const std::vector<int64_t>& a, int from, int to) {
  double t = 0;
  for (int i = from; i <= to; ++i) t += double(a[size_t(i)]);
  return t;
}

// Checkpointing in segments of k blocks: stage 3 recomputes a segment's forward (all but the
// last segment's) and keeps its blocks gathered until their backward.
class Segments {
 public:
  Segments(int stage, int ckSegment, int blocks) : stage_(stage), k_(ckSegment), blocks_(blocks) {}

  // Block l's recomputed segment [first, last], or {-1, -1}.
  std::pair<int, int> of(int l) const {
    if (stage_ < 3 || k_ <= 0) return {-1, -1};
    const int first = l / k_ * k_, last = std::min(blocks_, first + k_) - 1;
    return last == blocks_ - 1 ? std::pair{-1, -1} : std::pair{first, last};
  }
  // Elements live in backward of block l (beyond the resident ones): l and the prefetched l-1,
  // or in a recomputed segment the blocks from its first up to l.
  double liveAt(const std::vector<int64_t>& a, int l) const {
    const auto [f, e] = of(l);
    if (f >= 0 && l > f) return sum(a, f, l);
    return double(a[size_t(l)]) + (l > 0 ? double(a[size_t(l - 1)]) : 0);
  }

 private:
  int stage_, k_, blocks_;
};

// What rank r holds of the layout, in elements, and the sizes every category derives from it.
// Gradient space (z) and value space (v: the weights, a frozen base's too).
struct ZeroRankView {
  ZeroRankShare z, v;
  double own = 0, full = 0, res = 0, two = 0;      // gradient space
  double vOwn = 0, vFull = 0, vRes = 0, vTwo = 0;  // value space
  // Parameter offload: between uses not even the owned part stays; a step gathers the groups
  // outside the blocks whole (rw) and two adjacent blocks at a time, and the update brings the
  // blocks' owned parts (DataParallel's fetchOwned / dropOwned).
  double rw = 0;
  // fp8 copies and scales: whole on every rank, or under ZeRO-3 the scales and, at the peak,
  // one gathered block's copies (w8).
  double extra = 0, extraPeak = 0, w8 = 0;
  double segV = 0, segW = 0, segLen = 0;  // the largest recomputed segment, gathered
  double pCur = 0, pPeak = 0;             // the stored weights (elements)
  double gCur = 0, gPeak = 0;             // the gradients (elements)
  Segments seg{0, 0, 0};
};

ZeroRankView zeroRankView(const RankInputs& ri, int r) {
  const EstimateInputs& in = ri.in;
  const Placement& pl = ri.pl;
  ZeroRankView w;
  w.z = zeroRankShare(pl.zgroups, in.ranks, r);
  w.v = zeroRankShare(pl.vgroups, in.ranks, r);
  const ZeroRankShare& z = w.z;
  const ZeroRankShare& v = w.v;
  w.own = double(z.owned);
  w.full = double(pl.zeroTotal);
  w.res = double(z.residentOutside);
  w.two = double(z.maxTwoBlocksOutside);
  w.vOwn = double(v.owned);
  w.vFull = double(pl.valueTotal);
  w.vRes = double(v.residentOutside);
  w.vTwo = double(v.maxTwoBlocksOutside);
  w.extra = pl.fp8Transient ? ri.ms.fp8Extra - ri.ms.fp8Copies : ri.ms.fp8Extra;
  w.extraPeak = w.extra + (pl.fp8Transient ? pl.fp8BlockPages : 0);
  w.w8 = pl.fp8Transient ? pl.fp8BlockPages : 0;
  w.rw = double(v.residentWhole);
  w.seg = Segments(in.stage, pl.ckSegment, int(v.blockOutside.size()));
  for (int l = 0; l < int(v.blockOutside.size()); ++l)
    if (const auto [f, e] = w.seg.of(l); f >= 0 && l == f) {
      w.segV = std::max(w.segV, sum(v.blockOutside, f, e));
      w.segW = std::max(w.segW, sum(v.blockWhole, f, e));
      w.segLen = std::max(w.segLen, double(e - f + 1));
    }
  w.pCur = pl.paramsOff ? 0 : in.stage >= 3 ? w.vOwn : w.vFull;
  w.pPeak = pl.paramsOff
                ? w.rw + std::max({double(v.maxTwoBlocksWhole), w.segW, double(v.ownedInBlocks)})
            : in.stage >= 3 ? w.vOwn + w.vRes + std::max(w.vTwo, w.segV)
                            : w.vFull;
  // Stage 2/3: a block's gradients live until its reduce-scatter, which runs during the next
  // block's backward, so two adjacent blocks' at most.
  w.gCur = in.stage >= 2 ? w.own : w.full;
  w.gPeak = in.stage >= 2 ? w.own + w.res + w.two : w.full;
  return w;
}

// The stored weights; returns the host staging it needs (nvme parameter offload).
double zeroParameters(const RankInputs& ri, const ZeroRankView& w, RankMemory& rm) {
  const double param = ri.in.pb.param;
  const ZeroRankShare& v = w.v;
  // At their peak with the fp8 copies of the blocks awaited then: one in forward and backward,
  // a whole segment while it is recomputed.
  const double pPeakBytes =
      ri.in.stage < 3 ? w.pPeak * param + w.extraPeak
      : ri.pl.paramsOff
          ? w.extra + w.rw * param +
                std::max({double(v.maxTwoBlocksWhole) * param + w.w8,
                          w.segW * param + w.segLen * w.w8, double(v.ownedInBlocks) * param})
          : w.extra + (w.vOwn + w.vRes) * param +
                std::max(w.vTwo * param + w.w8, w.segV * param + w.segLen * w.w8);
  setEntry(rm, Tier::Device, Cat::Parameters, w.pCur * param + w.extra, pPeakBytes);
  double hostWs = 0;
  if (ri.pl.paramsOff) {
    setEntry(rm, ri.pl.paramTier, Cat::Parameters, w.vOwn * param, w.vOwn * param);
    // nvme: each group's part written behind from host memory after the update, until its
    // next read (the whole shard at once).
    if (ri.pl.paramTier == Tier::Nvme) hostWs += w.vOwn * param;
  }
  return hostWs;
}

void zeroGradients(const RankInputs& ri, const ZeroRankView& w, RankMemory& rm) {
  if (ri.in.engine16) {
    setEntry(rm, Tier::Device, Cat::Gradients, w.gCur * 2, w.gCur * 2);  // 16-bit: the shard
  } else {
    setEntry(rm, Tier::Device, Cat::Gradients, w.gCur * 4, w.gPeak * 4);
  }
}

// The shard's optimizer state, on the device or offloaded; adds to `hostWs` what offloading to
// nvme stages on the host.
void zeroOptimizerState(const RankInputs& ri, const ZeroRankView& w, int r, RankMemory& rm,
                        double& hostWs) {
  const PrecisionBytes& pb = ri.in.pb;
  const bool eight = ri.in.cfg.optimizer.state_bits == 8;
  const double own = w.own;
  const auto [lo, hi] = zeroShard(ri.pl.zeroTotal, ri.in.ranks, r);
  if (ri.pl.optTier == Tier::Device) {
    // A shard over a frozen base keeps an fp32 master whatever the policy (the caller gathers
    // the new adapters from it).
    const double masterB = ri.pl.frozenBase ? 4 : pb.master;
    const double o = eight ? adam8ShardBytes(ri, lo, hi) + (masterB - pb.master) * own
                           : own * (ri.ms.opt / double(ri.pl.trainable) - pb.master + masterB);
    setEntry(rm, Tier::Device, Cat::OptimizerState, o, o);
    return;
  }
  // Offloaded (OffloadedOptimizer.cpp): m, v and an fp32 master of the shard on the host or in
  // files, the shard's reduced gradients copied to the host each step; nvme streams through two
  // host chunks of the three state buffers (at most 2^20 elements each). 8-bit: the shard's
  // compact 8-bit state and an fp32 master, streamed item by item through two slots of one item
  // of each of its seven buffers.
  const double state = eight ? adam8ShardBytes(ri, lo, hi) - pb.master * own + 4 * own : own * 12;
  setEntry(rm, ri.pl.optTier, Cat::OptimizerState, state, state);
  setEntry(rm, Tier::Host, Cat::Gradients, own * 4, own * 4);
  if (ri.pl.optTier == Tier::Nvme) {
    const double chunk = std::min(double(int64_t(1) << 20), std::max(own, 1.0));
    const double slot = eight ? chunk * 6 + 8 * std::ceil(chunk / 256) + 8 * std::min(chunk, 4096.0)
                              : 3 * chunk * 4;
    hostWs += 2 * slot;
    // A frozen base's caller reads the master back after each update.
    if (ri.pl.frozenBase) hostWs += own * 4;
  }
}

// Device workspace: the activations', the fp32 compute copies of a 16-bit policy at their most
// (forward's, backward's or the update's moment) and the reduce-scatter's output buffer.
WorkspaceBytes zeroWorkspace(const RankInputs& ri, const ZeroRankView& w) {
  const EstimateInputs& in = ri.in;
  const ZeroRankShare& v = w.v;
  double wsC = ri.act.wsSteady + ri.teacher.ws, wsP = ri.act.wsPeak + ri.teacher.ws;
  // A frozen base: the update gathers the adapters' new values whole (fp32, gradient space)
  // into a buffer of its own.
  const double gatherBuf = ri.pl.frozenBase ? w.full : 0;
  const double own = w.own, res = w.res, rw = w.rw;
  const double vOwn = w.vOwn, vRes = w.vRes, vTwo = w.vTwo;
  if (in.engine16) {  // fp32 compute copies of the weights and of the gradients
    wsC += w.pCur * 4 + w.gCur * 4;
    // Backward of block l: values of l and l-1 (prefetched), gradients of l and l+1 (in its
    // reduce-scatter) beyond the resident ones.
    const auto& go = w.z.blockOutside;
    double bwd = 0, bwdWhole = 0;
    for (int l = 0; l < int(v.blockOutside.size()) && l < int(go.size()); ++l) {
      const double gl =
          double(go[size_t(l)]) + (l + 1 < int(go.size()) ? double(go[size_t(l + 1)]) : 0);
      bwd = std::max(bwd, w.seg.liveAt(v.blockOutside, l) + gl);
      bwdWhole = std::max(bwdWhole, w.seg.liveAt(v.blockWhole, l) + gl);
    }
    if (ri.pl.paramsOff)
      wsP += 4 * std::max({rw + double(v.maxTwoBlocksWhole) + own, rw + own + res + bwdWhole,
                           rw + double(v.ownedInBlocks) + own + gatherBuf});
    else if (in.stage >= 3)
      wsP += 4 * std::max({vOwn + vRes + vTwo + own, vOwn + vRes + own + res + bwd,
                           vOwn + vRes + own + gatherBuf});
    else
      wsP += 4 * std::max(w.pPeak + w.gPeak, w.pPeak + w.gCur + gatherBuf);
  } else {
    wsP += gatherBuf * 4;
  }
  if (in.stage >= 1) {  // the reduce-scatter's output buffer
    wsC += double(w.z.maxGroupOwned) * 4;
    wsP += double(w.z.maxGroupOwned) * 4;
  }
  return {wsC, wsP};
}

}  // namespace

WorkspaceBytes zeroRankMemory(const RankInputs& ri, int r, RankMemory& rm) {
  const ZeroRankView w = zeroRankView(ri, r);
  double hostWs = zeroParameters(ri, w, rm);
  zeroGradients(ri, w, rm);
  zeroOptimizerState(ri, w, r, rm, hostWs);
  if (hostWs > 0) setEntry(rm, Tier::Host, Cat::Workspace, hostWs, hostWs);
  return zeroWorkspace(ri, w);
}

}  // namespace ts::core::estimator
