#include "ScreenshotCheck.h"

#include <cmath>
#include <set>
#include <vector>

#include <QAbstractButton>
#include <QAbstractItemView>
#include <QComboBox>
#include <QGroupBox>
#include <QGuiApplication>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMainWindow>
#include <QPlainTextEdit>
#include <QScreen>
#include <QStatusBar>
#include <QTabBar>
#include <QTextDocument>
#include <QWindow>

#include "ChartView.h"

namespace ts::gui {

QImage grabShot(QWidget* window) {
  window->raise();
  window->repaint();  // paint what the widgets say now: xcb grabs the window's last frame
  if (QScreen* screen = window->screen(); screen && QGuiApplication::platformName() == "xcb") {
    const QImage img = screen->grabWindow(window->winId()).toImage();
    if (!img.isNull() && img.width() >= window->width() / 2) return img;
  }
  return window->grab().toImage();
}

ScreenshotCheck::ScreenshotCheck(QWidget* root, QImage image)
    : root_(root), image_(std::move(image).convertToFormat(QImage::Format_RGB32)) {
  if (image_.isNull()) problems_ << "the screenshot is empty";
}

ScreenshotCheck& ScreenshotCheck::widget(const QWidget* w, const QString& name) {
  if (!w) {
    problems_ << name + ": missing";
    return *this;
  }
  if (!w->isVisibleTo(root_) || !w->isVisible()) {
    problems_ << name + ": not visible";
    return *this;
  }
  const QRect r = QRect(w->mapTo(root_, QPoint(0, 0)), w->size()).intersected(image_.rect());
  if (r.width() < 8 || r.height() < 8) {
    problems_ << name + QStringLiteral(": not on screen (%1x%2)").arg(r.width()).arg(r.height());
    return *this;
  }
  std::set<QRgb> colours;
  for (int y = r.top(); y <= r.bottom() && colours.size() < 4; y += 3)
    for (int x = r.left(); x <= r.right() && colours.size() < 4; x += 3)
      colours.insert(image_.pixel(x, y));
  if (colours.size() < 4) problems_ << name + ": blank (one flat colour)";
  return *this;
}

ScreenshotCheck& ScreenshotCheck::chart(const ChartView* c, const QString& name, int minPoints) {
  widget(c, name);
  if (!c || !c->isVisible()) return *this;
  const QRect plot = c->plotRectIn(root_);
  if (plot.width() < 20 || plot.height() < 20) {
    problems_ << name + ": no plot area";
    return *this;
  }
  int checked = 0;
  for (int s = 0; s < c->seriesCount(); ++s) {
    const QColor colour = c->seriesColor(s);
    const auto points = c->drawnPoints(s);
    if (!c->seriesVisible(s) || colour.alpha() < 255 || points.size() < minPoints) continue;
    ++checked;
    // Series drawn later paint over this one where the curves coincide (two runs that agree).
    std::vector<QColor> accepted = {colour};
    for (int t = s + 1; t < c->seriesCount(); ++t)
      if (c->seriesVisible(t) && c->seriesColor(t).alpha() == 255)
        accepted.push_back(c->seriesColor(t));
    int inside = 0, drawn = 0, tried = 0;
    const int stride = std::max<int>(1, static_cast<int>(points.size()) / 40);
    for (int i = 0; i < points.size(); i += stride) {
      if (!std::isfinite(points[i].y())) continue;
      ++tried;
      const QPoint p = c->positionIn(root_, points[i], s);
      if (!plot.adjusted(-2, -2, 2, 2).contains(p)) continue;
      ++inside;
      bool hit = false;
      for (int dy = -3; dy <= 3 && !hit; ++dy)
        for (int dx = -3; dx <= 3 && !hit; ++dx) {
          const QPoint q(p.x() + dx, p.y() + dy);
          if (!image_.rect().contains(q)) continue;
          const QColor px(image_.pixel(q));
          for (const QColor& a : accepted)
            hit = hit || std::abs(px.red() - a.red()) + std::abs(px.green() - a.green()) +
                                 std::abs(px.blue() - a.blue()) <
                             90;
        }
      drawn += hit;
    }
    if (tried == 0) continue;
    if (inside < tried)
      problems_ << name + QStringLiteral(": %1 of %2 points of series %3 outside the plot area")
                              .arg(tried - inside)
                              .arg(tried)
                              .arg(s);
    if (drawn * 10 < tried * 8)
      problems_ << name + QStringLiteral(": only %1 of %2 points of series %3 drawn in its colour")
                              .arg(drawn)
                              .arg(tried)
                              .arg(s);
  }
  if (checked == 0) problems_ << name + ": no plotted series";
  return *this;
}

QStringList ScreenshotCheck::visibleTexts() const {
  QStringList out;
  auto shown = [&](const QWidget* w) { return w->isVisible() && w->isVisibleTo(root_); };
  if (auto* mw = qobject_cast<QMainWindow*>(root_))
    if (mw->statusBar()) out << mw->statusBar()->currentMessage();
  for (auto* l : root_->findChildren<QLabel*>()) {
    if (!shown(l)) continue;
    if (Qt::mightBeRichText(l->text())) {
      QTextDocument d;
      d.setHtml(l->text());
      out << d.toPlainText();
    } else {
      out << l->text();
    }
  }
  for (auto* b : root_->findChildren<QAbstractButton*>())
    if (shown(b)) out << b->text();
  for (auto* g : root_->findChildren<QGroupBox*>())
    if (shown(g)) out << g->title();
  for (auto* c : root_->findChildren<QComboBox*>())
    if (shown(c)) out << c->currentText();
  for (auto* e : root_->findChildren<QLineEdit*>())
    if (shown(e)) out << e->text();
  for (auto* t : root_->findChildren<QTabBar*>())
    if (shown(t))
      for (int i = 0; i < t->count(); ++i) out << t->tabText(i);
  for (auto* p : root_->findChildren<QPlainTextEdit*>())
    if (shown(p)) out << p->toPlainText();
  for (auto* v : root_->findChildren<QAbstractItemView*>()) {
    if (!shown(v) || !v->model()) continue;
    const auto* m = v->model();
    for (int c = 0; c < m->columnCount(); ++c) out << m->headerData(c, Qt::Horizontal).toString();
    for (int r = 0; r < std::min(m->rowCount(), 200); ++r)
      for (int c = 0; c < m->columnCount(); ++c) out << m->index(r, c).data().toString();
  }
  return out;
}

ScreenshotCheck& ScreenshotCheck::text(const QString& needle) {
  for (const auto& t : visibleTexts())
    if (t.contains(needle)) return *this;
  problems_ << QStringLiteral("text \"%1\" not on screen").arg(needle);
  return *this;
}

ScreenshotCheck& ScreenshotCheck::noText(const QString& needle) {
  for (const auto& t : visibleTexts())
    if (t.contains(needle)) {
      problems_ << QStringLiteral("text \"%1\" on screen: %2").arg(needle, t.left(120));
      break;
    }
  return *this;
}

}  // namespace ts::gui
