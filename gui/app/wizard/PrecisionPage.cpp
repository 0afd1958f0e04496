#include "wizard/PrecisionPage.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QVBoxLayout>

#include "ConfigBinder.h"

namespace ts::gui {

PrecisionPage::PrecisionPage(ConfigBinder* binder)
    : WizardPage(binder, "Precision",
                 "Lower precision halves (or quarters) the bytes per value and speeds up "
                 "math on hardware that has it; fp16 needs loss scaling to keep small "
                 "gradients from underflowing.") {
  addPolicyGroup();
  addGemmGroup();
  addLossScaleGroup();
  addFp8Group();
  body()->addWidget(issueLabel({"precision"}));
  body()->addStretch(1);
}

void PrecisionPage::addPolicyGroup() {
  QFormLayout* f;
  auto* g = formGroup("Number format", &f);
  f->addRow("Policy",
            binder()->choice(
                "precision.policy",
                {{"fp32 (reference)", "fp32"},
                 {"bf16 mixed (fp32 master weights)", "bf16"},
                 {"fp16 mixed + loss scaling", "fp16"},
                 {"fp8 (E4M3/E5M2, scaled)", "fp8"},
                 {"pure bf16 (no fp32 master)", "pure_bf16"}},
                "fp32: 4 bytes, exact reference. bf16: 2-byte activations, fp32 master copy. fp16: "
                "more mantissa, less range, needs loss scaling. fp8: 1 byte, scaled per tensor. "
                "pure bf16: smallest, may stall on tiny updates."));
  body()->addWidget(g);
}

void PrecisionPage::addGemmGroup() {
  QFormLayout* f;
  gemm_ = formGroup("GEMMs (bf16, pure bf16)", &f);
  f->addRow("Matrix multiplies",
            binder()->choice(
                "precision.gemm",
                {{"Automatic (bf16 where the CPU has AMX)", "auto"},
                 {"fp32 on upcast copies", "fp32"},
                 {"bf16 operands, fp32 accumulation", "bf16"}},
                "bf16 GEMMs multiply the bf16 weights with bf16-rounded inputs: 3-7x faster on "
                "AMX, emulated (slower) on CPUs without bf16 instructions."));
  body()->addWidget(gemm_);
}

void PrecisionPage::addLossScaleGroup() {
  QFormLayout* f;
  lossScale_ = formGroup("Loss scaling (fp16)", &f);
  f->addRow("Mode",
            binder()->choice(
                "precision.loss_scale.mode",
                {{"Dynamic (grow / back off)", "dynamic"}, {"Static", "static"}},
                "Dynamic raises the scale until an overflow, then halves it and skips that step."));
  f->addRow("Initial scale",
            binder()->doubleSpin("precision.loss_scale.init", 1, 16777216, 0,
                                 "Start high: the first overflows back it off quickly.", 1024));
  f->addRow(
      "Growth interval",
      binder()->intSpin(
          "precision.loss_scale.growth_interval", 1, 1000000,
          "Steps without overflow before the scale doubles. Short: more skipped steps.", 100));
  f->addRow("Static scale", binder()->doubleSpin("precision.loss_scale.static_scale", 1, 16777216,
                                                 0, "Used only in static mode.", 128));
  body()->addWidget(lossScale_);
}

void PrecisionPage::addFp8Group() {
  QFormLayout* f;
  fp8_ = formGroup("fp8", &f);
  f->addRow("Scaling recipe",
            binder()->choice(
                "precision.fp8.recipe",
                {{"Delayed (amax history)", "delayed"}, {"Blockwise", "blockwise"}},
                "Delayed uses past maxima (cheap, one step stale); blockwise scales each block "
                "(more accurate, more scale storage)."));
  f->addRow("Format",
            binder()->choice(
                "precision.fp8.format",
                {{"Hybrid: E4M3 forward, E5M2 gradients", "hybrid"}, {"E4M3 everywhere", "e4m3"}},
                "E5M2 has the range gradients need; E4M3 the precision activations need."));
  f->addRow("amax history",
            binder()->intSpin("precision.fp8.amax_history", 1, 100000,
                              "Steps of maxima the delayed recipe looks back over."));
  body()->addWidget(fp8_);
}

void PrecisionPage::refresh() {
  const auto pol = doc()->value("precision.policy");
  gemm_->setEnabled(pol == "bf16" || pol == "pure_bf16");
  lossScale_->setEnabled(pol == "fp16");
  fp8_->setEnabled(pol == "fp8");
}

}  // namespace ts::gui
