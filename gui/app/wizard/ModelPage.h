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
  // The run becomes a fine-tune of it: name, notes and tags describe the folder.
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
  void refreshActivation();
  QString applyFolder(const QString& path, bool asBase);
  // What the buttons do: the folder's headers are read on a worker thread, then applied.
  void applyFolderInBackground(const QString& path, bool asBase);
  QString applyFolderInfo(const HfFolderInfo& hf, bool asBase);

  QLabel* paramCount_ = nullptr;
  QLabel* hfInfo_ = nullptr;
  QPushButton* applyHf_ = nullptr;
  HfFolderCache hfFolders_;
  QPlainTextEdit* dataPreview_ = nullptr;
  QFormLayout* shapeForm_ = nullptr;
  QWidget* activation_ = nullptr;
  QLabel* activationFixed_ = nullptr;
  QLabel* dataNote_ = nullptr;
};

}  // namespace ts::gui
