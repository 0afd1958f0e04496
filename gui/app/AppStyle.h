#pragma once
// One look for the app, its tests and its benchmark: Fusion (sort arrows pointing the way the
// values run) + the embedded style sheet.
class QApplication;
namespace ts::gui {
void applyAppStyle(QApplication& app);
}
