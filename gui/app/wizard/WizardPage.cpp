#include "wizard/WizardPage.h"

#include <QDir>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QVBoxLayout>

#include "ConfigBinder.h"

namespace ts::gui {

WizardPage::WizardPage(ConfigBinder* binder, const QString& title, const QString& hint)
    : binder_(binder), doc_(binder->document()) {
  auto* v = new QVBoxLayout(this);
  v->setContentsMargins(4, 0, 8, 0);
  v->setSpacing(10);
  auto* t = new QLabel(title);
  t->setObjectName("PageTitle");
  v->addWidget(t);
  if (!hint.isEmpty()) {
    auto* h = new QLabel(hint);
    h->setObjectName("PageHint");
    h->setWordWrap(true);
    v->addWidget(h);
  }
  body_ = v;
}

QLabel* WizardPage::issueLabel(QStringList sections) {
  auto* l = new QLabel;
  l->setObjectName("Issue");
  l->setWordWrap(true);
  l->setVisible(false);
  l->setTextFormat(Qt::RichText);
  issueLabels_.push_back({l, sections});
  return l;
}

void WizardPage::showIssues(const std::vector<core::ConfigIssue>& issues) {
  for (auto& [label, sections] : issueLabels_) {
    QStringList lines;
    for (const auto& i : issues) {
      const QString p = issuePath(i);
      for (const QString& s : sections)
        if (p == s || p.startsWith(s + '.') || p.startsWith(s + '[')) {
          lines << QStringLiteral("<b>%1</b>: %2")
                       .arg(p.toHtmlEscaped(), QString::fromStdString(i.message).toHtmlEscaped());
          break;
        }
    }
    label->setText(lines.join("<br>"));
    label->setVisible(!lines.isEmpty());
  }
}

QGroupBox* formGroup(const QString& title, QFormLayout** form) {
  auto* g = new QGroupBox(title);
  *form = new QFormLayout(g);
  (*form)->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
  (*form)->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
  (*form)->setHorizontalSpacing(14);
  (*form)->setVerticalSpacing(8);
  return g;
}

QLabel* hintLabel(const QString& text) {
  auto* l = new QLabel(text);
  l->setObjectName("Muted");
  l->setWordWrap(true);
  return l;
}

QString issuePath(const core::ConfigIssue& i) {
  QString p = QString::fromStdString(i.path);
  if (p.startsWith('/')) p = p.mid(1);
  p.replace('/', '.');
  return p;
}

QString describeModelPath(const std::string& path, const QString& empty) {
  if (path.empty()) return empty;
  QFileInfo fi(QString::fromStdString(path));
  QDir dir(fi.isDir() ? fi.absoluteFilePath() : fi.absolutePath());
  if (dir.exists("config.json") && !dir.exists("state.json"))
    return "Hugging Face model folder: " + dir.absolutePath() +
           (dir.exists("model.safetensors") || dir.exists("model.safetensors.index.json")
                ? QString()
                : QStringLiteral(" — no model.safetensors in it"));
  if (dir.exists("state.json")) return "trainscope checkpoint: " + dir.absolutePath();
  return "Not found or not a model: " + QString::fromStdString(path) +
         " (expected a checkpoint directory or a folder with config.json)";
}

}  // namespace ts::gui
