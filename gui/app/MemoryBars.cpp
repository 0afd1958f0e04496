#include "MemoryBars.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <QHelpEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>

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

void MemoryBars::setMeasuredTotals(const nlohmann::json& process,
                                   const nlohmann::json& deviceMemory) {
  const int before = figureHeight();
  process_ = process.is_object() ? process : nlohmann::json();
  deviceCount_ = deviceMemory.is_object() ? deviceMemory : nlohmann::json();
  if (figureHeight() != before) updateGeometry();
  update();
}

namespace {
std::optional<double> numberAt(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return std::nullopt;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}
}  // namespace

std::vector<MemoryBars::Figure> MemoryBars::figures() const {
  std::vector<Figure> out;
  if (!bars_ || bars_->ranks.empty() || predicted_) return out;
  // On CUDA the device's count is the independent one (the host's RSS does not hold the
  // device tier); elsewhere the process's resident set holds every tier.
  const bool device = deviceCount_.is_object();
  std::optional<double> tracked = numberAt(device ? deviceCount_ : process_, "tracked");
  if (!tracked) {  // no process figures (followed from the database): the table's own total
    double sum = 0;
    const auto& r0 = bars_->ranks.front();
    for (int t = 0; t < (device ? 1 : core::kMemoryTierCount); ++t)
      for (const auto& entry : r0.tiers[t]) sum += static_cast<double>(entry.current);
    tracked = sum;
  }
  const std::optional<double> other =
      numberAt(device ? deviceCount_ : process_, device ? "used" : "rss");
  const QString whose = bars_->ranks.size() > 1 ? QStringLiteral(" (rank 0's process)") : QString();
  const QString absent =
      other ? QString()
            : QStringLiteral(
                  "\nNot known for this run: measurements read back from the database "
                  "carry the tracker's table only.");
  out.push_back({"Tracked", formatBytes(*tracked),
                 QStringLiteral("tracked: the engine's own allocation list, the same list the "
                                "estimator sums, so the bars match the prediction by "
                                "construction (current bytes, %1%2)")
                     .arg(device ? "device tier" : "every tier", whose)});
  QString otherTip = device
                         ? QStringLiteral(
                               "used: the device's own count (cudaMemGetInfo: total − free), the "
                               "CUDA context, library workspaces and other processes included")
                         : QStringLiteral(
                               "resident: the OS's count for the process (its resident set): the "
                               "engine's buffers plus the runtime, the libraries, thread stacks "
                               "and the allocator's slack%1")
                               .arg(whose);
  if (const auto peak = numberAt(process_, "peak_rss"); peak && !device)
    otherTip += QStringLiteral("; peak %1").arg(formatBytes(*peak));
  if (const auto total = numberAt(deviceCount_, "total"); total && device)
    otherTip += QStringLiteral("; the device has %1").arg(formatBytes(*total));
  out.push_back({device ? "Used on the device" : "Resident (OS)",
                 other ? formatBytes(*other) : QStringLiteral("—"), otherTip + absent});
  QString untracked = QStringLiteral("—");
  if (other) {
    const double d = *other - *tracked;
    untracked = (d < 0 ? QStringLiteral("−") : QString()) + formatBytes(std::abs(d));
  }
  out.push_back({"Untracked", untracked,
                 QStringLiteral("untracked: %1 minus tracked, what the engine's list does not "
                                "account for (negative: allocated but not yet touched)%2")
                     .arg(device ? "used" : "resident", absent)});
  return out;
}

int MemoryBars::figureHeight() const {
  const int n = static_cast<int>(figures().size());
  return n == 0 ? 0 : n * (fontMetrics().height() + 3) + 10;
}

QString MemoryBars::toolTipAt(const QPoint& pos) const {
  for (const auto& [r, tip] : tipRects_)
    if (r.contains(pos)) return tip;
  return {};
}

bool MemoryBars::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    const auto* he = static_cast<QHelpEvent*>(e);
    const QString tip = toolTipAt(he->pos());
    if (tip.isEmpty())
      QToolTip::hideText();
    else
      QToolTip::showText(he->globalPos(), tip, this);
    return true;
  }
  return QWidget::event(e);
}

// One line per figure, label left and bytes right, each line its tooltip's area.
int MemoryBars::paintFigures(QPainter& p, int left, int width, int y) {
  tipRects_.clear();
  const auto figs = figures();
  if (figs.empty()) return y;
  const QFontMetrics fm(font());
  p.setFont(font());
  p.setPen(QPen(QColor("#d9dee3"), 1));
  p.drawLine(left, y + 2, left + width, y + 2);
  y += 7;
  for (const auto& f : figs) {
    const QRect line(left, y, width, fm.height());
    p.setPen(QColor("#323f4b"));
    p.drawText(line, Qt::AlignLeft | Qt::AlignVCenter, f.label);
    p.setPen(QColor("#52606d"));
    p.drawText(line, Qt::AlignRight | Qt::AlignVCenter, f.value);
    tipRects_.push_back({line, f.toolTip});
    y += fm.height() + 3;
  }
  return y + 3;
}

QSize MemoryBars::sizeHint() const {
  return {320, 100 + rowsNeeded() * 76 + extraTierRows() * 26 + figureHeight()};
}
QSize MemoryBars::minimumSizeHint() const {
  return {220, 96 + rowsNeeded() * 76 + extraTierRows() * 26 + figureHeight()};
}

namespace {

// What every part of one frame shares: fonts, the bar geometry and the scales.
struct BarFrame {
  QFont base, small;
  QFontMetrics fm, sfm;
  int left, right, barW;
  double scale;     // bytes at the device bars' full width
  double maxOther;  // the largest host or NVMe peak (their bars' own scale)
  bool capScale;    // the device bars are drawn against the capacity
  int64_t capacity;
  bool predicted;  // the bars are an estimate
  bool hasMarks;   // a prediction is ticked over the bars
};

// Scale: device capacity or the largest bar, whichever is bigger.
void setScales(BarFrame& f, const core::MemoryReport& bars,
               const std::optional<core::MemoryReport>& marks) {
  double maxDevice = 0, maxOther = 0;
  for (const auto& r : bars.ranks) {
    maxDevice = std::max<double>(maxDevice, r.totalPeak(core::MemoryTier::Device));
    maxOther = std::max<double>(maxOther, std::max(r.totalPeak(core::MemoryTier::Host),
                                                   r.totalPeak(core::MemoryTier::Nvme)));
  }
  if (marks) {
    for (const auto& r : marks->ranks)
      maxDevice = std::max<double>(maxDevice, r.totalPeak(core::MemoryTier::Device));
  }
  // Against the capacity when that shows something; a run using a sliver of a big device is
  // drawn to its own scale (the text still says how much of the device it uses).
  f.capScale = f.capacity > 0 && maxDevice >= 0.25 * static_cast<double>(f.capacity);
  f.scale = f.capScale ? std::max<double>({maxDevice, static_cast<double>(f.capacity), 1.0}) * 1.02
                       : std::max(maxDevice, 1.0) * 1.04;
  f.maxOther = maxOther;
}

// "Rank 0 · device" and its figure (of the capacity, when known); returns the bar's top.
int paintRankHeading(QPainter& p, const BarFrame& f, const core::RankMemory& r, int y) {
  const int64_t capacity = f.capacity;
  const double total = r.totalPeak(core::MemoryTier::Device);
  p.setFont(f.base);
  p.setPen(QColor("#323f4b"));
  QString head = QStringLiteral("Rank %1 · device").arg(r.rank);
  QString val = formatBytes(total);
  if (capacity > 0) {
    const double pct = 100.0 * total / static_cast<double>(capacity);
    val += QStringLiteral(" of %1 (%2%)")
               .arg(formatBytes(static_cast<double>(capacity)))
               .arg(pct < 1 ? QString::number(pct, 'f', 2) : QString::number(pct, 'f', 0));
  }
  p.drawText(QRect(f.left, y, f.barW, f.fm.height()), Qt::AlignLeft | Qt::AlignVCenter, head);
  // The figure goes on its own line when both do not fit side by side.
  if (f.fm.horizontalAdvance(head) + f.fm.horizontalAdvance(val) + 12 > f.barW) y += f.fm.height();
  p.setPen(capacity > 0 && total > capacity ? QColor("#b42318") : QColor("#52606d"));
  p.drawText(QRect(f.left, y, f.barW, f.fm.height()), Qt::AlignRight | Qt::AlignVCenter, val);
  return y + f.fm.height() + (f.hasMarks ? 10 : 2);  // room for the prediction ticks
}

constexpr int kBarHeight = 16;

// The device tier stacked by category over a grey track, with the capacity line.
void paintDeviceBar(QPainter& p, const BarFrame& f, const core::RankMemory& r, int y) {
  QRectF track(f.left, y, f.barW, kBarHeight);
  p.setPen(Qt::NoPen);
  p.setBrush(QColor("#eef0f3"));
  p.drawRoundedRect(track, 4, 4);
  double x = f.left;
  for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
    const double v = r.tiers[0][c].peak;
    const double w = v / f.scale * f.barW;
    if (w <= 0) continue;
    QColor col = categoryColor(c);
    if (f.predicted) col.setAlpha(200);
    p.setBrush(col);
    p.drawRect(QRectF(x, y, std::max(w, 1.0), kBarHeight));
    x += w;
  }
  if (f.capScale) {  // capacity line
    const double cx = f.left + f.capacity / f.scale * f.barW;
    p.setPen(QPen(QColor("#b42318"), 1.5, Qt::DashLine));
    p.drawLine(QPointF(cx, y - 3), QPointF(cx, y + kBarHeight + 3));
  }
}

// The predicted peak per category: a tick above the bar where each category ends.
void paintPredictionTicks(QPainter& p, const BarFrame& f, const core::RankMemory& m, int y) {
  double mx = f.left;
  p.setPen(Qt::NoPen);
  for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
    mx += m.tiers[0][c].peak / f.scale * f.barW;
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

// Host / NVMe tiers: thin bars on their own scale, only when used. Returns the y below them.
int paintOtherTiers(QPainter& p, const BarFrame& f, const core::RankMemory& r, int y) {
  for (auto tier : {core::MemoryTier::Host, core::MemoryTier::Nvme}) {
    const double t = r.totalPeak(tier);
    if (t <= 0) continue;
    p.setFont(f.small);
    p.setPen(QColor("#52606d"));
    const QString label = QStringLiteral("%1: %2").arg(
        tier == core::MemoryTier::Host ? "host RAM" : "NVMe", formatBytes(t));
    p.drawText(QRect(f.left, y, f.barW, f.sfm.height()), Qt::AlignLeft | Qt::AlignVCenter, label);
    y += f.sfm.height();
    double hx = f.left;
    p.setPen(Qt::NoPen);
    for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
      const double v = r.tiers[static_cast<int>(tier)][c].peak;
      const double w = v / std::max(f.maxOther, 1.0) * f.barW * 0.98;
      if (w <= 0) continue;
      p.setBrush(categoryColor(c).lighter(115));
      p.drawRect(QRectF(hx, y, std::max(w, 1.0), 7));
      hx += w;
    }
    y += 10;
  }
  return y;
}

// The categories' colours, wrapped over as many lines as they need. Returns the y below.
int paintLegend(QPainter& p, const BarFrame& f, int y) {
  p.setFont(f.small);
  int lx = f.left;
  for (int c = 0; c < core::kMemoryCategoryCount; ++c) {
    const QString t = categoryLabel(c);
    const int w = 14 + f.sfm.horizontalAdvance(t) + 12;
    if (lx + w > f.right) {
      lx = f.left;
      y += f.sfm.height() + 4;
    }
    p.setPen(Qt::NoPen);
    p.setBrush(categoryColor(c));
    p.drawRoundedRect(QRectF(lx, y + (f.sfm.height() - 10) / 2.0, 10, 10), 2, 2);
    p.setPen(QColor("#323f4b"));
    p.drawText(QPoint(lx + 14, y + f.sfm.ascent()), t);
    lx += w;
  }
  return y + f.sfm.height() + 4;
}

// What the bars are (estimate or measurement) and what they are drawn against.
void paintFooter(QPainter& p, const BarFrame& f, int y) {
  p.setPen(QColor("#7b8794"));
  QString foot = f.predicted ? "Estimated peak per rank" : "Measured peak per rank";
  if (f.hasMarks) foot += " · ▼ predicted";
  if (f.capScale)
    foot += " · dashed line: device capacity";
  else if (f.capacity > 0)
    foot += " · drawn to scale of the largest rank";
  p.drawText(QRect(f.left, y, f.barW, f.sfm.height() * 2), Qt::AlignLeft | Qt::TextWordWrap, foot);
}

// One rank: heading, device bar (with its prediction ticks), host and NVMe bars. Returns the y
// below it.
int paintRank(QPainter& p, const BarFrame& f, const core::RankMemory& r,
              const core::RankMemory* mark, int y) {
  y = paintRankHeading(p, f, r, y);
  paintDeviceBar(p, f, r, y);
  if (mark) paintPredictionTicks(p, f, *mark, y);
  y += kBarHeight + 4;
  y = paintOtherTiers(p, f, r, y);
  return y + 8;
}

}  // namespace

void MemoryBars::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QFont base = font();
  QFont small = base;
  small.setPointSizeF(std::max(7.5, base.pointSizeF() - 1.5));
  const int left = 8, right = width() - 8;
  BarFrame f{base,
             small,
             QFontMetrics(base),
             QFontMetrics(small),
             left,
             right,
             right - left,
             0.0,
             0.0,
             false,
             capacity_,
             predicted_,
             marks_.has_value()};
  int y = 4;

  if (!bars_ || bars_->ranks.empty()) {
    tipRects_.clear();
    p.setPen(QColor("#7b8794"));
    p.drawText(rect().adjusted(8, 8, -8, -8), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap,
               "No memory figures yet: they appear as soon as the configuration is valid "
               "(estimate) or the run reports a measurement.");
    return;
  }
  setScales(f, *bars_, marks_);
  const int rows = rowsNeeded();
  for (int i = 0; i < rows; ++i) {
    const auto& r = bars_->ranks[i];
    y = paintRank(p, f, r, markFor(r), y);
  }
  if (static_cast<int>(bars_->ranks.size()) > rows) {
    p.setFont(small);
    p.setPen(QColor("#7b8794"));
    p.drawText(QRect(left, y, f.barW, f.sfm.height()), Qt::AlignLeft,
               QStringLiteral("… and %1 more ranks").arg(bars_->ranks.size() - rows));
    y += f.sfm.height() + 4;
  }
  y = paintFigures(p, left, f.barW, y);
  y = paintLegend(p, f, y);
  paintFooter(p, f, y);
}

}  // namespace ts::gui
