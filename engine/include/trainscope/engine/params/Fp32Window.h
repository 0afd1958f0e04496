#pragma once
// fp32 pages over 16-bit storage that hold memory only while open (ArenaOptions::gradWindow /
// valueWindow), one per buffer (the values', the gradients'): it commits and upcasts ranges,
// rounds them back into the 16-bit storage, gives their pages back, and keeps what is open (per
// group, and the weights' own windows) with the bytes that holds. ParamArena decides which
// tensors a window covers; ranges here are in elements of both buffers.
#include <cstdint>
#include <utility>
#include <vector>

#include "trainscope/core/plan/MemoryTable.h"
#include "trainscope/engine/params/MemoryTracker.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {

using kernels::DType;

class Fp32Window {
 public:
  Fp32Window() = default;  // no window
  // f32 and h16: the buffers' storage (stable when the owning tensors move). Counted bytes go
  // to `category` as groups and weights open.
  Fp32Window(kernels::Backend* backend, DType working, float* f32, uint16_t* h16, size_t groups,
             MemoryTracker* tracker, core::MemoryCategory category);

  // Commits fp32 [off, off + n) and upcasts the 16-bit values into it, times `scale`.
  void upcast(int64_t off, int64_t n, float scale = 1.f);
  // Rounds fp32 [off, off + n) into the 16-bit storage.
  void store(int64_t off, int64_t n);
  // store, then upcast back: the fp32 copy holds exactly the stored values.
  void roundTrip(int64_t off, int64_t n);
  // Rounds n fp32 values at `src` (outside the buffer) into the 16-bit storage at off.
  void storeFrom(const float* src, int64_t off, int64_t n);
  // Upcasts the 16-bit values at off into `dst` (outside the buffer).
  void upcastInto(int64_t off, int64_t n, float* dst) const;
  // Gives back the pages of fp32 [off, off + n).
  void discard(int64_t off, int64_t n);

  // Group g: 0 closed, else the level it was opened at (values: 1 for compute, 2 whole).
  char level(size_t g) const { return open_.at(g); }
  void groupOpened(size_t g, char level, int64_t elems);  // counts elems' fp32 bytes
  // Gives back the group's range [off, off + n) and uncounts its bytes.
  void closeGroup(size_t g, int64_t off, int64_t n);

  // A weight's own window: upcast and counted; closing rounds it into the 16-bit storage when
  // `store`, gives back its whole pages and uncounts it (false, doing nothing, when that window
  // is not open).
  void openWeight(int64_t off, int64_t n, float scale = 1.f);
  bool closeWeight(int64_t off, int64_t n, bool store);
  bool weightCovers(int64_t off, int64_t n) const;  // inside an open weight window

 private:
  // Gives back the whole pages inside [off, off + n) only: the partial ones at the edges belong
  // to neighbouring tensors that may be open (they are released with their group).
  void discardInner(int64_t off, int64_t n);
  void toF32(const uint16_t* h, float* f, int64_t n) const;
  void fromF32(const float* f, uint16_t* h, int64_t n) const;

  kernels::Backend* backend_ = nullptr;
  DType working_ = DType::F32;
  float* f32_ = nullptr;
  uint16_t* h16_ = nullptr;
  std::vector<char> open_;                                // per group: see level()
  std::vector<int64_t> openElems_;                        // per group: the fp32 elements it holds
  std::vector<std::pair<int64_t, int64_t>> openWeights_;  // (offset, elements)
  TrackedBytes tracked_;                                  // the resident bytes
};

}  // namespace ts::engine
