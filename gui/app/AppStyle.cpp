#include "AppStyle.h"

#include <QApplication>
#include <QFile>
#include <QIcon>
#include <QProxyStyle>
#include <QStyleFactory>
#include <QStyleOptionHeader>

namespace ts::gui {

namespace {

// QHeaderView hands the style SortUp for a descending column (a Windows convention), so
// Fusion draws ▲ over "newest first". Here the arrow points the way the values run: ▼ for
// descending, ▲ for ascending.
class HeaderArrowStyle : public QProxyStyle {
 public:
  using QProxyStyle::QProxyStyle;
  void drawPrimitive(PrimitiveElement pe, const QStyleOption* opt, QPainter* p,
                     const QWidget* w) const override {
    if (pe == PE_IndicatorHeaderArrow)
      if (const auto* h = qstyleoption_cast<const QStyleOptionHeader*>(opt);
          h && h->sortIndicator != QStyleOptionHeader::None) {
        QStyleOptionHeader flipped(*h);
        flipped.sortIndicator = h->sortIndicator == QStyleOptionHeader::SortUp
                                    ? QStyleOptionHeader::SortDown
                                    : QStyleOptionHeader::SortUp;
        QProxyStyle::drawPrimitive(pe, &flipped, p, w);
        return;
      }
    QProxyStyle::drawPrimitive(pe, opt, p, w);
  }
};

}  // namespace

void applyAppStyle(QApplication& app) {
  // Fusion draws the same everywhere (and under Xvfb), so screenshots match what users see.
  if (auto* s = QStyleFactory::create("Fusion")) QApplication::setStyle(new HeaderArrowStyle(s));
  QFile qss(":/style/trainscope.qss");
  if (qss.open(QIODevice::ReadOnly)) app.setStyleSheet(QString::fromUtf8(qss.readAll()));
  app.setWindowIcon(QIcon(":/icons/trainscope.png"));
}

}  // namespace ts::gui
