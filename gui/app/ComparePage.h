#pragma once
// The Compare page: two or more finished (or running) runs side by side — train loss, eval
// loss, learning rate and tokens/s overlaid with the x axis aligned by step, tokens seen or
// wall time; a summary table; predicted vs measured peak memory per category; and the config
// keys that differ. All data comes from CompareModel (loaded on a worker); this only paints.
#include <QList>
#include <QWidget>

#include "trainscope/gui/CompareModel.h"

class QComboBox;
class QGridLayout;
class QLabel;
class QTableView;

namespace ts::gui {

class ChartView;

class ComparePage : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePage(RunRepository repo, QWidget* parent = nullptr);
  CompareModel* model() const { return model_; }
  CompareModel::Axis axis() const;
  void setAxis(CompareModel::Axis axis);
  QComboBox* axisBox() const { return axisBox_; }
  // nullptr until runs are loaded.
  ChartView* chart(CompareModel::Metric metric) const;
  QTableView* summaryView() const { return summary_; }
  QTableView* memoryView() const { return memory_; }
  QTableView* diffView() const { return diff_; }
  QLabel* statusLabel() const { return status_; }
  static QColor runColor(int i);

 public slots:
  // Loads the runs (two or more) on a worker; the page fills in when they arrive.
  void compareRuns(const QList<qint64>& ids);

 signals:
  void message(const QString& text);

 private:
  void rebuildCharts();
  void redraw();

  CompareModel* model_;
  QLabel* runs_;
  QLabel* status_;
  QComboBox* axisBox_;
  QWidget* chartsBox_;
  QGridLayout* chartsGrid_;
  struct ChartSlot {
    ChartView* view = nullptr;
    std::vector<int> mean, envelope;  // series per run (-1: none)
  };
  ChartSlot charts_[4];
  QTableView *summary_, *memory_, *diff_;
  QLabel* diffTitle_;
};

}  // namespace ts::gui
