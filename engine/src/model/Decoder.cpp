#include "trainscope/engine/model/Decoder.h"

#include "trainscope/engine/params/ParamArena.h"

#include <algorithm>
#include <stdexcept>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

using profiler::ScopedRange;
using profiler::SpanCategory;

bool Decoder::streamed(const LayerContext& c) const {
  return !forwardOnly_ && !c.ws->stream.empty();
}

float* Decoder::input(const LayerContext& c, DecoderActivations& a) const {
  return streamed(c) ? c.ws->stream.f32() : inputOf(a, 0);
}

float* Decoder::inputOf(DecoderActivations& a, int l) const {
  if (forwardOnly_) return a.blocks[0].input.f32();
  // Its own set's input (plain), or with segments of k blocks the segment's checkpoint (first
  // block) / the scratch slot's input (the others).
  if (k_ == 0) return a.blocks[l].input.f32();
  return l % k_ == 0 ? a.checkpoints[l / k_].f32() : a.blocks[l % k_].input.f32();
}

void Decoder::blockForward(const LayerContext& c, int l, BlockActivations& s, const float* in,
                           float* out, bool recompute) const {
  if (hooks_.beforeBlockForward) hooks_.beforeBlockForward(l, recompute);
  // valueWindow: the block's fp32 compute copy exists for its forward only.
  if (c.arena) c.arena->openBlockValues(l);
  blocks_[l].forward(c, s, in, out, recompute);
  if (c.arena) c.arena->closeBlockValues(l);
  if (hooks_.afterBlockForward) hooks_.afterBlockForward(l, recompute);
}

void Decoder::forward(const LayerContext& c, DecoderActivations& a, float* out) const {
  const int L = layers();
  if (streamed(c)) {
    // Saved inputs are stored packed: the blocks run in place on the fp32 stream, each packing
    // its own input; a segment's exact checkpoint is copied from the stream.
    float* x = c.ws->stream.f32();
    const int64_t bytes = c.rows() * c.ws->stream.shape().back() * int64_t(sizeof(float));
    for (int l = 0; l < L; ++l) {
      if (k_ > 0 && l % k_ == 0) c.backend->copyOnDevice(a.checkpoints[l / k_].f32(), x, bytes);
      blockForward(c, l, a.blocks[k_ == 0 ? l : l % k_], x, l + 1 < L ? x : out, false);
    }
    return;
  }
  for (int l = 0; l < L; ++l) {
    // A block reads its input before it writes its output, so forward-only runs in place.
    auto& s = a.blocks[forwardOnly_ ? 0 : k_ == 0 ? l : l % k_];
    blockForward(c, l, s, inputOf(a, l), l + 1 < L ? inputOf(a, l + 1) : out, false);
  }
}

void Decoder::backward(const LayerContext& c, DecoderActivations& a) const {
  if (forwardOnly_) throw std::logic_error("a forward-only decoder has no backward");
  const int L = layers();
  auto blockBackward = [&](int l, BlockActivations& s, const float* in) {
    // 16-bit gradients without an fp32 copy (ParamArena gradWindow): the block's fp32
    // gradients exist from here until they are rounded into the 16-bit ones.
    const int g = c.arena ? c.arena->groupOfBlock(l) : -1;
    if (g >= 0) c.arena->openGrads(size_t(g));
    if (hooks_.beforeBlockBackward) hooks_.beforeBlockBackward(l);
    if (c.arena) c.arena->openBlockValues(l);
    blocks_[l].backward(c, s, in);
    if (c.arena) c.arena->closeBlockValues(l);
    if (g >= 0) c.arena->closeGrads(size_t(g), true);
    if (hooks_.blockGradientsReady) hooks_.blockGradientsReady(l);
  };
  if (k_ == 0) {
    for (int l = L - 1; l >= 0; --l) blockBackward(l, a.blocks[l], a.blocks[l].input.f32());
    return;
  }
  const int segments = (L + k_ - 1) / k_;
  for (int s = segments - 1; s >= 0; --s) {
    const int first = s * k_, last = std::min(L, first + k_) - 1;
    auto in = [&](int l) {  // what the blocks read without a saved input (plain)
      return l == first ? a.checkpoints[s].f32() : a.blocks[l - first].input.f32();
    };
    // The last segment is still in the scratch sets from forward; the others are recomputed
    // from their checkpoint with the same kernels (and the same dropout streams), hence bitwise
    // the same values. The final residual add of the segment is skipped: the next checkpoint
    // already holds it.
    if (s != segments - 1 && streamed(c)) {
      ScopedRange r("recompute", SpanCategory::Block);
      float* x = c.ws->stream.f32();
      c.backend->copyOnDevice(x, a.checkpoints[s].f32(), a.checkpoints[s].bytes());
      for (int l = first; l <= last; ++l)
        blockForward(c, l, a.blocks[l - first], x, l < last ? x : nullptr, true);
    } else if (s != segments - 1) {
      ScopedRange r("recompute", SpanCategory::Block);
      for (int l = first; l <= last; ++l)
        blockForward(c, l, a.blocks[l - first], in(l),
                     l < last ? a.blocks[l - first + 1].input.f32() : nullptr, true);
    }
    for (int l = last; l >= first; --l) blockBackward(l, a.blocks[l - first], in(l));
  }
}

}  // namespace ts::engine
