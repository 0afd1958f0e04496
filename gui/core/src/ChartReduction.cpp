#include "trainscope/gui/ChartReduction.h"

#include <algorithm>
#include <cmath>

namespace ts::gui {
namespace {

// Generic envelope over an indexable source: xAt(i), loAt(i), hiAt(i).
template <class X, class Lo, class Hi>
QVector<QPointF> envelope(size_t n, X xAt, Lo loAt, Hi hiAt, double x0, double x1, int pixels) {
  QVector<QPointF> out;
  if (n == 0 || pixels <= 0 || !(x1 >= x0)) return out;
  // First index with x >= x0 (x is non-decreasing).
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (xAt(mid) < x0)
      lo = mid + 1;
    else
      hi = mid;
  }
  const size_t begin = lo;
  if (begin >= n) return out;
  const double width = std::max(x1 - x0, 1e-300);
  out.reserve(std::min<size_t>(n - begin, static_cast<size_t>(pixels) * 2 + 2));
  size_t i = begin;
  while (i < n && xAt(i) <= x1) {
    const int col = std::min(pixels - 1, static_cast<int>((xAt(i) - x0) / width * pixels));
    // Gather the whole column.
    size_t j = i;
    size_t iMin = i, iMax = i;
    double vMin = loAt(i), vMax = hiAt(i);
    while (j + 1 < n && xAt(j + 1) <= x1 &&
           std::min(pixels - 1, static_cast<int>((xAt(j + 1) - x0) / width * pixels)) == col) {
      ++j;
      if (loAt(j) < vMin) {
        vMin = loAt(j);
        iMin = j;
      }
      if (hiAt(j) > vMax) {
        vMax = hiAt(j);
        iMax = j;
      }
    }
    if (i == j && loAt(i) == hiAt(i)) {
      out.append(QPointF(xAt(i), loAt(i)));
    } else if (iMin == iMax) {
      // One merged sample holding a range: draw it as a vertical stroke.
      out.append(QPointF(xAt(iMin), vMin));
      out.append(QPointF(xAt(iMin), vMax));
    } else if (iMin < iMax) {
      out.append(QPointF(xAt(iMin), vMin));
      out.append(QPointF(xAt(iMax), vMax));
    } else {
      out.append(QPointF(xAt(iMax), vMax));
      out.append(QPointF(xAt(iMin), vMin));
    }
    i = j + 1;
  }
  return out;
}

}  // namespace

QVector<QPointF> minMaxEnvelope(const SeriesBuffer& s, double x0, double x1, int pixels) {
  return envelope(
      s.size(), [&](size_t i) { return s.x(i); }, [&](size_t i) { return s.min(i); },
      [&](size_t i) { return s.max(i); }, x0, x1, pixels);
}

QVector<QPointF> minMaxEnvelope(const std::vector<double>& x, const std::vector<double>& y,
                                double x0, double x1, int pixels) {
  const size_t n = std::min(x.size(), y.size());
  return envelope(
      n, [&](size_t i) { return x[i]; }, [&](size_t i) { return y[i]; },
      [&](size_t i) { return y[i]; }, x0, x1, pixels);
}

std::vector<double> debiasedEma(const std::vector<double>& y, double weight) {
  DebiasedEma ema(weight);
  std::vector<double> out;
  out.reserve(y.size());
  for (double v : y) out.push_back(ema.push(v));
  return out;
}

double DebiasedEma::push(double y) {
  if (!std::isfinite(y)) return wPow_ < 1.0 ? acc_ / (1.0 - wPow_) : y;  // skip non-finite
  acc_ = w_ * acc_ + (1.0 - w_) * y;
  wPow_ *= w_;
  return acc_ / (1.0 - wPow_);
}

void DebiasedEma::reset(double weight) {
  w_ = std::clamp(weight, 0.0, 0.999999);
  acc_ = 0.0;
  wPow_ = 1.0;
}

}  // namespace ts::gui
