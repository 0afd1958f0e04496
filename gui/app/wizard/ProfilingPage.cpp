#include "wizard/ProfilingPage.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QVBoxLayout>

#include "ConfigBinder.h"

namespace ts::gui {

ProfilingPage::ProfilingPage(ConfigBinder* binder)
    : WizardPage(binder, "Profiling, evaluation and checkpoints", "") {
  addProfilerGroup();
  addEvalGroup();
  body()->addWidget(
      issueLabel({"profile", "train.eval_every", "train.checkpoint_every", "train.seed"}));
  body()->addStretch(1);
}

void ProfilingPage::addProfilerGroup() {
  QFormLayout* f;
  auto* g = formGroup("Profiler", &f);
  f->addRow("",
            binder()->check(
                "profile.enabled", "Record a kernel timeline",
                "Host ranges on CPU, CUPTI kernels on GPU. Adds a little overhead in the profiled "
                "steps only."));
  f->addRow("Wait steps",
            binder()->intSpin("profile.wait", 0, 1000000, "Steps skipped before profiling."));
  f->addRow("Warmup steps",
            binder()->intSpin(
                "profile.warmup", 0, 1000000,
                "Traced but discarded: first-iteration effects (allocations, caches) stay out."));
  f->addRow(
      "Active steps",
      binder()->intSpin("profile.active", 1, 1000000,
                        "Steps recorded per window. More: a richer timeline, larger traces."));
  auto* repeat = binder()->intSpin("profile.repeat", 0, 1000000, "Windows (0 = until the end).");
  repeat->setSpecialValueText("until the end");
  f->addRow("Repeat", repeat);
  body()->addWidget(g);
}

void ProfilingPage::addEvalGroup() {
  QFormLayout* f;
  auto* e = formGroup("Evaluation and checkpoints", &f);
  f->addRow("Eval every",
            binder()->intSpin(
                "train.eval_every", 0, 100000000,
                "Steps between validation passes (0 = off). Frequent evals cost time.", 10));
  f->addRow(
      "Checkpoint every",
      binder()->intSpin(
          "train.checkpoint_every", 0, 100000000,
          "Steps between checkpoints (0 = only at the end). Disk space and a pause per save.", 10));
  f->addRow("Seed", binder()->intSpin("train.seed", 0, 2147483647, "Same seed, same run."));
  body()->addWidget(e);
}

}  // namespace ts::gui
