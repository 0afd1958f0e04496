#pragma once
// Per-rank stacked bars of the memory table (parameters, gradients, optimizer state,
// activations, workspace), device tier against the device capacity, host and NVMe tiers as
// their own thinner bars. Shows an estimate alone (wizard) or a measurement with the
// prediction marked (dashboard).
#include <cstdint>
#include <optional>
#include <vector>

#include <QColor>
#include <QRect>
#include <QWidget>
#include <nlohmann/json.hpp>

#include "trainscope/core/plan/MemoryTable.h"

namespace ts::gui {

QColor categoryColor(int category);
QString categoryLabel(int category);
// "1.50 GiB", "12.0 MiB", "512 B"
QString formatBytes(double bytes);

class MemoryBars : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryBars(QWidget* parent = nullptr);
  // bars: what is drawn (measured, or the estimate when nothing is measured yet);
  // marks: drawn as ticks over the bars (the prediction next to a measurement), each on the
  // bar of the rank with the same number (LiveRun::predictedPerRank lines them up).
  void setReports(std::optional<core::MemoryReport> bars, std::optional<core::MemoryReport> marks,
                  int64_t capacity, bool barsArePredicted);
  // What is drawn, one row per rank shown (up to 8; the rest are summarized): the device-tier
  // peak of the bar and of its prediction mark, when there is one.
  struct Row {
    int rank = 0;
    int64_t deviceBytes = 0;
    std::optional<int64_t> predictedDeviceBytes;
  };
  std::vector<Row> rows() const;

  // Under measured bars, what the tracker's figures are checked against: the memory event's
  // `process` (the OS's resident count) and, on CUDA, `device_memory` (the device's used
  // bytes). The tracker is the list the estimator sums, so its bars match the prediction by
  // construction; these figures do not. Null (a run followed from the database): "—".
  void setMeasuredTotals(const nlohmann::json& process, const nlohmann::json& deviceMemory);
  // The lines drawn under measured bars: tracked, resident (or device used), untracked.
  struct Figure {
    QString label, value, toolTip;
  };
  std::vector<Figure> figures() const;
  // The tooltip of what is drawn at pos (a figure's line), empty elsewhere.
  QString toolTipAt(const QPoint& pos) const;
  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;

 private:
  int figureHeight() const;
  int paintFigures(QPainter& p, int left, int width, int y);
  int rowsNeeded() const;
  int extraTierRows() const;
  const core::RankMemory* markFor(const core::RankMemory& bar) const;
  std::optional<core::MemoryReport> bars_, marks_;
  int64_t capacity_ = 0;
  bool predicted_ = true;
  nlohmann::json process_, deviceCount_;
  std::vector<std::pair<QRect, QString>> tipRects_;  // where each figure was last drawn
};

}  // namespace ts::gui
