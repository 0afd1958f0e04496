#pragma once
// Two-way bindings between option widgets and one key of the ConfigDocument: the widget
// writes through setValue(); every document change (preset, clone, import, another widget)
// is reflected back into the widget without feedback loops.
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSpinBox>
#include <QString>
#include <QStringList>

#include "trainscope/gui/ConfigDocument.h"

namespace ts::gui {

class ConfigBinder : public QObject {
  Q_OBJECT
 public:
  explicit ConfigBinder(ConfigDocument* doc, QObject* parent = nullptr);
  ConfigDocument* document() const { return doc_; }

  QSpinBox* intSpin(const char* path, int min, int max, const QString& tip, int step = 1);
  QDoubleSpinBox* doubleSpin(const char* path, double min, double max, int decimals,
                             const QString& tip, double step = 0.1);
  // Items as {label, value}; the value is stored as a JSON string.
  QComboBox* choice(const char* path, const QList<QPair<QString, QString>>& items,
                    const QString& tip);
  // Items as {label, value} with integer values.
  QComboBox* intChoice(const char* path, const QList<QPair<QString, int>>& items,
                       const QString& tip);
  QCheckBox* check(const char* path, const QString& label, const QString& tip);
  QLineEdit* text(const char* path, const QString& placeholder, const QString& tip);
  // Every widget created above carries its path as the "configPath" property (tests use it).

 private:
  void refreshAll();
  ConfigDocument* doc_;
  QList<std::function<void()>> refreshers_;
};

}  // namespace ts::gui
