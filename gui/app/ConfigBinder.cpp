#include "ConfigBinder.h"

#include <cmath>

namespace ts::gui {

ConfigBinder::ConfigBinder(ConfigDocument* doc, QObject* parent) : QObject(parent), doc_(doc) {
  connect(doc_, &ConfigDocument::changed, this, &ConfigBinder::refreshAll);
}

void ConfigBinder::refreshAll() {
  for (auto& r : refreshers_) r();
}

QSpinBox* ConfigBinder::intSpin(const char* path, int min, int max, const QString& tip, int step) {
  auto* w = new QSpinBox;
  w->setRange(min, max);
  w->setSingleStep(step);
  w->setToolTip(tip);
  w->setProperty("configPath", path);
  w->setKeyboardTracking(false);
  w->setMinimumWidth(150);
  const std::string p = path;
  auto refresh = [this, w, p] {
    const auto v = doc_->value(p);
    QSignalBlocker b(w);
    if (v.is_number()) w->setValue(static_cast<int>(v.get<double>()));
  };
  refresh();
  refreshers_.push_back(refresh);
  connect(w, &QSpinBox::valueChanged, this, [this, p](int v) { doc_->setValue(p, v); });
  return w;
}

QDoubleSpinBox* ConfigBinder::doubleSpin(const char* path, double min, double max, int decimals,
                                         const QString& tip, double step) {
  auto* w = new QDoubleSpinBox;
  w->setRange(min, max);
  w->setDecimals(decimals);
  w->setSingleStep(step);
  w->setToolTip(tip);
  w->setProperty("configPath", path);
  w->setKeyboardTracking(false);
  w->setMinimumWidth(150);
  const std::string p = path;
  auto refresh = [this, w, p] {
    const auto v = doc_->value(p);
    QSignalBlocker b(w);
    if (v.is_number()) w->setValue(v.get<double>());
  };
  refresh();
  refreshers_.push_back(refresh);
  connect(w, &QDoubleSpinBox::valueChanged, this, [this, p](double v) { doc_->setValue(p, v); });
  return w;
}

QComboBox* ConfigBinder::choice(const char* path, const QList<QPair<QString, QString>>& items,
                                const QString& tip) {
  auto* w = new QComboBox;
  for (const auto& [label, value] : items) w->addItem(label, value);
  w->setToolTip(tip);
  w->setMinimumWidth(150);
  w->setProperty("configPath", path);
  const std::string p = path;
  auto refresh = [this, w, p] {
    const auto v = doc_->value(p);
    QSignalBlocker b(w);
    if (v.is_string()) {
      int i = w->findData(QString::fromStdString(v.get<std::string>()));
      if (i >= 0) w->setCurrentIndex(i);
    }
  };
  refresh();
  refreshers_.push_back(refresh);
  connect(w, &QComboBox::currentIndexChanged, this,
          [this, w, p](int) { doc_->setValue(p, w->currentData().toString().toStdString()); });
  return w;
}

QComboBox* ConfigBinder::intChoice(const char* path, const QList<QPair<QString, int>>& items,
                                   const QString& tip) {
  auto* w = new QComboBox;
  for (const auto& [label, value] : items) w->addItem(label, value);
  w->setToolTip(tip);
  w->setMinimumWidth(150);
  w->setProperty("configPath", path);
  const std::string p = path;
  auto refresh = [this, w, p] {
    const auto v = doc_->value(p);
    QSignalBlocker b(w);
    if (v.is_number()) {
      int i = w->findData(static_cast<int>(v.get<double>()));
      if (i >= 0) w->setCurrentIndex(i);
    }
  };
  refresh();
  refreshers_.push_back(refresh);
  connect(w, &QComboBox::currentIndexChanged, this,
          [this, w, p](int) { doc_->setValue(p, w->currentData().toInt()); });
  return w;
}

QCheckBox* ConfigBinder::check(const char* path, const QString& label, const QString& tip) {
  auto* w = new QCheckBox(label);
  w->setToolTip(tip);
  w->setProperty("configPath", path);
  const std::string p = path;
  auto refresh = [this, w, p] {
    const auto v = doc_->value(p);
    QSignalBlocker b(w);
    if (v.is_boolean()) w->setChecked(v.get<bool>());
  };
  refresh();
  refreshers_.push_back(refresh);
  connect(w, &QCheckBox::toggled, this, [this, p](bool v) { doc_->setValue(p, v); });
  return w;
}

QLineEdit* ConfigBinder::text(const char* path, const QString& placeholder, const QString& tip) {
  auto* w = new QLineEdit;
  w->setPlaceholderText(placeholder);
  w->setToolTip(tip);
  w->setProperty("configPath", path);
  const std::string p = path;
  auto refresh = [this, w, p] {
    const auto v = doc_->value(p);
    QSignalBlocker b(w);
    const QString s = v.is_string() ? QString::fromStdString(v.get<std::string>()) : QString();
    if (w->text() != s) w->setText(s);
  };
  refresh();
  refreshers_.push_back(refresh);
  connect(w, &QLineEdit::textEdited, this,
          [this, p](const QString& t) { doc_->setValue(p, t.toStdString()); });
  return w;
}

}  // namespace ts::gui
