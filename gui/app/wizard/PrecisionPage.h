#pragma once
// The wizard's precision page: the number-format policy and the options of each format, each
// group enabled only under the policies that use it.
#include "wizard/WizardPage.h"

namespace ts::gui {

class PrecisionPage : public WizardPage {
 public:
  explicit PrecisionPage(ConfigBinder* binder);
  void refresh() override;

 private:
  void addPolicyGroup();
  void addGemmGroup();
  void addLossScaleGroup();
  void addFp8Group();

  QGroupBox* gemm_ = nullptr;
  QGroupBox* lossScale_ = nullptr;
  QGroupBox* fp8_ = nullptr;
};

}  // namespace ts::gui
