#pragma once
// How the pages print measured values (losses, accuracies), so a converged loss of 1.088e-05
// does not read 0.0000 and two pages never print one number two ways.
#include <QString>

namespace ts::gui {

// `digits` significant digits; scientific below 1e-3 (and from 1e6), where fixed notation
// would need many leading or trailing zeros. Zero prints "0".
QString formatSignificant(double v, int digits = 4);

// An exact-match accuracy in [0, 1] as a percentage with one decimal ("99.6%").
QString formatAccuracy(double fraction);

}  // namespace ts::gui
