#pragma once
// The wizard's profiling page: the kernel-timeline schedule, evaluation and checkpoint
// intervals, and the seed.
#include "wizard/WizardPage.h"

namespace ts::gui {

class ProfilingPage : public WizardPage {
 public:
  explicit ProfilingPage(ConfigBinder* binder);

 private:
  void addProfilerGroup();
  void addEvalGroup();
};

}  // namespace ts::gui
