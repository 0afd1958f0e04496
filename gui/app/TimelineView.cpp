#include "TimelineView.h"

#include <algorithm>
#include <cmath>

#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QScrollBar>
#include <QWheelEvent>

namespace ts::gui {

namespace {
constexpr int kLabelWidth = 176;
constexpr int kRulerHeight = 28;
constexpr int kLegendHeight = 26;
constexpr int kRowHeight = 18;
constexpr int kLaneGap = 7;
constexpr int kMinLabelBlock = 44;  // px: blocks at least this wide get their name written

QColor mix(const QColor& a, const QColor& b, double t) {
  return QColor::fromRgbF(static_cast<float>(a.redF() * (1 - t) + b.redF() * t),
                          static_cast<float>(a.greenF() * (1 - t) + b.greenF() * t),
                          static_cast<float>(a.blueF() * (1 - t) + b.blueF() * t));
}

// 1, 2, 5 x 10^k ns: the smallest tick step at least minNs.
int64_t niceStep(double minNs) {
  double p = 1;
  while (p * 10 <= minNs) p *= 10;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= minNs) return std::max<int64_t>(1, static_cast<int64_t>(m * p));
  return static_cast<int64_t>(10 * p);
}
}  // namespace

QColor timelineCategoryColor(profiler::SpanCategory c) {
  // Indexed by SpanCategory: gemm, attention, norm, elementwise, optimizer, communication,
  // memcpy, io, data, block, step, other. Built once: parsing colour names per block is slow.
  static const QColor colors[] = {
      QColor(0x25, 0x63, 0xeb), QColor(0x8b, 0x5c, 0xf6), QColor(0x10, 0xb9, 0x81),
      QColor(0xf5, 0x9e, 0x0b), QColor(0xec, 0x48, 0x99), QColor(0xdc, 0x26, 0x26),
      QColor(0x0d, 0x94, 0x88), QColor(0xa1, 0x62, 0x07), QColor(0x65, 0xa3, 0x0d),
      QColor(0xa5, 0xb4, 0xc8), QColor(0xcb, 0xd2, 0xd9), QColor(0x7b, 0x87, 0x94)};
  const auto i = static_cast<size_t>(c);
  return i < std::size(colors) ? colors[i] : colors[std::size(colors) - 1];
}

TimelineView::TimelineView(TimelineModel* model, QWidget* parent)
    : QWidget(parent), model_(model), vbar_(new QScrollBar(Qt::Vertical, this)) {
  setMouseTracking(false);
  setFocusPolicy(Qt::StrongFocus);
  setAttribute(Qt::WA_OpaquePaintEvent);
  setMinimumHeight(160);
  connect(vbar_, &QScrollBar::valueChanged, this, qOverload<>(&QWidget::update));
  connect(model_, &TimelineModel::changed, this, [this] {
    selectedSpan_ = -1;
    selection_.reset();
    relayout();
    zoomToFit();
  });
  relayout();
}

void TimelineView::setStatusText(const QString& text) {
  status_ = text;
  update();
}

QRect TimelineView::plotRect() const {
  const int right = width() - (vbar_->isVisible() ? vbar_->width() : 0);
  return QRect(QPoint(kLabelWidth, kRulerHeight),
               QPoint(std::max(kLabelWidth + 10, right) - 1, height() - kLegendHeight - 1));
}

void TimelineView::relayout() {
  trackY_.clear();
  laneY_.clear();
  int y = 4;
  if (const TimelineData* d = model_->data()) {
    trackY_.resize(static_cast<size_t>(d->trackCount()));
    for (const auto& lane : d->lanes()) {
      laneY_.push_back(y);
      for (int k = 0; k < lane.depths; ++k) {
        trackY_[static_cast<size_t>(lane.firstTrack + k)] = y;
        y += kRowHeight;
      }
      y += kLaneGap;
    }
  }
  laneY_.push_back(y);
  contentHeight_ = y;
  const int visible = height() - kRulerHeight - kLegendHeight;
  const bool need = contentHeight_ > visible;
  vbar_->setVisible(need);
  vbar_->setRange(0, need ? contentHeight_ - visible : 0);
  vbar_->setPageStep(std::max(1, visible));
  vbar_->setSingleStep(kRowHeight);
  vbar_->setGeometry(width() - vbar_->sizeHint().width(), kRulerHeight, vbar_->sizeHint().width(),
                     std::max(0, visible));
  update();
}

void TimelineView::resizeEvent(QResizeEvent*) {
  relayout();
}

void TimelineView::clampRange(int64_t& t0, int64_t& t1) const {
  const TimelineData* d = model_->data();
  const int64_t extent = d ? std::max<int64_t>(1000, d->end() - d->begin()) : 1000;
  const int64_t minRange = std::max<int64_t>(100, plotRect().width() / 10);
  int64_t range = std::clamp<int64_t>(t1 - t0, minRange, extent * 2);
  // Keep some of the data in view: pan at most half a view past either end.
  const int64_t lo = (d ? d->begin() : 0) - range / 2;
  const int64_t hi = (d ? d->end() : 1000) + range / 2;
  t0 = std::clamp(t0, lo, std::max(lo, hi - range));
  t1 = t0 + range;
}

void TimelineView::setVisibleRange(int64_t t0, int64_t t1) {
  if (t1 < t0) std::swap(t0, t1);
  clampRange(t0, t1);
  if (t0 == t0_ && t1 == t1_) return;
  t0_ = t0;
  t1_ = t1;
  update();
  emit visibleRangeChanged(t0_, t1_);
}

void TimelineView::zoomToFit() {
  const TimelineData* d = model_->data();
  if (!d || d->spanCount() == 0) {
    t0_ = 0;
    t1_ = 1000;
    update();
    return;
  }
  const int64_t pad = std::max<int64_t>(1, (d->end() - d->begin()) / 100);
  setVisibleRange(d->begin() - pad, d->end() + pad);
}

void TimelineView::zoomAt(double factor, double x) {
  if (factor <= 0) return;
  const QRect plot = plotRect();
  const double frac = std::clamp((x - plot.left()) / std::max(1, plot.width()), 0.0, 1.0);
  const double range = static_cast<double>(t1_ - t0_);
  const double newRange = range / factor;
  const double anchor = static_cast<double>(t0_) + frac * range;
  const auto n0 = static_cast<int64_t>(std::llround(anchor - frac * newRange));
  setVisibleRange(n0, n0 + static_cast<int64_t>(std::llround(newRange)));
}

double TimelineView::xForTime(int64_t t) const {
  const QRect plot = plotRect();
  return plot.left() + static_cast<double>(t - t0_) * plot.width() /
                           static_cast<double>(std::max<int64_t>(1, t1_ - t0_));
}

int64_t TimelineView::timeForX(double x) const {
  const QRect plot = plotRect();
  return t0_ + static_cast<int64_t>(std::llround(
                   (x - plot.left()) * static_cast<double>(t1_ - t0_) / std::max(1, plot.width())));
}

int TimelineView::trackTop(int track) const {
  return kRulerHeight + trackY_[static_cast<size_t>(track)] - vbar_->value();
}

int TimelineView::trackAtY(int y) const {
  for (size_t k = 0; k < trackY_.size(); ++k) {
    const int top = trackTop(static_cast<int>(k));
    if (y >= top && y < top + kRowHeight) return static_cast<int>(k);
  }
  return -1;
}

std::optional<QRect> TimelineView::spanRect(int32_t id) const {
  const TimelineData* d = model_->data();
  if (!d || id < 0 || static_cast<size_t>(id) >= d->spanCount()) return std::nullopt;
  const auto& s = d->span(id);
  const double x0 = xForTime(s.start), x1 = xForTime(s.end);
  const int left = static_cast<int>(std::floor(x0));
  const int w = std::max(1, static_cast<int>(std::ceil(x1)) - left);
  return QRect(left, trackTop(s.track) + 1, w, kRowHeight - 2);
}

int32_t TimelineView::spanAtPoint(const QPoint& p) const {
  const TimelineData* d = model_->data();
  if (!d || !plotRect().contains(p)) return -1;
  const int track = trackAtY(p.y());
  if (track < 0) return -1;
  const double nsPerPx = static_cast<double>(t1_ - t0_) / std::max(1, plotRect().width());
  return d->spanAt(track, timeForX(p.x() + 0.5), static_cast<int64_t>(3 * nsPerPx));
}

void TimelineView::setSelection(int64_t t0, int64_t t1) {
  if (t1 < t0) std::swap(t0, t1);
  selection_ = {t0, t1};
  update();
  emit rangeSelected(t0, t1);
}

void TimelineView::clearSelection() {
  if (!selection_) return;
  selection_.reset();
  update();
  emit selectionCleared();
}

void TimelineView::selectSpan(int32_t id, bool reveal) {
  const TimelineData* d = model_->data();
  if (!d || id < 0 || static_cast<size_t>(id) >= d->spanCount()) id = -1;
  selectedSpan_ = id;
  if (id >= 0 && reveal) {
    const auto& s = d->span(id);
    if (s.end < t0_ || s.start > t1_ || s.duration() > (t1_ - t0_)) {
      const int64_t range = std::max<int64_t>(s.duration() * 3, t1_ - t0_);
      const int64_t mid = s.start + s.duration() / 2;
      setVisibleRange(mid - range / 2, mid + range / 2);
    }
    const int top = trackY_[static_cast<size_t>(s.track)];
    const int visible = height() - kRulerHeight - kLegendHeight;
    if (top < vbar_->value() || top + kRowHeight > vbar_->value() + visible)
      vbar_->setValue(top - visible / 2);
  }
  update();
  emit spanClicked(id);
}

// ---------------------------------------------------------------------------------- paint

void TimelineView::paintRuler(QPainter& p, const QRect& plot, double nsPerPx) {
  p.fillRect(QRect(0, 0, width(), kRulerHeight), QColor("#f5f7fa"));
  p.setPen(QColor("#e4e7eb"));
  p.drawLine(0, kRulerHeight - 1, width(), kRulerHeight - 1);
  const QFontMetrics fm = p.fontMetrics();
  const int64_t step = niceStep(nsPerPx * (fm.horizontalAdvance("000.00 ms") + 24));
  int64_t t = (t0_ / step) * step;
  if (t < t0_) t += step;
  for (; t <= t1_; t += step) {
    const int x = static_cast<int>(std::lround(xForTime(t)));
    p.setPen(QColor("#eef0f3"));
    p.drawLine(x, kRulerHeight, x, plot.bottom());
    p.setPen(QColor("#9aa5b1"));
    p.drawLine(x, kRulerHeight - 6, x, kRulerHeight - 1);
    p.setPen(QColor("#52606d"));
    p.drawText(x + 3, kRulerHeight - 8, formatDurationNs(static_cast<double>(t)));
  }
}

void TimelineView::paintLegend(QPainter& p) {
  const QRect r(0, height() - kLegendHeight, width(), kLegendHeight);
  p.fillRect(r, QColor("#f5f7fa"));
  p.setPen(QColor("#e4e7eb"));
  p.drawLine(r.topLeft(), r.topRight());
  const TimelineData* d = model_->data();
  if (!d) return;
  const QFontMetrics fm = p.fontMetrics();
  int x = 10;
  const int cy = r.center().y();
  for (auto c : d->categories()) {
    const QString name = QString::fromLatin1(profiler::toString(c));
    if (x + 16 + fm.horizontalAdvance(name) > r.right() - 10) break;
    p.fillRect(QRect(x, cy - 5, 11, 11), timelineCategoryColor(c));
    p.setPen(QColor("#323f4b"));
    p.drawText(x + 16, cy + fm.ascent() / 2 - 1, name);
    x += 16 + fm.horizontalAdvance(name) + 16;
  }
  const QString hint = QStringLiteral("pale = several spans merged (below a pixel)");
  if (x + fm.horizontalAdvance(hint) < r.right() - 10) {
    p.setPen(QColor("#7b8794"));
    p.drawText(r.right() - 10 - fm.horizontalAdvance(hint), cy + fm.ascent() / 2 - 1, hint);
  }
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), Qt::white);
  const QRect plot = plotRect();
  const TimelineData* d = model_->data();
  lastFrameBlocks_ = 0;
  if (!d || d->spanCount() == 0) {
    paintEmpty(p, plot);
    return;
  }
  const double nsPerPx = static_cast<double>(t1_ - t0_) / std::max(1, plot.width());
  paintRuler(p, plot, nsPerPx);
  paintSteps(p, plot, *d);
  p.save();
  p.setClipRect(plot);
  paintTracks(p, plot, *d, nsPerPx);
  paintSelectedSpan(p, *d);
  paintSelection(p, plot);
  p.restore();
  paintSelectionLabel(p, plot);
  paintLaneLabels(p, plot, *d);
  paintLaneSeparators(p, plot);
  paintLegend(p);
}

// Nothing to draw: the ruler and legend frame a line saying why.
void TimelineView::paintEmpty(QPainter& p, const QRect& plot) {
  paintRuler(p, plot, 1);
  paintLegend(p);
  p.setPen(QColor("#7b8794"));
  p.drawText(plot, Qt::AlignCenter | Qt::TextWordWrap,
             !status_.isEmpty()  ? status_
             : model_->loading() ? QStringLiteral("Loading the profile…")
                                 : QStringLiteral("No profile loaded"));
}

// Step boundaries: shaded alternate steps, a line and a label at each start.
void TimelineView::paintSteps(QPainter& p, const QRect& plot, const TimelineData& d) {
  const auto& steps = d.steps();
  auto it = std::lower_bound(steps.begin(), steps.end(), t0_,
                             [](const StepMark& m, int64_t t) { return m.end < t; });
  int lastLabelRight = -1000, lastLineX = -1000;
  const QFontMetrics fm = p.fontMetrics();
  static const QColor shade(0xf3, 0xf5, 0xf8), line(0xb8, 0xc2, 0xcc), ink(0x1f, 0x29, 0x33);
  for (; it != steps.end() && it->start <= t1_; ++it) {
    const int x = static_cast<int>(std::lround(xForTime(it->start)));
    // Solid lines (dashed pens go through the stroker, far slower), at most one per 8 px.
    if (x - lastLineX < 8) continue;
    lastLineX = x;
    if (it->step % 2 == 1) {
      const int x1 = static_cast<int>(std::lround(xForTime(it->end)));
      p.fillRect(QRect(QPoint(std::max(x, plot.left()), plot.top()),
                       QPoint(std::min(x1, plot.right()), plot.bottom())),
                 shade);
    }
    if (x < plot.left() || x > plot.right()) continue;
    p.setPen(line);
    p.drawLine(x, 2, x, plot.bottom());
    const QString label = QStringLiteral("step %1").arg(it->step);
    if (x + 3 > lastLabelRight + 6) {
      p.setPen(ink);
      p.drawText(x + 3, 12, label);
      lastLabelRight = x + 3 + fm.horizontalAdvance(label);
    }
  }
}

// Every visible track's blocks for this range and zoom (clipped to the plot by the caller).
void TimelineView::paintTracks(QPainter& p, const QRect& plot, const TimelineData& d,
                               double nsPerPx) {
  const QFontMetrics fm = p.fontMetrics();
  const int textY = (kRowHeight - 2 + fm.ascent() - fm.descent()) / 2;
  for (int track = 0; track < d.trackCount(); ++track) {
    const int top = trackTop(track);
    if (top + kRowHeight < plot.top() || top > plot.bottom()) continue;
    blocks_.clear();
    d.query(track, t0_, t1_, nsPerPx, blocks_);
    lastFrameBlocks_ += static_cast<int>(blocks_.size());
    for (const auto& b : blocks_) paintBlock(p, plot, d, b, top, textY);
  }
}

// One block: a span in its category's colour (outlined, named when wide enough), or several
// merged spans drawn pale.
void TimelineView::paintBlock(QPainter& p, const QRect& plot, const TimelineData& d,
                              const TimelineBlock& b, int top, int textY) {
  const double x0 = std::max(xForTime(b.start), plot.left() - 2.0);
  const double x1 = std::min(xForTime(b.end), plot.right() + 2.0);
  const int left = static_cast<int>(std::floor(x0));
  const int w = std::max(1, static_cast<int>(std::ceil(x1)) - left);
  const QRect r(left, top + 1, w, kRowHeight - 2);
  QColor c = timelineCategoryColor(b.category);
  if (b.count > 1) {
    // Merged: paler the less of the block the spans fill.
    const double fill =
        std::clamp(static_cast<double>(b.busy) / std::max<int64_t>(1, b.end - b.start), 0.0, 1.0);
    p.fillRect(r, mix(QColor("#ffffff"), c, 0.35 + 0.4 * fill));
    return;
  }
  p.fillRect(r, c);
  if (w >= 5) {
    p.setPen(c.darker(135));
    p.drawRect(r.adjusted(0, 0, -1, -1));
  }
  if (w >= kMinLabelBlock) {
    const QRect tr = r.intersected(plot).adjusted(3, 0, -3, 0);
    if (tr.width() >= kMinLabelBlock - 6) {
      const QFontMetrics fm = p.fontMetrics();
      p.setPen(c.lightnessF() > 0.62 ? QColor("#1f2933") : QColor(Qt::white));
      p.drawText(
          tr.left(), r.top() + textY,
          fm.elidedText(QString::fromStdString(d.spanName(b.span)), Qt::ElideRight, tr.width()));
    }
  }
}

// The selected span and, for a device kernel, the host range that launched it.
void TimelineView::paintSelectedSpan(QPainter& p, const TimelineData& d) {
  if (selectedSpan_ < 0) return;
  const auto r = spanRect(selectedSpan_);
  if (!r) return;
  p.setPen(QPen(QColor("#111827"), 2));
  p.setBrush(Qt::NoBrush);
  p.drawRect(r->adjusted(0, 0, -1, -1));
  const int32_t host = d.launchingRange(selectedSpan_);
  if (auto hr = spanRect(host)) {
    p.setPen(QPen(QColor("#111827"), 1.5, Qt::DashLine));
    p.drawRect(hr->adjusted(0, 0, -1, -1));
    p.drawLine(hr->center().x(), hr->bottom(), r->center().x(), r->top());
  }
}

// The selected time range, shaded between two lines.
void TimelineView::paintSelection(QPainter& p, const QRect& plot) {
  if (!selection_) return;
  const int x0 = static_cast<int>(std::lround(xForTime(selection_->first)));
  const int x1 = static_cast<int>(std::lround(xForTime(selection_->second)));
  const QRect sr(QPoint(x0, plot.top()), QPoint(std::max(x0, x1), plot.bottom()));
  p.fillRect(sr, QColor(37, 99, 235, 40));
  p.setPen(QPen(QColor("#2563eb"), 1));
  p.drawLine(x0, plot.top(), x0, plot.bottom());
  p.drawLine(x1, plot.top(), x1, plot.bottom());
}

// The selected range's duration, on the ruler above it (outside the plot's clip).
void TimelineView::paintSelectionLabel(QPainter& p, const QRect& plot) {
  if (!selection_) return;
  const QFontMetrics fm = p.fontMetrics();
  const int x0 = static_cast<int>(std::lround(xForTime(selection_->first)));
  const int x1 = static_cast<int>(std::lround(xForTime(selection_->second)));
  const QString label =
      formatDurationNs(static_cast<double>(selection_->second - selection_->first));
  const int w = fm.horizontalAdvance(label) + 10;
  const int cx = std::clamp((x0 + x1) / 2, plot.left() + w / 2, plot.right() - w / 2);
  const QRect lr(cx - w / 2, kRulerHeight - 18, w, 16);
  p.fillRect(lr, QColor("#2563eb"));
  p.setPen(Qt::white);
  p.drawText(lr, Qt::AlignCenter, label);
}

// The lane names in the left column, a rule under each lane, and the column's edge.
void TimelineView::paintLaneLabels(QPainter& p, const QRect& plot, const TimelineData& d) {
  const QFontMetrics fm = p.fontMetrics();
  p.save();
  p.setClipRect(QRect(0, kRulerHeight, kLabelWidth, plot.height()));
  p.fillRect(QRect(0, kRulerHeight, kLabelWidth, plot.height()), QColor("#f5f7fa"));
  const auto& lanes = d.lanes();
  for (size_t l = 0; l < lanes.size(); ++l) {
    const int top = kRulerHeight + laneY_[l] - vbar_->value();
    const int bottom = kRulerHeight + laneY_[l + 1] - kLaneGap - vbar_->value();
    p.setPen(QColor("#e4e7eb"));
    p.drawLine(0, bottom + kLaneGap / 2, width(), bottom + kLaneGap / 2);
    p.setPen(lanes[l].device ? QColor("#1e40af") : QColor("#323f4b"));
    const QRect lr(10, top, kLabelWidth - 16, std::max(kRowHeight, bottom - top));
    p.drawText(lr, Qt::AlignLeft | Qt::AlignTop,
               fm.elidedText(lanes[l].name, Qt::ElideRight, lr.width()));
  }
  p.restore();
  p.setPen(QColor("#e4e7eb"));
  p.drawLine(kLabelWidth - 1, kRulerHeight, kLabelWidth - 1, plot.bottom());
}

// Lane separators across the plot.
void TimelineView::paintLaneSeparators(QPainter& p, const QRect& plot) {
  p.save();
  p.setClipRect(plot);
  p.setPen(QColor("#eef0f3"));
  for (size_t l = 1; l < laneY_.size(); ++l) {
    const int y = kRulerHeight + laneY_[l] - kLaneGap / 2 - 1 - vbar_->value();
    p.drawLine(plot.left(), y, plot.right(), y);
  }
  p.restore();
}

// ---------------------------------------------------------------------------------- input

void TimelineView::wheelEvent(QWheelEvent* e) {
  const QPointF pos = e->position();
  const QPoint delta = e->angleDelta();
  if (pos.x() < kLabelWidth) {  // over the labels: scroll the lanes
    vbar_->setValue(vbar_->value() - delta.y() / 120 * 3 * kRowHeight);
    e->accept();
    return;
  }
  if (delta.x() != 0 && std::abs(delta.x()) > std::abs(delta.y())) {  // horizontal: pan
    const int64_t shift =
        static_cast<int64_t>(-delta.x() / 120.0 * 0.1 * static_cast<double>(t1_ - t0_));
    setVisibleRange(t0_ + shift, t1_ + shift);
  } else if (delta.y() != 0) {
    zoomAt(std::pow(1.25, delta.y() / 120.0), pos.x());
  }
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  pressPos_ = e->pos();
  pressT0_ = t0_;
  pressT1_ = t1_;
  pressScroll_ = vbar_->value();
  moved_ = false;
  const bool select = e->button() == Qt::RightButton ||
                      (e->button() == Qt::LeftButton && (e->modifiers() & Qt::ShiftModifier));
  drag_ = select ? Drag::Select : e->button() == Qt::LeftButton ? Drag::Pan : Drag::None;
  if (drag_ == Drag::Pan) setCursor(Qt::ClosedHandCursor);
  e->accept();
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (drag_ == Drag::None) return;
  const QPoint d = e->pos() - pressPos_;
  if (d.manhattanLength() >= 3) moved_ = true;
  if (!moved_) return;
  if (drag_ == Drag::Pan) {
    const double nsPerPx =
        static_cast<double>(pressT1_ - pressT0_) / std::max(1, plotRect().width());
    const auto shift = static_cast<int64_t>(std::llround(-d.x() * nsPerPx));
    setVisibleRange(pressT0_ + shift, pressT1_ + shift);
    vbar_->setValue(pressScroll_ - d.y());
  } else {
    const QRect plot = plotRect();
    const double a = std::clamp<double>(pressPos_.x(), plot.left(), plot.right() + 1);
    const double b = std::clamp<double>(e->pos().x(), plot.left(), plot.right() + 1);
    selection_ = {timeForX(std::min(a, b)), timeForX(std::max(a, b))};
    update();
  }
}

void TimelineView::mouseReleaseEvent(QMouseEvent* e) {
  const Drag drag = drag_;
  drag_ = Drag::None;
  unsetCursor();
  if (drag == Drag::Select) {
    if (moved_ && selection_ && selection_->second > selection_->first)
      setSelection(selection_->first, selection_->second);
    else
      clearSelection();
  } else if (drag == Drag::Pan && !moved_) {
    selectSpan(spanAtPoint(e->pos()));
  }
  e->accept();
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent* e) {
  // Zoom to the span under the cursor.
  const int32_t id = spanAtPoint(e->pos());
  const TimelineData* d = model_->data();
  if (id < 0 || !d) return;
  const auto& s = d->span(id);
  const int64_t pad = std::max<int64_t>(50, s.duration() / 4);
  setVisibleRange(s.start - pad, s.end + pad);
  selectSpan(id);
}

void TimelineView::keyPressEvent(QKeyEvent* e) {
  switch (e->key()) {
    case Qt::Key_F:
    case Qt::Key_Home:
      zoomToFit();
      break;
    case Qt::Key_Escape:
      clearSelection();
      selectSpan(-1);
      break;
    case Qt::Key_Plus:
    case Qt::Key_Equal:
      zoomAt(1.5, plotRect().center().x());
      break;
    case Qt::Key_Minus:
      zoomAt(1 / 1.5, plotRect().center().x());
      break;
    default:
      QWidget::keyPressEvent(e);
  }
}

}  // namespace ts::gui
