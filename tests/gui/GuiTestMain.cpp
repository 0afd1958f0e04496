// GoogleTest main with a QApplication (widgets need one); offscreen unless told otherwise.
#include <QApplication>
#include <QFile>
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  QFile qss(":/style/trainscope.qss");
  if (qss.open(QIODevice::ReadOnly)) app.setStyleSheet(QString::fromUtf8(qss.readAll()));
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
