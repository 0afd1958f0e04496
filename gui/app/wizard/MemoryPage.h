#pragma once
// The wizard's memory page: activation checkpointing, compression and attention, and the
// batch (micro-batch, accumulation, the effective batch they make).
#include "wizard/WizardPage.h"

namespace ts::gui {

class MemoryPage : public WizardPage {
 public:
  explicit MemoryPage(ConfigBinder* binder);
  void refresh() override;

 private:
  void addActivationGroup();
  void addBatchGroup();

  QLabel* effBatch_ = nullptr;
};

}  // namespace ts::gui
