#include "wizard/FinetunePage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QVBoxLayout>

#include "ConfigBinder.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/gui/RunRepository.h"

namespace ts::gui {

FinetunePage::FinetunePage(ConfigBinder* binder)
    : WizardPage(binder, "Fine-tuning and distillation",
                 "Start from a checkpoint and train small adapters instead of every weight, "
                 "or learn from a teacher's softened predictions.") {
  addBaseGroup();
  addLoraGroup();
  addDistillGroup();
  body()->addWidget(issueLabel({"finetune", "distill"}));
  body()->addStretch(1);
}

void FinetunePage::addBaseGroup() {
  QFormLayout* f;
  auto* g = formGroup("Base model", &f);
  addBaseRow(f);
  // What the chosen path is (a cheap look at two file names, no weights read).
  baseKind_ = new QLabel;
  baseKind_->setObjectName("BaseKind");
  baseKind_->setWordWrap(true);
  f->addRow("", baseKind_);
  f->addRow(
      "Base weights",
      binder()->choice(
          "finetune.base_quant", {{"Full precision", "none"}, {"NF4 4-bit (QLoRA)", "nf4"}},
          "NF4 stores the frozen base in half a byte per weight (needs LoRA): 8x smaller than "
          "fp32, small quantization error."));
  body()->addWidget(g);
}

void FinetunePage::addBaseRow(QFormLayout* f) {
  auto* baseRow = new QHBoxLayout;
  baseRow->addWidget(
      binder()->text("finetune.base_checkpoint", "empty = train from scratch",
                     "A trainscope checkpoint or a Hugging Face model folder (config.json + "
                     "model.safetensors) whose weights the run starts from."),
      1);
  auto* browse = new QPushButton("Checkpoint…");
  browse->setToolTip("A checkpoint's state.json");
  baseRow->addWidget(browse);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString fn =
        QFileDialog::getOpenFileName(this, "Base checkpoint", {}, "Checkpoints (state.json)");
    if (!fn.isEmpty()) doc()->setValue("finetune.base_checkpoint", fn.toStdString());
  });
  auto* folder = new QPushButton("Folder…");
  folder->setObjectName("BaseFolder");
  folder->setToolTip("A Hugging Face model folder or a checkpoint directory");
  baseRow->addWidget(folder);
  connect(folder, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Base model folder");
    if (!dir.isEmpty()) doc()->setValue("finetune.base_checkpoint", dir.toStdString());
  });
  f->addRow("Base", baseRow);
}

void FinetunePage::addLoraGroup() {
  QFormLayout* f;
  auto* l = formGroup("LoRA adapters", &f);
  f->addRow("Rank r",
            binder()->intSpin(
                "finetune.lora.r", 0, 1024,
                "0 = off. Adapter size grows with r; the base stays frozen (no gradients, no "
                "optimizer state)."));
  f->addRow("Alpha", binder()->doubleSpin("finetune.lora.alpha", 0.0, 1024.0, 1,
                                          "Scale of the adapter update (alpha / r).", 1));
  f->addRow("Dropout", binder()->doubleSpin("finetune.lora.dropout", 0.0, 0.9, 2,
                                            "Dropout on the adapter input.", 0.05));
  f->addRow("Scaling", binder()->check("finetune.lora.use_rslora", "rsLoRA: alpha / sqrt(r)",
                                       "Rank-stabilized scaling: alpha / sqrt(r) instead of "
                                       "alpha / r (keeps the update's size as r grows)."));
  // The targets are the model's own modules (PEFT's target names), rebuilt when the
  // architecture changes; a short name in the config (q, v, ...) checks the modules it selects.
  targets_ = new QWidget;
  targets_->setObjectName("LoraTargets");
  targetsLayout_ = new QHBoxLayout(targets_);
  targetsLayout_->setContentsMargins(0, 0, 0, 0);
  f->addRow("Targets", targets_);
  // The config's own names: a short name (q, v) checks a fused module (gpt2's c_attn), so the
  // boxes alone would not say what the run receives.
  targetsWritten_ = new QLabel;
  targetsWritten_->setObjectName("LoraTargetsWritten");
  targetsWritten_->setWordWrap(true);
  f->addRow("", targetsWritten_);
  loraNoBase_ = new QLabel;
  loraNoBase_->setObjectName("LoraNoBase");
  loraNoBase_->setWordWrap(true);
  f->addRow("", loraNoBase_);
  body()->addWidget(l);
}

void FinetunePage::addDistillGroup() {
  QFormLayout* f;
  auto* d = formGroup("Distillation", &f);
  addTeacherRow(f);
  f->addRow("Teacher storage",
            binder()->choice("distill.teacher_dtype",
                             {{"Like the run (auto)", "auto"},
                              {"fp32", "fp32"},
                              {"bf16", "bf16"},
                              {"NF4 4-bit", "nf4"}},
                             "How the frozen teacher is kept: NF4 stores its linear layers in "
                             "about half a byte per weight."));
  f->addRow("Temperature",
            binder()->doubleSpin(
                "distill.temperature", 0.1, 100.0, 2,
                "Softens both distributions; higher passes more of the teacher's ranking.", 0.5));
  f->addRow(
      "KL weight α",
      binder()->doubleSpin("distill.alpha", 0.0, 1.0, 2,
                           "Mix of teacher KL (α) and hard-label cross-entropy (1 − α).", 0.05));
  teacherNow_ = new QLabel;
  teacherNow_->setObjectName("Muted");
  teacherNow_->setWordWrap(true);
  f->addRow("", teacherNow_);
  body()->addWidget(d);
}

void FinetunePage::addTeacherRow(QFormLayout* f) {
  teacherPick_ = new QComboBox;
  teacherPick_->setToolTip(
      "A checkpoint from a past run. The teacher runs forward only: its "
      "weights cost memory, no gradients.");
  auto* teacherRow = new QHBoxLayout;
  teacherRow->addWidget(teacherPick_, 1);
  auto* tb = new QPushButton("Browse…");
  teacherRow->addWidget(tb);
  f->addRow("Teacher", teacherRow);
  connect(teacherPick_, &QComboBox::activated, this, [this](int) {
    doc()->setValue("distill.teacher_checkpoint",
                    teacherPick_->currentData().toString().toStdString());
  });
  connect(tb, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, "Teacher: checkpoint or model folder");
    if (!dir.isEmpty()) doc()->setValue("distill.teacher_checkpoint", dir.toStdString());
  });
}

void FinetunePage::refreshTeachers(const RunRepository* repo) {
  teacherPick_->clear();
  teacherPick_->addItem("No teacher (distillation off)", QString());
  if (repo)
    for (const auto& c : repo->checkpoints())
      teacherPick_->addItem(QStringLiteral("#%1 %2 · step %3")
                                .arg(c.runId)
                                .arg(QString::fromStdString(c.runName))
                                .arg(c.step),
                            QString::fromStdString(c.path));
}

void FinetunePage::refresh() {
  refreshBaseKind();
  refreshLoraTargets();
  refreshTeacherNote();
}

void FinetunePage::refreshBaseKind() {
  const auto v = doc()->value("finetune.base_checkpoint");
  baseKind_->setText(describeModelPath(v.is_string() ? v.get<std::string>() : std::string(),
                                       "Training from scratch (random init)."));
}

// One box per module of the chosen architecture, checked as the config's targets select it.
void FinetunePage::refreshLoraTargets() {
  ts::core::ModelConfig model;
  const auto archValue = doc()->value("model.arch");
  if (archValue.is_string()) model.arch = archValue.get<std::string>();
  std::vector<std::string> chosen;
  const auto tv = doc()->value("finetune.lora.targets");
  if (tv.is_array())
    for (const auto& x : tv)
      if (x.is_string()) chosen.push_back(x.get<std::string>());
  const auto arch = ts::core::archSpecOf(model, 2);
  const auto modules = ts::core::loraModules(arch);
  auto boxes = targets_->findChildren<QCheckBox*>();
  bool same = int(boxes.size()) == int(modules.size());
  for (size_t i = 0; same && i < modules.size(); ++i)
    same = boxes[int(i)]->property("loraTarget").toString().toStdString() == modules[i];
  if (!same) {
    rebuildLoraBoxes(modules);
    boxes = targets_->findChildren<QCheckBox*>();
  }
  QStringList selected, names;
  for (auto* c : boxes) {
    QSignalBlocker b(c);
    const std::string m = c->property("loraTarget").toString().toStdString();
    c->setChecked(ts::core::loraTargets(chosen, arch, m));
    if (c->isChecked()) selected << QString::fromStdString(m);
  }
  for (const auto& n : chosen) names << QString::fromStdString(n);
  const bool on = doc()->value("finetune.lora.r").is_number() &&
                  doc()->value("finetune.lora.r").get<double>() > 0;
  QString t = QStringLiteral("The config gets targets: [%1]").arg(names.join(", "));
  if (names != selected)
    t += QStringLiteral(", which select %1")
             .arg(selected.isEmpty() ? "no module" : selected.join(", "));
  targetsWritten_->setText(t);
  const auto base = doc()->value("finetune.base_checkpoint");
  const bool noBase = !base.is_string() || base.get<std::string>().empty();
  loraNoBase_->setText(
      "LoRA without a base model: the adapters train on top of frozen random weights, so the "
      "run learns little. Choose a base above, or set the rank to 0 to train every weight.");
  loraNoBase_->setVisible(on && noBase);
}

void FinetunePage::rebuildLoraBoxes(const std::vector<std::string>& modules) {
  for (auto* c : targets_->findChildren<QCheckBox*>()) delete c;
  while (targetsLayout_->count() > 0) delete targetsLayout_->takeAt(0);
  for (const auto& m : modules) {
    auto* cb = new QCheckBox(QString::fromStdString(m));
    cb->setToolTip(
        "Adapt this module. More targets: more adapter parameters, usually better "
        "quality.");
    cb->setProperty("loraTarget", QString::fromStdString(m));
    targetsLayout_->addWidget(cb);
    connect(cb, &QCheckBox::toggled, this, [this] { writeLoraTargets(); });
  }
  targetsLayout_->addStretch(1);
}

void FinetunePage::writeLoraTargets() {
  nlohmann::json arr = nlohmann::json::array();
  for (auto* c : targets_->findChildren<QCheckBox*>())
    if (c->isChecked()) arr.push_back(c->property("loraTarget").toString().toStdString());
  doc()->setValue("finetune.lora.targets", arr);
}

void FinetunePage::refreshTeacherNote() {
  const auto t = doc()->value("distill.teacher_checkpoint");
  const QString s = t.is_string() ? QString::fromStdString(t.get<std::string>()) : QString();
  teacherNow_->setText(s.isEmpty() ? "Distillation is off."
                                   : describeModelPath(s.toStdString(), QString()));
}

}  // namespace ts::gui
