#include "trainscope/engine/params/ArenaLayout.h"

#include <stdexcept>
#include <utility>

#include "trainscope/kernels/Nf4.h"

namespace ts::engine {

namespace {
int64_t roundUp(int64_t n, int64_t a) {
  return a > 1 ? (n + a - 1) / a * a : n;
}
}  // namespace

ArenaLayout::ArenaLayout(std::vector<core::TensorSpec> tensors, const ArenaOptions& options) {
  // Groups: runs of consecutive tensors of the same block (the description stores block by
  // block, so each block is one run; the embeddings and the head are runs of block -1).
  for (auto& t : tensors) {
    if (groups_.empty() || groups_.back().block != t.block) {
      closeGroup(options.align);
      startGroup(t.block);
    }
    ParamInfo p;
    place(t, p, options);
    p.spec = std::move(t);
    params_.push_back(std::move(p));
    ++groups_.back().paramCount;
  }
  closeGroup(options.align);
  closeGroup(options.padTo);  // the buffers' lengths, padded in the last group
}

void ArenaLayout::startGroup(int block) {
  ParamGroup g;
  g.block = block;
  g.firstParam = params_.size();
  g.offset = size_;
  g.gradOffset = gradSize_;
  groups_.push_back(g);
}

void ArenaLayout::place(const core::TensorSpec& t, ParamInfo& p, const ArenaOptions& options) {
  p.name = t.name;
  p.shape = t.shape;
  p.numel = t.numel();
  p.decay = t.decay();
  if (options.nf4FrozenLinears && !t.trainable && t.block >= 0 &&
      t.role == core::TensorRole::LinearWeight) {
    const kernels::Nf4Layout q{p.numel};
    p.offset = -1;
    p.nf4 = {nf4_.packed, nf4_.codes, nf4_.scales};
    nf4_.packed += q.packedBytes();
    nf4_.codes += q.blocks();
    nf4_.scales += q.scaleCount();
  } else {
    if (t.trainable) size_ = roundUp(size_, options.tensorAlign);
    p.offset = size_;
    size_ += p.numel;
  }
  numParams_ += p.numel;
  if (t.trainable) {
    gradSize_ = roundUp(gradSize_, options.tensorAlign);
    p.gradOffset = gradSize_;
    gradSize_ += p.numel;
    trainable_ += p.numel;
  }
}

void ArenaLayout::closeGroup(int64_t align) {
  if (groups_.empty()) return;
  auto& g = groups_.back();
  size_ = roundUp(size_, align);
  gradSize_ = roundUp(gradSize_, align);
  g.numel = size_ - g.offset;
  g.gradNumel = gradSize_ - g.gradOffset;
}

const ParamInfo* ArenaLayout::find(const std::string& name) const {
  for (const auto& p : params_)
    if (p.name == name) return &p;
  return nullptr;
}

size_t ArenaLayout::groupOf(const ParamInfo& p) const {
  for (size_t g = 0; g < groups_.size(); ++g)
    if (p.offset >= groups_[g].offset && p.offset < groups_[g].offset + groups_[g].numel) return g;
  throw std::logic_error(p.name + " is in no group of the arena");
}

std::vector<size_t> ArenaLayout::outerGroups() const {
  std::vector<size_t> out;
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].block < 0) out.push_back(g);
  return out;
}

int ArenaLayout::groupOfBlock(int l) const {
  for (size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].block == l) return static_cast<int>(g);
  return -1;
}

}  // namespace ts::engine
