#include "ChartView.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <QChart>
#include <QChartView>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QMouseEvent>
#include <QScatterSeries>
#include <QVBoxLayout>
#include <QValueAxis>

namespace ts::gui {

ChartView::ChartView(const QString& title, QWidget* parent) : QWidget(parent) {
  chart_ = new QChart;
  chart_->setTitle(title);
  QFont tf = chart_->titleFont();
  tf.setPointSizeF(10.5);
  tf.setBold(true);
  chart_->setTitleFont(tf);
  chart_->setTitleBrush(QColor("#323f4b"));
  chart_->setBackgroundRoundness(6);
  chart_->setMargins(QMargins(4, 2, 8, 2));
  chart_->legend()->setAlignment(Qt::AlignTop);
  chart_->legend()->setFont(QFont(font().family(), 8));
  chart_->setAnimationOptions(QChart::NoAnimation);
  ax_ = new QValueAxis;
  ay_ = new QValueAxis;
  for (QValueAxis* a : {ax_, ay_}) {
    a->setLabelsFont(QFont(font().family(), 8));
    a->setGridLineColor(QColor("#eef0f3"));
    a->setLinePenColor(QColor("#cbd2d9"));
    a->setLabelsColor(QColor("#52606d"));
    QFont f = a->titleFont();
    f.setPointSizeF(8.5);
    f.setBold(false);
    a->setTitleFont(f);
    a->setTitleBrush(QColor("#52606d"));
  }
  ax_->setLabelFormat("%.0f");
  ay_->setLabelFormat("%.3g");
  ax_->setTickCount(6);
  ay_->setTickCount(5);
  chart_->addAxis(ax_, Qt::AlignBottom);
  chart_->addAxis(ay_, Qt::AlignLeft);
  view_ = new QChartView(chart_, this);
  view_->setRenderHint(QPainter::Antialiasing);
  view_->setMinimumHeight(160);
  view_->viewport()->installEventFilter(this);
  auto* lay = new QVBoxLayout(this);
  lay->setContentsMargins(0, 0, 0, 0);
  lay->addWidget(view_);
}

double ChartView::xAt(const QPoint& viewPos) const {
  return chart_->mapToValue(view_->mapToScene(viewPos)).x();
}

QWidget* ChartView::plotWidget() const {
  return view_->viewport();
}

QRect ChartView::plotRectIn(const QWidget* ancestor) const {
  const QRect r = view_->mapFromScene(chart_->mapToScene(chart_->plotArea())).boundingRect();
  return QRect(view_->viewport()->mapTo(ancestor, r.topLeft()), r.size());
}

QColor ChartView::seriesColor(int series) const {
  if (series < 0 || series >= static_cast<int>(series_.size())) return {};
  if (auto* ls = qobject_cast<QLineSeries*>(series_[series]);
      ls && !qobject_cast<QScatterSeries*>(ls))
    return ls->pen().color();
  return series_[series]->color();
}

bool ChartView::seriesVisible(int series) const {
  return series >= 0 && series < static_cast<int>(series_.size()) && series_[series]->isVisible();
}

QVector<QPointF> ChartView::drawnPoints(int series) const {
  if (series < 0 || series >= static_cast<int>(series_.size())) return {};
  return series_[series]->points();
}

QPoint ChartView::positionIn(const QWidget* ancestor, QPointF value, int series) const {
  if (series < 0 || series >= static_cast<int>(series_.size())) return {};
  const QPointF scene = chart_->mapToScene(chart_->mapToPosition(value, series_[series]));
  return view_->viewport()->mapTo(ancestor, view_->mapFromScene(scene));
}

bool ChartView::eventFilter(QObject* watched, QEvent* event) {
  if (watched == view_->viewport() && event->type() == QEvent::MouseButtonRelease) {
    auto* me = static_cast<QMouseEvent*>(event);
    const QPointF scene = view_->mapToScene(me->position().toPoint());
    if (me->button() == Qt::LeftButton && chart_->plotArea().contains(scene))
      emit clicked(chart_->mapToValue(scene).x());
  }
  return QWidget::eventFilter(watched, event);
}

int ChartView::addSeries(const QString& name, const QColor& color, Style style) {
  QXYSeries* s = nullptr;
  if (style == Style::Points) {
    auto* sc = new QScatterSeries;
    sc->setMarkerSize(7);
    sc->setColor(color);
    sc->setBorderColor(color.darker(130));
    s = sc;
  } else {
    auto* ls = new QLineSeries;
    QPen pen(color);
    pen.setWidthF(style == Style::FaintLine ? 1.0 : 2.0);
    if (style == Style::FaintLine) {
      QColor c = color;
      c.setAlpha(70);
      pen.setColor(c);
    }
    if (style == Style::Dashed) pen.setStyle(Qt::DashLine);
    ls->setPen(pen);
    s = ls;
  }
  s->setName(name);
  s->setUseOpenGL(false);
  chart_->addSeries(s);
  s->attachAxis(ax_);
  s->attachAxis(ay_);
  series_.push_back(s);
  data_.emplace_back();
  if (style == Style::FaintLine) {
    // The faint raw curve explains itself next to its smoothed twin; keep the legend short.
    for (auto* m : chart_->legend()->markers(s)) m->setVisible(false);
  }
  return static_cast<int>(series_.size()) - 1;
}

void ChartView::setPoints(int series, const QVector<QPointF>& points) {
  if (series < 0 || series >= static_cast<int>(series_.size())) return;
  series_[series]->replace(points);
  data_[series] = points;
  rescale();
}

void ChartView::setSeriesVisible(int series, bool visible) {
  if (series < 0 || series >= static_cast<int>(series_.size())) return;
  series_[series]->setVisible(visible);
  rescale();
}

void ChartView::setAxisTitles(const QString& x, const QString& y) {
  ax_->setTitleText(x);
  ay_->setTitleText(y);
}

void ChartView::setYLabelFormat(const QString& fmt) {
  ay_->setLabelFormat(fmt);
}

void ChartView::setXRange(double x0, double x1) {
  fixedX_ = true;
  x0_ = x0;
  x1_ = std::max(x1, x0 + 1e-9);
  setXAxisRange(x0_, x1_);
}

namespace {
// 1, 2 or 5 × 10^k at or above `raw`: tick steps a reader can add up (not 5999.8).
double niceStep(double raw) {
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  return 10 * p;
}
}  // namespace

// Ticks at multiples of a nice step from 0 (steps 0, 5000, 10000 … rather than the axis split
// into equal fifths: 17999, 23999).
void ChartView::setXAxisRange(double x0, double x1) {
  const double step = niceStep((x1 - x0) / 6.0);  // 4 to 7 ticks
  // Each call lays the axis out at once: the range and the interval must never meet at their
  // old/new extremes (a range grown from 0–1 to 0–30000 under the old 0.2 interval is 150,000
  // tick items, which froze a re-attached dashboard). A coarser step goes first, a finer last.
  const bool coarser = ax_->tickType() == QValueAxis::TicksDynamic && step >= ax_->tickInterval();
  if (coarser) ax_->setTickInterval(step);
  ax_->setRange(x0, x1);
  ax_->setTickType(QValueAxis::TicksDynamic);
  ax_->setTickAnchor(0.0);
  if (!coarser) ax_->setTickInterval(step);
  ax_->setLabelFormat(step >= 1 ? "%.0f" : "%.3g");
}

std::pair<double, double> ChartView::yRange() const {
  return {ay_->min(), ay_->max()};
}

QVector<double> ChartView::yTicks() const {
  QVector<double> out;
  const int n = ay_->tickCount();
  for (int i = 0; i < n; ++i) out << ay_->min() + (ay_->max() - ay_->min()) * i / (n - 1);
  return out;
}

QVector<double> ChartView::xTicks() const {
  QVector<double> out;
  if (ax_->tickType() != QValueAxis::TicksDynamic) return out;
  const double step = ax_->tickInterval(), a = ax_->tickAnchor();
  if (!(step > 0)) return out;
  for (double t = a + std::ceil((ax_->min() - a) / step) * step; t <= ax_->max() + step * 1e-9;
       t += step)
    out << t;
  return out;
}

void ChartView::setLegendVisible(bool v) {
  chart_->legend()->setVisible(v);
}

int ChartView::plotPixels() const {
  const int w = static_cast<int>(chart_->plotArea().width());
  return w > 10 ? w : std::max(100, width() - 80);
}

int ChartView::pointCount(int series) const {
  if (series < 0 || series >= static_cast<int>(series_.size())) return 0;
  return static_cast<int>(series_[series]->count());
}

QString ChartView::title() const {
  return chart_->title();
}

void ChartView::rescale() {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  for (size_t i = 0; i < series_.size(); ++i) {
    if (!series_[i]->isVisible()) continue;
    for (const QPointF& p : data_[i]) {
      if (!std::isfinite(p.y())) continue;
      xmin = std::min(xmin, p.x());
      xmax = std::max(xmax, p.x());
      ymin = std::min(ymin, p.y());
      ymax = std::max(ymax, p.y());
    }
  }
  if (!std::isfinite(xmin)) return;
  if (!fixedX_) setXAxisRange(xmin, xmax > xmin ? xmax : xmin + 1);
  // Non-negative data (losses, rates, bytes) never gets a negative axis from the padding.
  const double floor = haveFloor_ ? yFloor_ : (ymin >= 0 ? 0.0 : -HUGE_VAL);
  if (haveFloor_) ymin = std::min(ymin, yFloor_);
  double pad = (ymax - ymin) * 0.06;
  if (pad <= 0) pad = std::max(std::abs(ymax) * 0.1, 1e-12);
  ay_->setRange(ymin >= floor ? std::max(floor, ymin - pad) : ymin - pad, ymax + pad);
  // Round labels (20000, 40000 ... not 20002, 40005); the widened range keeps a floor of 0.
  ay_->applyNiceNumbers();
}

}  // namespace ts::gui
