// GoogleTest main with a QApplication (widgets need one); offscreen unless told otherwise.
#include <gtest/gtest.h>
#include <QApplication>
#include <QFile>

#include "AppStyle.h"

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  ts::gui::applyAppStyle(app);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
