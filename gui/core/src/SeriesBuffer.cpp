#include "trainscope/gui/SeriesBuffer.h"

#include <algorithm>

namespace ts::gui {

SeriesBuffer::SeriesBuffer(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 16) & ~size_t{1}) {}

void SeriesBuffer::clear() {
  x_.clear();
  mean_.clear();
  min_.clear();
  max_.clear();
  stride_ = 1;
  pending_ = 0;
  appended_ = 0;
}

void SeriesBuffer::append(double x, double y) {
  ++appended_;
  last_ = y;
  const float fy = static_cast<float>(y);
  if (pending_ > 0 && pending_ < stride_) {
    // Still filling the last (merged) bucket.
    size_t i = x_.size() - 1;
    mean_[i] = static_cast<float>((mean_[i] * pending_ + y) / (pending_ + 1));
    min_[i] = std::min(min_[i], fy);
    max_[i] = std::max(max_[i], fy);
    x_[i] = x;  // a bucket is placed at its last x: the curve never runs ahead of the data
    ++pending_;
    return;
  }
  if (x_.size() == capacity_) compact();
  x_.push_back(x);
  mean_.push_back(fy);
  min_.push_back(fy);
  max_.push_back(fy);
  pending_ = 1;
}

void SeriesBuffer::compact() {
  const size_t n = x_.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const size_t a = 2 * i, b = 2 * i + 1;
    x_[i] = x_[b];
    mean_[i] = 0.5f * (mean_[a] + mean_[b]);
    min_[i] = std::min(min_[a], min_[b]);
    max_[i] = std::max(max_[a], max_[b]);
  }
  x_.resize(n);
  mean_.resize(n);
  min_.resize(n);
  max_.resize(n);
  stride_ *= 2;
  pending_ = stride_;  // the last bucket is full: the next sample opens a new one
}

size_t SeriesBuffer::bytes() const {
  return x_.capacity() * sizeof(double) +
         (mean_.capacity() + min_.capacity() + max_.capacity()) * sizeof(float);
}

}  // namespace ts::gui
