#pragma once
// The wizard's last page: the estimate in a sentence, what blocks Launch, soft warnings, how
// the estimate counts, and the resolved configuration the engine will receive.
#include <cstdint>

#include "wizard/WizardPage.h"

class QPlainTextEdit;

namespace ts::gui {

class ReviewPage : public WizardPage {
 public:
  explicit ReviewPage(ConfigBinder* binder);
  // `blockers`: why Launch is disabled; `capacity`: the device the warnings compare with;
  // `shown`: whether the page is on screen (only then is the JSON re-rendered).
  void showReview(const QStringList& blockers, int64_t capacity, bool shown);

 private:
  void showProblems(const QStringList& blockers, int64_t capacity);
  void showEstimate();

  QPlainTextEdit* json_ = nullptr;
  QLabel* issues_ = nullptr;
  QLabel* warnings_ = nullptr;
  QLabel* notes_ = nullptr;
  QLabel* estimate_ = nullptr;
};

}  // namespace ts::gui
