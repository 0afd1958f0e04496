#include "trainscope/gui/NumberFormat.h"

#include <cmath>

namespace ts::gui {

QString formatSignificant(double v, int digits) {
  if (!std::isfinite(v)) return QString::number(v);
  if (v == 0) return QStringLiteral("0");
  const double a = std::abs(v);
  if (a < 1e-3 || a >= 1e6) return QString::number(v, 'e', digits - 1);
  // Decimals so that the leading digit plus the decimals make `digits` significant ones.
  const int magnitude = int(std::floor(std::log10(a)));
  const int decimals = std::max(0, digits - 1 - magnitude);
  QString s = QString::number(v, 'f', decimals);
  // Rounding can carry into a new digit (9.99995 -> "10.0000"): print it once more.
  if (decimals > 0 && std::abs(s.toDouble()) >= std::pow(10.0, magnitude + 1))
    s = QString::number(v, 'f', decimals - 1);
  return s;
}

QString formatAccuracy(double fraction) {
  return QString::number(100.0 * fraction, 'f', 1) + QLatin1Char('%');
}

}  // namespace ts::gui
