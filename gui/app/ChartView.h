#pragma once
// The one place that knows about Qt Charts (deprecated in favour of Qt Graphs from Qt 6.10):
// a titled x/y line chart whose series are replaced whole, at most once per redraw.
#include <utility>
#include <vector>

#include <QColor>
#include <QPoint>
#include <QPointF>
#include <QString>
#include <QVector>
#include <QWidget>

class QChart;
class QChartView;
class QValueAxis;
class QXYSeries;
class QLabel;

namespace ts::gui {

class ChartView : public QWidget {
  Q_OBJECT
 public:
  explicit ChartView(const QString& title, QWidget* parent = nullptr);

  enum class Style { Line, FaintLine, Dashed, Points };
  int addSeries(const QString& name, const QColor& color, Style style = Style::Line);
  // Replaces a series' points (one replace() call) and rescales the axes.
  void setPoints(int series, const QVector<QPointF>& points);
  void setSeriesVisible(int series, bool visible);
  void setAxisTitles(const QString& x, const QString& y);
  void setYLabelFormat(const QString& fmt);  // printf-style, e.g. "%.2g"
  // Fixed x range (e.g. 0..total steps); otherwise the data's range.
  void setXRange(double x0, double x1);
  void setYFloor(double y0) {
    yFloor_ = y0;
    haveFloor_ = true;
  }
  void setLegendVisible(bool v);
  // Pixels available for the plot area: the reduction target for minMaxEnvelope.
  int plotPixels() const;
  int pointCount(int series) const;
  QString title() const;
  // The data x under a widget-local point of the plot (for click handling and tests).
  double xAt(const QPoint& viewPos) const;
  QWidget* plotWidget() const;  // the widget that receives the mouse
  // For screenshot checks: the plot area, a series' colour (alpha < 255 for faint ones), its
  // reduced points as drawn, and where a data point lands, all in `ancestor`'s coordinates.
  QRect plotRectIn(const QWidget* ancestor) const;
  QColor seriesColor(int series) const;
  bool seriesVisible(int series) const;
  int seriesCount() const { return static_cast<int>(series_.size()); }
  QVector<QPointF> drawnPoints(int series) const;
  QPoint positionIn(const QWidget* ancestor, QPointF value, int series) const;
  // The axes as drawn: the y range and tick values, and the x tick values (all multiples of
  // 1, 2 or 5 × 10^k).
  std::pair<double, double> yRange() const;
  QVector<double> yTicks() const;
  QVector<double> xTicks() const;

 signals:
  // A left click inside the plot, at data coordinate x (e.g. a step).
  void clicked(double x);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void rescale();
  void setXAxisRange(double x0, double x1);

  QChart* chart_;
  QChartView* view_;
  QValueAxis* ax_;
  QValueAxis* ay_;
  std::vector<QXYSeries*> series_;
  std::vector<QVector<QPointF>> data_;  // kept for ranges only (points are the reduced ones)
  bool fixedX_ = false;
  double x0_ = 0, x1_ = 1;
  bool haveFloor_ = false;
  double yFloor_ = 0;
};

}  // namespace ts::gui
