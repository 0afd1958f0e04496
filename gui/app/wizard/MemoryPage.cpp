#include "wizard/MemoryPage.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QLocale>
#include <QVBoxLayout>

#include "ConfigBinder.h"

namespace ts::gui {

MemoryPage::MemoryPage(ConfigBinder* binder)
    : WizardPage(binder, "Memory",
                 "Activations usually dominate: recompute them, store them compressed, or "
                 "use smaller micro-batches with accumulation. Watch the side panel.") {
  addActivationGroup();
  addBatchGroup();
  body()->addWidget(issueLabel({"memory", "attention", "train.micro_batch", "train.grad_accum"}));
  body()->addStretch(1);
}

void MemoryPage::addActivationGroup() {
  QFormLayout* f;
  auto* g = formGroup("Activations", &f);
  f->addRow("Checkpointing",
            binder()->choice(
                "memory.checkpointing",
                {{"None", "none"}, {"Every block", "all"}, {"Every k-th block", "every_k"}},
                "Keeps only block inputs and recomputes the rest in backward: far less activation "
                "memory for about one extra forward pass."));
  auto* k = binder()->intSpin(
      "memory.checkpoint_every", 0, 1024,
      "Checkpoint one block in k; 0 = sqrt(layers). Larger k: less recompute, more memory.");
  k->setSpecialValueText("√layers");
  f->addRow("k (every_k)", k);
  f->addRow(
      "Compression",
      binder()->choice(
          "memory.activation_compression",
          {{"None", "none"}, {"int8 (scaled)", "int8"}, {"Sparse (after ReLU)", "sparse"}},
          "Saved activations stored as int8 (4x smaller than fp32, small rounding error) or as "
          "bitmap + nonzeros (needs ReLU). Costs a (de)compression pass."));
  f->addRow(
      "Attention",
      binder()->choice("attention.impl",
                       {{"Naive (T×T scores)", "naive"}, {"Flash (tiled, O(T) memory)", "flash"}},
                       "Flash never stores the T×T score matrix: memory linear in sequence length, "
                       "recomputes scores in backward."));
  body()->addWidget(g);
}

void MemoryPage::addBatchGroup() {
  QFormLayout* f;
  auto* b = formGroup("Batch", &f);
  f->addRow("Micro-batch",
            binder()->intSpin("train.micro_batch", 1, 65536,
                              "Sequences per forward/backward. Activation memory grows with it."));
  f->addRow("Accumulation steps",
            binder()->intSpin(
                "train.grad_accum", 1, 65536,
                "Micro-batches summed before each optimizer step: a bigger effective batch at the "
                "memory of one micro-batch, more time per step."));
  effBatch_ = new QLabel;
  effBatch_->setObjectName("BigNumber");
  effBatch_->setToolTip("micro-batch × accumulation steps × ranks");
  f->addRow("Effective batch", effBatch_);
  body()->addWidget(b);
}

void MemoryPage::refresh() {
  const int64_t eb = doc()->effectiveBatch();
  const auto seq = doc()->value("model.seq_len");
  effBatch_->setText(QStringLiteral("%1 sequences · %2 tokens per step")
                         .arg(eb)
                         .arg(QLocale().toString(static_cast<qlonglong>(
                             eb * (seq.is_number() ? seq.get<int64_t>() : 0)))));
}

}  // namespace ts::gui
