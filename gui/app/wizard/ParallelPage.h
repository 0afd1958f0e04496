#pragma once
// The wizard's parallelism page: ranks and ZeRO stage, offload of the model states, and the
// device the engine runs on.
#include "wizard/WizardPage.h"

namespace ts::gui {

class ParallelPage : public WizardPage {
 public:
  explicit ParallelPage(ConfigBinder* binder);

 private:
  void addRanksGroup();
  void addOffloadGroup();
  void addDeviceGroup();
};

}  // namespace ts::gui
