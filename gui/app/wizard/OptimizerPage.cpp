#include "wizard/OptimizerPage.h"

#include <algorithm>

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QVBoxLayout>

#include "ChartView.h"
#include "ConfigBinder.h"
#include "trainscope/core/config/Schedule.h"

namespace ts::gui {

OptimizerPage::OptimizerPage(ConfigBinder* binder)
    : WizardPage(binder, "Optimizer and schedule", "") {
  addOptimizerGroup();
  addScheduleGroup();
  addLrChart();
  addCurriculumGroup();
  addCurriculumChart();
  body()->addWidget(
      issueLabel({"optimizer", "schedule", "curriculum", "train.steps", "train.grad_clip"}));
  body()->addStretch(1);
}

void OptimizerPage::addOptimizerGroup() {
  QFormLayout* f;
  auto* g = formGroup("Optimizer", &f);
  f->addRow("Type",
            binder()->choice("optimizer.type", {{"AdamW", "adamw"}, {"SGD + momentum", "sgd"}},
                             "AdamW: two state values per parameter, robust. SGD: one (momentum), "
                             "needs more tuning."));
  f->addRow(
      "Peak learning rate",
      binder()->doubleSpin("optimizer.lr", 0.0, 10.0, 6,
                           "Too high diverges, too low crawls. Reached after warmup.", 0.0001));
  f->addRow("Weight decay",
            binder()->doubleSpin("optimizer.weight_decay", 0.0, 1.0, 3,
                                 "Decoupled L2 pull towards zero; regularizes.", 0.01));
  f->addRow("Adam β1", binder()->doubleSpin("optimizer.betas.0", 0.0, 0.9999, 4,
                                            "Momentum of the gradient average.", 0.01));
  f->addRow("Adam β2",
            binder()->doubleSpin(
                "optimizer.betas.1", 0.0, 0.99999, 5,
                "Memory of the squared-gradient average; lower reacts faster to spikes.", 0.001));
  f->addRow(
      "State precision",
      binder()->intChoice(
          "optimizer.state_bits", {{"32-bit", 32}, {"8-bit blockwise", 8}},
          "8-bit Adam state: 4x smaller optimizer state, quantization noise in the moments."));
  f->addRow("Gradient clipping",
            binder()->doubleSpin(
                "train.grad_clip", 0.0, 1000.0, 2,
                "Caps the global gradient norm (0 = off); guards against loss spikes.", 0.1));
  body()->addWidget(g);
}

void OptimizerPage::addScheduleGroup() {
  QFormLayout* f;
  auto* s = formGroup("Schedule", &f);
  f->addRow("Steps",
            binder()->intSpin("train.steps", 1, 100000000, "Optimizer steps in the run.", 100));
  f->addRow("Shape",
            binder()->choice(
                "schedule.type",
                {{"Cosine decay", "cosine"}, {"Linear decay", "linear"}, {"Constant", "constant"}},
                "Decay lets the model settle at the end; constant is simplest for short tests."));
  f->addRow(
      "Warmup steps",
      binder()->intSpin("schedule.warmup_steps", 0, 100000000,
                        "Linear ramp from 0: avoids early instability, delays learning.", 10));
  f->addRow("Final learning rate",
            binder()->doubleSpin("schedule.min_lr", 0.0, 10.0, 6, "Floor of the decay.", 0.00001));
  body()->addWidget(s);
}

void OptimizerPage::addLrChart() {
  lrChart_ = new ChartView("Learning rate over the run");
  lrChart_->setAxisTitles("step", "learning rate");
  lrChart_->setYLabelFormat("%.1e");
  lrChart_->setLegendVisible(false);
  lrChart_->setMinimumHeight(200);
  lrSeries_ = lrChart_->addSeries("learning rate", QColor("#2563eb"));
  lrChart_->setYFloor(0);
  body()->addWidget(lrChart_);
}

void OptimizerPage::addCurriculumGroup() {
  QFormLayout* f;
  auto* c = formGroup("Curriculum", &f);
  f->addRow("Ordering",
            binder()->choice(
                "curriculum.type",
                {{"None (shuffled)", "none"},
                 {"Short to long", "length"},
                 {"Easy to hard", "difficulty"}},
                "Starts on easier samples; can speed up early learning, may bias the start."));
  f->addRow("Pacing", binder()->choice(
                          "curriculum.pacing",
                          {{"Linear", "linear"}, {"Square root", "root"}, {"Four stages", "step"}},
                          "How fast the difficulty grows to the full data."));
  f->addRow("Full data at",
            binder()->doubleSpin("curriculum.full_at", 0.0, 1.0, 2,
                                 "Fraction of the run after which all data is in use.", 0.05));
  body()->addWidget(c);
}

void OptimizerPage::addCurriculumChart() {
  curriculumChart_ = new ChartView("Curriculum: share of full difficulty");
  curriculumChart_->setAxisTitles("step", "fraction");
  curriculumChart_->setYLabelFormat("%.1f");
  curriculumChart_->setLegendVisible(false);
  curriculumChart_->setMinimumHeight(170);
  curriculumSeries_ = curriculumChart_->addSeries("difficulty", QColor("#10b981"));
  curriculumChart_->setYFloor(0);
  body()->addWidget(curriculumChart_);
}

void OptimizerPage::refresh() {
  const auto& cfg = doc()->config();
  if (!cfg) return;  // keep the last valid preview while the document has problems
  const int n = 400;
  const auto lr = core::scheduleCurve(*cfg, n);
  const auto steps = core::scheduleCurveSteps(*cfg, n);
  QVector<QPointF> pts, cur;
  for (size_t i = 0; i < lr.size() && i < steps.size(); ++i) {
    pts.append(QPointF(static_cast<double>(steps[i]), lr[i]));
    cur.append(QPointF(static_cast<double>(steps[i]), core::curriculumFraction(*cfg, steps[i])));
  }
  const double last = std::max<double>(1, static_cast<double>(cfg->train.steps - 1));
  lrChart_->setXRange(0, last);
  lrChart_->setPoints(lrSeries_, pts);
  curriculumChart_->setXRange(0, last);
  curriculumChart_->setPoints(curriculumSeries_, cur);
  curriculumChart_->setVisible(cfg->curriculum.type != "none");
}

}  // namespace ts::gui
