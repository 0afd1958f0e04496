#pragma once
// The wizard's "Model & data" page: the decoder's shape (or a Hugging Face folder that sets
// it), the parameter count, the training data and a preview of its first samples.
#include "trainscope/gui/HfFolderInfo.h"
#include "wizard/WizardPage.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;

namespace ts::gui {

class ModelPage : public WizardPage {
 public:
  explicit ModelPage(ConfigBinder* binder);

  // "Hugging Face folder…": model.* from the folder's config.json and
  // finetune.base_checkpoint = the folder. Returns the error text (empty on success; the
  // document is untouched on error).
  QString openHfFolder(const QString& path);
  void refresh() override;

 private:
  void addModelGroup();
  void addHfRows(QFormLayout* f);
  void addShapeRows(QFormLayout* f);
  void addDataGroup();
  void addPreviewGroup();
  void refreshHfInfo();
  void refreshParamCount();
  void refreshDataPreview();

  QLabel* paramCount_ = nullptr;
  QLabel* hfInfo_ = nullptr;
  QPushButton* applyHf_ = nullptr;
  HfFolderCache hfFolders_;
  QPlainTextEdit* dataPreview_ = nullptr;
};

}  // namespace ts::gui
