#pragma once
// The kernel timeline widget: paints what TimelineModel returns for the visible range (lanes
// with labels, blocks coloured by category, step boundaries, a legend). Mouse wheel zooms around
// the cursor, drag pans, shift-drag or right-drag selects a time range, a click selects the span
// under the cursor. Over the lane labels the wheel scrolls the lanes.
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <QColor>
#include <QWidget>

#include "trainscope/gui/TimelineModel.h"

class QScrollBar;

namespace ts::gui {

QColor timelineCategoryColor(profiler::SpanCategory c);

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(TimelineModel* model, QWidget* parent = nullptr);
  TimelineModel* model() const { return model_; }

  int64_t visibleStart() const { return t0_; }
  int64_t visibleEnd() const { return t1_; }
  void setVisibleRange(int64_t t0, int64_t t1);
  void zoomToFit();
  // factor > 1 zooms in, keeping the time under x (widget coordinates) in place.
  void zoomAt(double factor, double x);

  std::optional<std::pair<int64_t, int64_t>> selection() const { return selection_; }
  void setSelection(int64_t t0, int64_t t1);  // emits rangeSelected
  void clearSelection();
  int32_t selectedSpan() const { return selectedSpan_; }
  // Selects (and with reveal, scrolls/zooms to show) a span; -1 clears. Emits spanClicked.
  void selectSpan(int32_t id, bool reveal = false);

  // Geometry, for tests: the plot area, time <-> x, and where a span is drawn.
  QRect plotRect() const;
  double xForTime(int64_t t) const;
  int64_t timeForX(double x) const;
  std::optional<QRect> spanRect(int32_t id) const;
  int32_t spanAtPoint(const QPoint& p) const;
  // Blocks painted by the last frame (benchmark).
  int lastFrameBlocks() const { return lastFrameBlocks_; }
  void setStatusText(const QString& text);  // shown when there is nothing to draw

  QSize sizeHint() const override { return {900, 360}; }
  QSize minimumSizeHint() const override { return {320, 160}; }

 signals:
  void visibleRangeChanged(int64_t t0, int64_t t1);
  void rangeSelected(int64_t t0, int64_t t1);
  void selectionCleared();
  void spanClicked(int32_t id);  // -1 when the click hit nothing

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void mouseDoubleClickEvent(QMouseEvent*) override;
  void keyPressEvent(QKeyEvent*) override;

 private:
  void relayout();
  void clampRange(int64_t& t0, int64_t& t1) const;
  int trackAtY(int y) const;  // -1 outside tracks
  int trackTop(int track) const;
  void paintRuler(QPainter& p, const QRect& plot, double nsPerPx);
  void paintLegend(QPainter& p);
  void paintEmpty(QPainter& p, const QRect& plot);
  void paintSteps(QPainter& p, const QRect& plot, const TimelineData& d);
  void paintTracks(QPainter& p, const QRect& plot, const TimelineData& d, double nsPerPx);
  void paintBlock(QPainter& p, const QRect& plot, const TimelineData& d, const TimelineBlock& b,
                  int top, int textY);
  void paintSelectedSpan(QPainter& p, const TimelineData& d);
  void paintSelection(QPainter& p, const QRect& plot);
  void paintSelectionLabel(QPainter& p, const QRect& plot);
  void paintLaneLabels(QPainter& p, const QRect& plot, const TimelineData& d);
  void paintLaneSeparators(QPainter& p, const QRect& plot);

  TimelineModel* model_;
  QScrollBar* vbar_;
  int64_t t0_ = 0, t1_ = 1000;
  std::optional<std::pair<int64_t, int64_t>> selection_;
  int32_t selectedSpan_ = -1;
  std::vector<int> trackY_;  // content y of each track
  std::vector<int> laneY_;   // content y of each lane, plus the end
  int contentHeight_ = 0;
  QString status_;

  enum class Drag { None, Pan, Select };
  Drag drag_ = Drag::None;
  QPoint pressPos_;
  int64_t pressT0_ = 0, pressT1_ = 0;
  int pressScroll_ = 0;
  bool moved_ = false;

  std::vector<TimelineBlock> blocks_;  // scratch, reused every frame
  int lastFrameBlocks_ = 0;
};

}  // namespace ts::gui
