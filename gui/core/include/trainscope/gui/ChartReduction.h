#pragma once
// Chart data reduction: a curve of any length becomes at most ~2 points per pixel column,
// keeping each column's minimum and maximum (in the order they occur) so spikes stay visible.
// Plus the debiased exponential moving average used for loss smoothing.
#include <vector>

#include <QPointF>
#include <QVector>

#include "trainscope/gui/SeriesBuffer.h"

namespace ts::gui {

// Points of `s` with x in [x0, x1], reduced to `pixels` columns. Columns with one sample give
// one point; the first and last samples in range are always kept.
QVector<QPointF> minMaxEnvelope(const SeriesBuffer& s, double x0, double x1, int pixels);
// Same over plain arrays (used by tests and the database re-attach path).
QVector<QPointF> minMaxEnvelope(const std::vector<double>& x, const std::vector<double>& y,
                                double x0, double x1, int pixels);

// Debiased EMA (as TensorBoard / Adam bias correction): s_t = w s_{t-1} + (1-w) y_t,
// reported as s_t / (1 - w^t). weight in [0, 1); 0 = no smoothing.
std::vector<double> debiasedEma(const std::vector<double>& y, double weight);

// Streaming form of debiasedEma, for appending live samples without a full recompute.
class DebiasedEma {
 public:
  explicit DebiasedEma(double weight = 0.0) : w_(weight) {}
  double push(double y);
  void reset(double weight);
  double weight() const { return w_; }

 private:
  double w_;
  double acc_ = 0.0;
  double wPow_ = 1.0;
};

}  // namespace ts::gui
