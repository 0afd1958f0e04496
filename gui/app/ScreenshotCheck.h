#pragma once
// Checks on a grabbed screenshot that can fail: a named widget is visible and not blank in the
// image, a chart's plotted points lie inside its plot area and are drawn in the series' colour,
// an expected text is on screen. Used by the screenshot tour (scripts/screenshots.sh) and by
// the screenshot tests, so a blank page or an empty chart never ships as a picture.
#include <QImage>
#include <QString>
#include <QStringList>

class QWidget;

namespace ts::gui {

class ChartView;

// The window as the screen shows it (the X server's pixels under Xvfb), else rendered by Qt
// (offscreen platform).
QImage grabShot(QWidget* window);

class ScreenshotCheck {
 public:
  ScreenshotCheck(QWidget* root, QImage image);
  // w is visible, inside the image, and its pixels are not one flat colour.
  ScreenshotCheck& widget(const QWidget* w, const QString& name);
  // Every visible, opaque series with at least minPoints points: its points map inside the plot
  // area and at least 80% of them have a pixel of the series' colour (or of a series drawn
  // over it) within 3 px.
  ScreenshotCheck& chart(const ChartView* c, const QString& name, int minPoints = 2);
  // Some visible label, button, group box, combo box, tab, line of text or item view cell
  // contains `needle`.
  ScreenshotCheck& text(const QString& needle);
  ScreenshotCheck& noText(const QString& needle);

  const QStringList& problems() const { return problems_; }
  bool ok() const { return problems_.isEmpty(); }
  // Every visible text the checks search, one per entry (for messages).
  QStringList visibleTexts() const;

 private:
  QWidget* root_;
  QImage image_;
  QStringList problems_;
};

}  // namespace ts::gui
