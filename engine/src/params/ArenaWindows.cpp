// ParamArena's fp32 windows over its 16-bit storage (ArenaOptions::gradWindow / valueWindow):
// which tensors a group's or a weight's window covers. The pages and their bytes are
// Fp32Window's.
#include <stdexcept>

#include "trainscope/engine/params/ParamArena.h"

namespace ts::engine {

bool ParamArena::f32Valid(const ParamInfo& p) const {
  if (!options_.valueWindow || p.offset < 0) return true;
  if (ownWindow(p)) return valueWindow_.weightCovers(p.offset, p.numel);
  return valueWindow_.level(layout_.groupOf(p)) != 0;
}

void ParamArena::openWeightValues(const ParamInfo& w) {
  if (!options_.valueWindow || !ownWindow(w)) return;
  valueWindow_.openWeight(w.offset, w.numel);
}

void ParamArena::closeWeightValues(const ParamInfo& w) {
  if (!options_.valueWindow || !ownWindow(w)) return;
  if (!valueWindow_.closeWeight(w.offset, w.numel, false))
    throw std::logic_error(w.name + ": values not open");
}

void ParamArena::storeWeightValues(const ParamInfo& w) {
  if (!options_.valueWindow || !ownWindow(w)) return;
  valueWindow_.store(w.offset, w.numel);
  closeWeightValues(w);
}

void ParamArena::openWeightGrads(const ParamInfo& w, float scale) {
  if (!options_.gradWindow || !ownWindow(w) || !w.trainable()) return;
  // Upcast even from zero 16-bit gradients: see openGrads.
  gradWindow_.openWeight(w.gradOffset, w.numel, scale);
}

void ParamArena::closeWeightGrads(const ParamInfo& w, bool store) {
  if (!options_.gradWindow || !ownWindow(w) || !w.trainable()) return;
  if (!gradWindow_.closeWeight(w.gradOffset, w.numel, store))
    throw std::logic_error(w.name + ": gradients not open");
}

void ParamArena::openBlockValues(int l) {
  if (!options_.valueWindow) return;
  const int g = groupOfBlock(l);
  if (g >= 0) openValues(size_t(g), false);
}

void ParamArena::closeBlockValues(int l) {
  if (!options_.valueWindow) return;
  const int g = groupOfBlock(l);
  if (g >= 0) closeValues(size_t(g));
}

void ParamArena::openValues(size_t g, bool full) {
  if (!options_.valueWindow || valueWindow_.level(g) >= (full ? 2 : 1)) return;
  const ParamGroup& pg = groups()[g];
  closeValues(g);
  // The linear weights have windows of their own (openWeightValues).
  int64_t elems = 0;
  for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params()[i];
    if (p.offset < 0 || ownWindow(p)) continue;
    valueWindow_.upcast(p.offset, p.numel);
    elems += p.numel;
  }
  valueWindow_.groupOpened(g, full ? 2 : 1, elems);
}

void ParamArena::closeValues(size_t g) {
  if (!options_.valueWindow || !valueWindow_.level(g)) return;
  const ParamGroup& pg = groups()[g];
  valueWindow_.closeGroup(g, pg.offset, pg.numel);
}

void ParamArena::storeValues(size_t g) {
  if (!options_.valueWindow || valueWindow_.level(g) != 2) return;
  const ParamGroup& pg = groups()[g];
  for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params()[i];
    if (p.offset >= 0 && !ownWindow(p)) valueWindow_.roundTrip(p.offset, p.numel);
  }
  closeValues(g);
}

void ParamArena::openGrads(size_t g, float scale) {
  if (!options_.gradWindow || gradWindow_.level(g)) return;
  const ParamGroup& pg = groups()[g];
  if (pg.gradNumel == 0) return;
  // Upcast even when the 16-bit gradients are all zero (after zeroGrad): writing the pages here
  // faults them in, which inside the threaded backward GEMMs cost a third of bf16's tokens/s on
  // gpt-d512 (measured: 0.53x fp32 instead of 0.80x). The linear weights have windows of their
  // own (openWeightGrads).
  int64_t elems = 0;
  for (size_t i = pg.firstParam; i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params()[i];
    if (!p.trainable() || ownWindow(p)) continue;
    gradWindow_.upcast(p.gradOffset, p.numel, scale);
    elems += p.numel;
  }
  gradWindow_.groupOpened(g, 1, elems);
}

void ParamArena::closeGrads(size_t g, bool store) {
  if (!options_.gradWindow || !gradWindow_.level(g)) return;
  const ParamGroup& pg = groups()[g];
  for (size_t i = pg.firstParam; store && i < pg.firstParam + pg.paramCount; ++i) {
    const ParamInfo& p = params()[i];
    if (p.trainable() && !ownWindow(p)) gradWindow_.store(p.gradOffset, p.numel);
  }
  // Whole pages go back; the partial ones at the edges (shared with the neighbouring groups)
  // are zeroed, not released: the range reads as zero until the next open rewrites it.
  gradWindow_.closeGroup(g, pg.gradOffset, pg.gradNumel);
}

}  // namespace ts::engine
