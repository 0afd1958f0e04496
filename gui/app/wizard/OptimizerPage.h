#pragma once
// The wizard's optimizer page: the optimizer, the learning-rate schedule and the curriculum,
// each schedule drawn over the run's steps.
#include "wizard/WizardPage.h"

namespace ts::gui {

class ChartView;

class OptimizerPage : public WizardPage {
 public:
  explicit OptimizerPage(ConfigBinder* binder);
  // Redraws both curves from the parsed config; keeps the last ones while it has problems.
  void refresh() override;

 private:
  void addOptimizerGroup();
  void addScheduleGroup();
  void addLrChart();
  void addCurriculumGroup();
  void addCurriculumChart();

  ChartView* lrChart_ = nullptr;
  ChartView* curriculumChart_ = nullptr;
  int lrSeries_ = -1, curriculumSeries_ = -1;
};

}  // namespace ts::gui
