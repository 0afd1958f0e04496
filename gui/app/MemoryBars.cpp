#include "MemoryBars.h"

#include <algorithm>

#include <QPainter>
#include <QPainterPath>

namespace ts::gui {

QColor categoryColor(int c) {
  static const QColor colors[] = {QColor("#2563eb"), QColor("#f59e0b"), QColor("#10b981"),
                                  QColor("#8b5cf6"), QColor("#94a3b8")};
  return colors[std::clamp(c, 0, 4)];
}

QString categoryLabel(int c) {
  static const char* names[] = {"Parameters", "Gradients", "Optimizer state", "Activations",
                                "Workspace"};
  return names[std::clamp(c, 0, 4)];
}

QString formatBytes(double b) {
  const double k = 1024.0;
  if (b >= k * k * k * k) return QString::number(b / (k * k * k * k), 'f', 2) + " TiB";
  if (b >= k * k * k) return QString::number(b / (k * k * k), 'f', 2) + " GiB";
  if (b >= k * k) return QString::number(b / (k * k), 'f', 1) + " MiB";
  if (b >= k) return QString::number(b / k, 'f', 1) + " KiB";
  return QString::number(b, 'f', 0) + " B";
}

MemoryBars::MemoryBars(QWidget* parent) : QWidget(parent) {
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void MemoryBars::setReports(std::optional<core::MemoryReport> bars,
                            std::optional<core::MemoryReport> marks, int64_t capacity,
                            bool barsArePredicted) {
  const int rowsBefore = rowsNeeded() * 16 + extraTierRows();
  bars_ = std::move(bars);
  marks_ = std::move(marks);
  capacity_ = capacity;
  predicted_ = barsArePredicted;
  if (rowsNeeded() * 16 + extraTierRows() != rowsBefore)
    updateGeometry();  // layout only on shape change
  update();
}

int MemoryBars::rowsNeeded() const {
  if (!bars_) return 1;
  // Ranks with the same layout would repeat: show up to 8 ranks, one row each.
  return std::min<int>(8, static_cast<int>(bars_->ranks.size()));
}

int MemoryBars::extraTierRows() const {
  int n = 0;
  if (!bars_) return 0;
  for (int i = 0; i < rowsNeeded(); ++i)
    for (auto t : {core::MemoryTier::Host, core::MemoryTier::Nvme})
      n += bars_->ranks[i].totalPeak(t) > 0 ? 1 : 0;
  return n;
}

const core::RankMemory* MemoryBars::markFor(const core::RankMemory& bar) const {
  if (!marks_) return nullptr;
  for (const auto& m : marks_->ranks)
    if (m.rank == bar.rank) return &m;
  return nullptr;
}

std::vector<MemoryBars::Row> MemoryBars::rows() const {
  std::vector<Row> out;
  if (!bars_) return out;
  for (int i = 0; i < rowsNeeded(); ++i) {
    const auto& r = bars_->ranks[i];
    Row row{r.rank, r.totalPeak(core::MemoryTier::Device), std::nullopt};
    if (const auto* m = markFor(r))
      row.predictedDeviceBytes = m->totalPeak(core::MemoryTier::Device);
    out.push_back(row);
  }
  return out;
}

QSize MemoryBars::sizeHint() const {
  return {320, 100 + rowsNeeded() * 76 + extraTierRows() * 26};
}
QSize MemoryBars::minimumSizeHint() const {
  return {220, 96 + rowsNeeded() * 76 + extraTierRows() * 26};
}

void MemoryBars::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QFont base = font();
  QFont small = base;
  small.setPointSizeF(std::max(7.5, base.pointSizeF() - 1.5));
  const QFontMetrics fm(base), sfm(small);
  const int left = 8, right = width() - 8;
  int y = 4;

  if (!bars_ || bars_->ranks.empty()) {
    p.setPen(QColor("#7b8794"));
    p.drawText(rect().adjusted(8, 8, -8, -8), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap,
               "No memory figures yet: they appear as soon as the configuration is valid "
               "(estimate) or the run reports a measurement.");
    return;
  }
  // Scale: device capacity or the largest bar, whichever is bigger.
  double maxDevice = 0, maxOther = 0;
  for (const auto& r : bars_->ranks) {
    maxDevice = std::max<double>(maxDevice, r.totalPeak(core::MemoryTier::Device));
    maxOther = std::max<double>(maxOther, std::max(r.totalPeak(core::MemoryTier::Host),
                                                   r.totalPeak(core::MemoryTier::Nvme)));
  }
  if (marks_) {
    for (const auto& r : marks_->ranks)
      maxDevice = std::max<double>(maxDevice, r.totalPeak(core::MemoryTier::Device));
  }
  // Against the capacity when that shows something; a run using a sliver of a big device is
  // drawn to its own scale (the text still says how much of the device it uses).
  const bool capScale = capacity_ > 0 && maxDevice >= 0.25 * static_cast<double>(capacity_);
  const double scale =
      capScale ? std::max<double>({maxDevice, static_cast<double>(capacity_), 1.0}) * 1.02
               : std::max(maxDevice, 1.0) * 1.04;
  const int barW = right - left;

  const int rows = rowsNeeded();
  for (int i = 0; i < rows; ++i) {
    const auto& r = bars_->ranks[i];
    const double total = r.totalPeak(core::MemoryTier::Device);
    p.setFont(base);
    p.setPen(QColor("#323f4b"));
    QString head = QStringLiteral("Rank %1 · device").arg(r.rank);
    QString val = formatBytes(total);
    if (capacity_ > 0) {
      const double pct = 100.0 * total / static_cast<double>(capacity_);
      val += QStringLiteral(" of %1 (%2%)")
                 .arg(formatBytes(static_cast<double>(capacity_)))
                 .arg(pct < 1 ? QString::number(pct, 'f', 2) : QString::number(pct, 'f', 0));
    }
    p.drawText(QRect(left, y, barW, fm.height()), Qt::AlignLeft | Qt::AlignVCenter, head);
    // The figure goes on its own line when both do not fit side by side.
    if (fm.horizontalAdvance(head) + fm.horizontalAdvance(val) + 12 > barW) y += fm.height();
    p.setPen(capacity_ > 0 && total > capacity_ ? QColor("#b42318") : QColor("#52606d"));
    p.drawText(QRect(left, y, barW, fm.height()), Qt::AlignRight | Qt::AlignVCenter, val);
    y += fm.height() + (marks_ ? 10 : 2);  // room for the prediction ticks
    const int barH = 16;
    QRectF track(left, y, barW, barH);
    p.setPen(Qt::NoPen);
    p.setBrush(QColor("#eef0f3"));
    p.drawRoundedRect(track, 4, 4);
    double x = left;
    for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
      const double v = r.tiers[0][c].peak;
      const double w = v / scale * barW;
      if (w <= 0) continue;
      QColor col = categoryColor(c);
      if (predicted_) col.setAlpha(200);
      p.setBrush(col);
      p.drawRect(QRectF(x, y, std::max(w, 1.0), barH));
      x += w;
    }
    if (capScale) {  // capacity line
      const double cx = left + capacity_ / scale * barW;
      p.setPen(QPen(QColor("#b42318"), 1.5, Qt::DashLine));
      p.drawLine(QPointF(cx, y - 3), QPointF(cx, y + barH + 3));
    }
    if (const auto* mark = markFor(r)) {  // predicted peak per category
      const auto& m = *mark;
      double mx = left;
      p.setPen(Qt::NoPen);
      for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
        mx += m.tiers[0][c].peak / scale * barW;
        if (m.tiers[0][c].peak <= 0) continue;
        QPainterPath tri;
        tri.moveTo(mx, y - 1);
        tri.lineTo(mx - 4, y - 7);
        tri.lineTo(mx + 4, y - 7);
        tri.closeSubpath();
        p.setBrush(categoryColor(c).darker(140));
        p.drawPath(tri);
      }
    }
    y += barH + 4;
    // Host / NVMe tiers: thin bars on their own scale, only when used.
    for (auto tier : {core::MemoryTier::Host, core::MemoryTier::Nvme}) {
      const double t = r.totalPeak(tier);
      if (t <= 0) continue;
      p.setFont(small);
      p.setPen(QColor("#52606d"));
      const QString label = QStringLiteral("%1: %2").arg(
          tier == core::MemoryTier::Host ? "host RAM" : "NVMe", formatBytes(t));
      p.drawText(QRect(left, y, barW, sfm.height()), Qt::AlignLeft | Qt::AlignVCenter, label);
      y += sfm.height();
      double hx = left;
      p.setPen(Qt::NoPen);
      for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
        const double v = r.tiers[static_cast<int>(tier)][c].peak;
        const double w = v / std::max(maxOther, 1.0) * barW * 0.98;
        if (w <= 0) continue;
        p.setBrush(categoryColor(c).lighter(115));
        p.drawRect(QRectF(hx, y, std::max(w, 1.0), 7));
        hx += w;
      }
      y += 10;
    }
    y += 8;
  }
  if (static_cast<int>(bars_->ranks.size()) > rows) {
    p.setFont(small);
    p.setPen(QColor("#7b8794"));
    p.drawText(QRect(left, y, barW, sfm.height()), Qt::AlignLeft,
               QStringLiteral("… and %1 more ranks").arg(bars_->ranks.size() - rows));
    y += sfm.height() + 4;
  }
  // Legend, wrapped.
  p.setFont(small);
  int lx = left;
  for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
    const QString t = categoryLabel(c);
    const int w = 14 + sfm.horizontalAdvance(t) + 12;
    if (lx + w > right) {
      lx = left;
      y += sfm.height() + 4;
    }
    p.setPen(Qt::NoPen);
    p.setBrush(categoryColor(c));
    p.drawRoundedRect(QRectF(lx, y + (sfm.height() - 10) / 2.0, 10, 10), 2, 2);
    p.setPen(QColor("#323f4b"));
    p.drawText(QPoint(lx + 14, y + sfm.ascent()), t);
    lx += w;
  }
  y += sfm.height() + 4;
  p.setPen(QColor("#7b8794"));
  QString foot = predicted_ ? "Estimated peak per rank" : "Measured peak per rank";
  if (marks_) foot += " · ▼ predicted";
  if (capScale)
    foot += " · dashed line: device capacity";
  else if (capacity_ > 0)
    foot += " · drawn to scale of the largest rank";
  p.drawText(QRect(left, y, barW, sfm.height() * 2), Qt::AlignLeft | Qt::TextWordWrap, foot);
}

}  // namespace ts::gui
