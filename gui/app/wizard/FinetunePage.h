#pragma once
// The wizard's fine-tuning page: the base model (a checkpoint or a Hugging Face folder, said
// which before launch), LoRA adapters over the model's own modules, and distillation from a
// teacher checkpoint.
#include <string>
#include <vector>

#include "wizard/WizardPage.h"

class QComboBox;
class QHBoxLayout;

namespace ts::gui {

class RunRepository;

class FinetunePage : public WizardPage {
 public:
  explicit FinetunePage(ConfigBinder* binder);
  void refresh() override;
  // Re-lists the teacher choices: the checkpoints of past runs.
  void refreshTeachers(const RunRepository* repo);

 private:
  void addBaseGroup();
  void addBaseRow(QFormLayout* f);
  void addLoraGroup();
  void addDistillGroup();
  void addTeacherRow(QFormLayout* f);
  void refreshBaseKind();
  void refreshLoraTargets();
  void rebuildLoraBoxes(const std::vector<std::string>& modules);
  void writeLoraTargets();
  void refreshTeacherNote();

  QLabel* baseKind_ = nullptr;
  QLabel* loraNoBase_ = nullptr;
  QLabel* targetsWritten_ = nullptr;
  QWidget* targets_ = nullptr;
  QHBoxLayout* targetsLayout_ = nullptr;
  QComboBox* teacherPick_ = nullptr;
  QLabel* teacherNow_ = nullptr;
};

}  // namespace ts::gui
