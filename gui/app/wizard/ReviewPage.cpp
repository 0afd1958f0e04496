#include "wizard/ReviewPage.h"

#include <QLabel>
#include <QLocale>
#include <QPlainTextEdit>
#include <QVBoxLayout>

#include "ConfigBinder.h"
#include "MemoryBars.h"
#include "trainscope/gui/HfFolderInfo.h"

namespace ts::gui {

ReviewPage::ReviewPage(ConfigBinder* binder)
    : WizardPage(binder, "Review",
                 "The resolved configuration the engine will receive (less the model settings "
                 "the chosen architecture does not read).") {
  estimate_ = new QLabel;
  estimate_->setWordWrap(true);
  estimate_->setTextFormat(Qt::RichText);
  body()->addWidget(estimate_);
  issues_ = new QLabel;
  issues_->setObjectName("Issue");
  issues_->setWordWrap(true);
  issues_->setTextFormat(Qt::RichText);
  body()->addWidget(issues_);
  warnings_ = new QLabel;
  warnings_->setObjectName("Warning");
  warnings_->setWordWrap(true);
  warnings_->setTextFormat(Qt::RichText);
  body()->addWidget(warnings_);
  notes_ = new QLabel;
  notes_->setObjectName("EstimateNotes");
  notes_->setWordWrap(true);
  notes_->setTextFormat(Qt::RichText);
  body()->addWidget(notes_);
  json_ = new QPlainTextEdit;
  json_->setObjectName("Json");
  json_->setReadOnly(true);
  json_->setMinimumHeight(300);
  body()->addWidget(json_, 1);
}

void ReviewPage::showReview(const QStringList& blockers, int64_t capacity, bool shown) {
  if (shown) {
    const std::string text = doc()->resolvedForFamily().dump(2);
    json_->setPlainText(QString::fromStdString(text));
  }
  showProblems(blockers, capacity);
  showEstimate();
}

void ReviewPage::showProblems(const QStringList& blockers, int64_t capacity) {
  QStringList l;
  for (const auto& b : blockers) l << b.toHtmlEscaped();
  issues_->setText(l.isEmpty() ? QString()
                               : "<b>Problems (Launch is disabled):</b><br>" + l.join("<br>"));
  issues_->setVisible(!l.isEmpty());
  QStringList wl;
  for (const auto& wmsg : doc()->warnings(capacity))
    wl << QString::fromStdString(wmsg).toHtmlEscaped();
  warnings_->setText(wl.isEmpty() ? QString() : "<b>Warnings:</b><br>" + wl.join("<br>"));
  warnings_->setVisible(!wl.isEmpty());
  QStringList nl;
  for (const auto& n : doc()->estimateNotes()) nl << QString::fromStdString(n).toHtmlEscaped();
  notes_->setText(nl.isEmpty() ? QString() : "<b>About the estimate:</b><br>" + nl.join("<br>"));
  notes_->setVisible(!nl.isEmpty());
}

void ReviewPage::showEstimate() {
  const auto& est = doc()->estimate();
  if (!est) {
    estimate_->clear();
    return;
  }
  estimate_->setText(
      QStringLiteral("<b>%1</b> parameters · effective batch <b>%2</b> (%3 tokens/step) · "
                     "<b>%4 GFLOP</b> per step · peak device memory <b>%5</b> per rank. "
                     "Time per step is measured in the first steps and shown on the dashboard.")
          .arg(humanCount(static_cast<double>(est->params.total)))
          .arg(est->effective_batch)
          .arg(QLocale().toString(static_cast<qlonglong>(est->tokens_per_step)))
          .arg(est->flops_per_step / 1e9, 0, 'f', 2)
          .arg(formatBytes(static_cast<double>(est->peak_device))));
}

}  // namespace ts::gui
