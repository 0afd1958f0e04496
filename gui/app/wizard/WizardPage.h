#pragma once
// One page of the run wizard: a title, a hint and option groups over the wizard's shared
// ConfigBinder (and so its one ConfigDocument), with an inline label for the validation issues
// of the config sections the page edits. Also the small builders every page uses.
#include <string>
#include <utility>
#include <vector>

#include <QString>
#include <QStringList>
#include <QWidget>

#include "trainscope/core/config/Config.h"

class QFormLayout;
class QGroupBox;
class QLabel;
class QVBoxLayout;

namespace ts::gui {

class ConfigBinder;
class ConfigDocument;

// No Q_OBJECT: a page has no signals of its own, and without it the style sheet treats the
// page as the plain QWidget it draws like.
class WizardPage : public QWidget {
 public:
  WizardPage(ConfigBinder* binder, const QString& title, const QString& hint);

  // Follows a document change; the wizard calls every page's refresh before it shows issues.
  virtual void refresh() {}
  // Shows the issues whose key lies under the page's sections (see issueLabel).
  void showIssues(const std::vector<core::ConfigIssue>& issues);

 protected:
  ConfigBinder* binder() const { return binder_; }
  ConfigDocument* doc() const { return doc_; }
  // The page's column: title, hint, then what the page adds.
  QVBoxLayout* body() const { return body_; }
  // A hidden label listing the issues of keys under `sections` ("model" covers "model.layers").
  QLabel* issueLabel(QStringList sections);

 private:
  ConfigBinder* binder_;
  ConfigDocument* doc_;
  QVBoxLayout* body_;
  std::vector<std::pair<QLabel*, QStringList>> issueLabels_;
};

// A titled group box with a right-aligned form in it.
QGroupBox* formGroup(const QString& title, QFormLayout** form);
// A muted, wrapped explanation.
QLabel* hintLabel(const QString& text);
// "model.layers" for the issue at "/model/layers".
QString issuePath(const core::ConfigIssue& issue);
// What a model path holds, from its file names: a Hugging Face folder, a trainscope
// checkpoint, or nothing usable (said before launch rather than by the engine). `empty` is
// the text for an empty path.
QString describeModelPath(const std::string& path, const QString& empty);

}  // namespace ts::gui
