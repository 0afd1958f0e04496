#pragma once
// A bounded time series for live charts. Up to `capacity` samples are kept at full
// resolution; past that, neighbouring samples are merged pairwise (keeping min, max and mean)
// so memory stays bounded and no spike is ever lost, whatever the run length.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ts::gui {

class SeriesBuffer {
 public:
  explicit SeriesBuffer(size_t capacity = size_t{1} << 21);

  void append(double x, double y);
  void clear();

  size_t size() const { return x_.size(); }
  bool empty() const { return x_.empty(); }
  double x(size_t i) const { return x_[i]; }
  double mean(size_t i) const { return mean_[i]; }
  double min(size_t i) const { return min_[i]; }
  double max(size_t i) const { return max_[i]; }
  double lastX() const { return x_.back(); }
  double lastY() const { return last_; }
  // Number of raw samples each stored sample stands for (1 until the first compaction).
  size_t stride() const { return stride_; }
  uint64_t appended() const { return appended_; }
  size_t capacity() const { return capacity_; }
  size_t bytes() const;

 private:
  void compact();

  size_t capacity_;
  size_t stride_ = 1;
  size_t pending_ = 0;  // raw samples merged into the last stored sample so far
  uint64_t appended_ = 0;
  double last_ = 0;
  std::vector<double> x_;
  std::vector<float> mean_, min_, max_;
};

}  // namespace ts::gui
