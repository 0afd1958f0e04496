#include "AppStyle.h"

#include <QApplication>
#include <QFile>
#include <QIcon>
#include <QStyleFactory>

namespace ts::gui {

void applyAppStyle(QApplication& app) {
  // Fusion draws the same everywhere (and under Xvfb), so screenshots match what users see.
  if (auto* s = QStyleFactory::create("Fusion")) QApplication::setStyle(s);
  QFile qss(":/style/trainscope.qss");
  if (qss.open(QIODevice::ReadOnly)) app.setStyleSheet(QString::fromUtf8(qss.readAll()));
  app.setWindowIcon(QIcon(":/icons/trainscope.png"));
}

}  // namespace ts::gui
