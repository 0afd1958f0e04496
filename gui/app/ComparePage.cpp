#include "ComparePage.h"

#include <algorithm>
#include <cmath>

#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QScrollBar>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QVBoxLayout>

#include "ChartView.h"

namespace ts::gui {

namespace {

using Metric = CompareModel::Metric;
using Axis = CompareModel::Axis;

constexpr Metric kMetrics[4] = {Metric::TrainLoss, Metric::EvalLoss, Metric::Lr,
                                Metric::TokensPerS};

QString metricTitle(Metric m) {
  switch (m) {
    case Metric::TrainLoss:
      return "Train loss";
    case Metric::EvalLoss:
      return "Eval loss";
    case Metric::Lr:
      return "Learning rate";
    case Metric::TokensPerS:
      return "Throughput";
  }
  return {};
}
QString metricUnit(Metric m) {
  switch (m) {
    case Metric::TrainLoss:
    case Metric::EvalLoss:
      return "loss";
    case Metric::Lr:
      return "learning rate";
    case Metric::TokensPerS:
      return "tokens/s";
  }
  return {};
}

// Scale for the x axis so its labels (printed as integers) stay short and meaningful.
struct XScale {
  double divide = 1;
  QString title;
};
XScale xScaleFor(Axis a, double maxX) {
  switch (a) {
    case Axis::Step:
      return {1, "step"};
    case Axis::Tokens:
      if (maxX >= 1e7) return {1e6, "tokens seen (millions)"};
      if (maxX >= 1e4) return {1e3, "tokens seen (thousands)"};
      return {1, "tokens seen"};
    case Axis::WallTime:
      if (maxX >= 5 * 3600.0) return {3600, "wall time (h)"};
      if (maxX >= 300) return {60, "wall time (min)"};
      return {1, "wall time (s)"};
  }
  return {};
}

// Bolds the cells the model marks (best run of a summary row, the device total).
class EmphasisDelegate : public QStyledItemDelegate {
 public:
  using QStyledItemDelegate::QStyledItemDelegate;
  void initStyleOption(QStyleOptionViewItem* o, const QModelIndex& index) const override {
    QStyledItemDelegate::initStyleOption(o, index);
    if (index.data(kCompareEmphasisRole).toBool()) o->font.setBold(true);
  }
};

QTableView* makeTable() {
  auto* t = new QTableView;
  t->setItemDelegate(new EmphasisDelegate(t));
  t->verticalHeader()->setVisible(false);
  t->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  t->setSelectionBehavior(QAbstractItemView::SelectRows);
  t->setAlternatingRowColors(true);
  t->setWordWrap(false);
  t->setEditTriggers(QAbstractItemView::NoEditTriggers);
  return t;
}

// Tall enough for every row (up to maxRows; then it scrolls), so the page scrolls, not the table.
void fitHeight(QTableView* t, int maxRows) {
  t->resizeColumnsToContents();
  const int rows = std::min(t->model()->rowCount(), maxRows);
  int h = t->horizontalHeader()->sizeHint().height() + 2 * t->frameWidth() + 4;
  for (int r = 0; r < rows; ++r) h += t->rowHeight(r);
  if (t->horizontalScrollBar()->isVisible() ||
      t->horizontalHeader()->length() > t->viewport()->width())
    h += t->horizontalScrollBar()->sizeHint().height();
  t->setFixedHeight(std::max(h, 60));
}

QWidget* titled(QLabel* title, QWidget* body) {
  auto* w = new QWidget;
  auto* v = new QVBoxLayout(w);
  v->setContentsMargins(0, 4, 0, 0);
  title->setObjectName("SectionTitle");
  v->addWidget(title);
  v->addWidget(body, 1);
  return w;
}

}  // namespace

QColor ComparePage::runColor(int i) {
  static const char* kColors[] = {"#2563eb", "#ea580c", "#16a34a", "#9333ea",
                                  "#db2777", "#0891b2", "#854d0e", "#475569"};
  return QColor(kColors[i % 8]);
}

ComparePage::ComparePage(RunRepository repo, QWidget* parent)
    : QWidget(parent), model_(new CompareModel(std::move(repo), this)) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(16, 12, 16, 12);
  auto* t = new QLabel("Compare runs");
  t->setObjectName("PageTitle");
  v->addWidget(t);
  runs_ = new QLabel("Select two or more runs on the Runs page and press Compare.");
  runs_->setObjectName("PageHint");
  runs_->setWordWrap(true);
  runs_->setTextFormat(Qt::RichText);
  v->addWidget(runs_);

  auto* controls = new QHBoxLayout;
  auto* axisLabel = new QLabel("Align by");
  axisBox_ = new QComboBox;
  axisBox_->addItem("Step", int(Axis::Step));
  axisBox_->addItem("Tokens seen", int(Axis::Tokens));
  axisBox_->addItem("Wall time", int(Axis::WallTime));
  axisBox_->setToolTip(
      "Steps compare optimisation progress; tokens seen compare runs with different batch "
      "sizes; wall time shows what a technique costs or saves in time");
  status_ = new QLabel;
  status_->setObjectName("Muted");
  status_->setWordWrap(true);
  controls->addWidget(axisLabel);
  controls->addWidget(axisBox_);
  controls->addSpacing(12);
  controls->addWidget(status_, 1);
  v->addLayout(controls);

  // Charts on top, tables below, all in one scroll area: every chart keeps a readable height
  // and every table shows all its columns whatever the window size.
  chartsBox_ = new QWidget;
  chartsGrid_ = new QGridLayout(chartsBox_);
  chartsGrid_->setContentsMargins(0, 0, 0, 0);
  chartsGrid_->setSpacing(8);

  summary_ = makeTable();
  summary_->setModel(model_->summaryModel());
  memory_ = makeTable();
  memory_->setModel(model_->memoryModel());
  diff_ = makeTable();
  diff_->setModel(model_->diffModel());
  diffTitle_ = new QLabel("Config differences");
  auto* tables = new QHBoxLayout;
  tables->setSpacing(12);
  tables->addWidget(titled(new QLabel("Summary"), summary_), 2, Qt::AlignTop);
  tables->addWidget(
      titled(new QLabel("Peak memory per category and rank: predicted vs measured"), memory_), 3,
      Qt::AlignTop);

  auto* content = new QWidget;
  auto* cv = new QVBoxLayout(content);
  cv->setContentsMargins(0, 0, 4, 0);
  cv->addWidget(chartsBox_);
  cv->addLayout(tables);
  cv->addWidget(titled(diffTitle_, diff_));
  cv->addStretch(1);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setWidget(content);
  v->addWidget(scroll, 1);

  connect(axisBox_, &QComboBox::currentIndexChanged, this, &ComparePage::redraw);
  connect(model_, &CompareModel::loaded, this, [this] {
    QStringList names;
    for (int i = 0; i < model_->runCount(); ++i)
      names << QStringLiteral("<span style='color:%1'>&#9632;</span> %2")
                   .arg(runColor(i).name(), model_->runLabel(i).toHtmlEscaped());
    runs_->setText(names.join("&nbsp;&nbsp;&nbsp;"));
    const int n = model_->diffModel()->rowCount();
    diffTitle_->setText(
        n == 0 ? QStringLiteral("Config differences: none (same config)")
               : QStringLiteral("Config differences (%1 setting%2)").arg(n).arg(n == 1 ? "" : "s"));
    for (QTableView* t : {summary_, memory_, diff_}) fitHeight(t, t == diff_ ? 12 : 20);
    rebuildCharts();
    emit message(QStringLiteral("Comparing %1 runs").arg(model_->runCount()));
  });
  connect(model_, &CompareModel::failed, this, [this](const QString& m) {
    status_->setText(m);
    emit message(m);
  });
}

CompareModel::Axis ComparePage::axis() const {
  return static_cast<Axis>(axisBox_->currentData().toInt());
}

void ComparePage::setAxis(Axis axis) {
  axisBox_->setCurrentIndex(axisBox_->findData(int(axis)));
}

ChartView* ComparePage::chart(Metric metric) const {
  return charts_[int(metric)].view;
}

void ComparePage::compareRuns(const QList<qint64>& ids) {
  status_->setText(QStringLiteral("Loading %1 runs…").arg(ids.size()));
  model_->load(ids);
}

void ComparePage::rebuildCharts() {
  // Series cannot be removed from a ChartView: new charts for each comparison.
  for (auto& c : charts_) {
    if (c.view) {
      chartsGrid_->removeWidget(c.view);
      c.view->deleteLater();
    }
    c = {};
  }
  for (int k = 0; k < 4; ++k) {
    const Metric m = kMetrics[k];
    ChartSlot& slot = charts_[int(m)];
    slot.view = new ChartView(metricTitle(m));
    slot.view->setMinimumHeight(250);
    slot.view->setLegendVisible(false);  // the page legend above names the colours
    if (m == Metric::Lr) slot.view->setYLabelFormat("%.1e");
    if (m == Metric::TokensPerS) slot.view->setYLabelFormat("%.0f");
    for (int i = 0; i < model_->runCount(); ++i) {
      const CompareRun& r = model_->run(i);
      const auto& pts = m == Metric::TrainLoss ? r.loss : m == Metric::Lr ? r.lr : r.tokensPerS;
      // A min/max band only where buckets hold several steps (a long run's downsampled curve).
      const bool band = m != Metric::EvalLoss &&
                        std::any_of(pts.begin(), pts.end(), [](auto& p) { return p.count > 1; });
      slot.envelope.push_back(band ? slot.view->addSeries(model_->runLabel(i) + " (range)",
                                                          runColor(i), ChartView::Style::FaintLine)
                                   : -1);
      slot.mean.push_back(slot.view->addSeries(model_->runLabel(i), runColor(i)));
    }
    chartsGrid_->addWidget(slot.view, k / 2, k % 2);
  }
  redraw();
}

void ComparePage::redraw() {
  if (!charts_[0].view) return;
  const Axis a = axis();
  QStringList missing;
  for (int k = 0; k < 4; ++k) {
    const Metric m = kMetrics[k];
    ChartSlot& slot = charts_[int(m)];
    std::vector<CompareModel::Curve> curves;
    double maxX = 0;
    for (int i = 0; i < model_->runCount(); ++i) {
      curves.push_back(model_->curve(i, m, a));
      for (const auto& p : curves.back().mean) maxX = std::max(maxX, p.x());
    }
    const XScale xs = xScaleFor(a, maxX);
    slot.view->setAxisTitles(xs.title, metricUnit(m));
    auto scaled = [&](QVector<QPointF> pts) {
      if (xs.divide != 1)
        for (auto& p : pts) p.setX(p.x() / xs.divide);
      return pts;
    };
    for (int i = 0; i < model_->runCount(); ++i) {
      if (slot.envelope[size_t(i)] >= 0)
        slot.view->setPoints(slot.envelope[size_t(i)], scaled(curves[size_t(i)].envelope));
      slot.view->setPoints(slot.mean[size_t(i)], scaled(curves[size_t(i)].mean));
      if (m == Metric::TrainLoss && curves[size_t(i)].mean.isEmpty() &&
          !model_->run(i).loss.empty())
        missing << model_->runLabel(i);
    }
  }
  if (!missing.isEmpty())
    status_->setText(
        QStringLiteral("Not on this axis (recorded no token counts): %1").arg(missing.join(", ")));
  else
    status_->setText(QStringLiteral("%1 runs · %2 config setting%3")
                         .arg(model_->runCount())
                         .arg(model_->diffModel()->rowCount())
                         .arg(model_->diffModel()->rowCount() == 1 ? " differs" : "s differ"));
}

}  // namespace ts::gui
