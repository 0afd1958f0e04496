#include "trainscope/kernels/DynamicMap.h"

#include <algorithm>
#include <cmath>

namespace ts::kernels {

namespace {
// torch.linspace(0.1, 1, steps) in float32: start + i * step, the last element exactly `end`.
std::vector<float> linspace(float start, float end, int steps) {
  std::vector<float> v(static_cast<size_t>(steps));
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int half = steps / 2;
  for (int i = 0; i < steps; ++i)  // torch fills the upper half from the end, symmetrically
    v[size_t(i)] = i < half ? start + step * static_cast<float>(i)
                            : end - step * static_cast<float>(steps - 1 - i);
  return v;
}
}  // namespace

std::vector<float> dynamicMap(bool isSigned) {
  const int maxExponentBits = 7, totalBits = 8;
  const int nonSignBits = totalBits - 1;
  const int additional = (1 << (nonSignBits - maxExponentBits)) - 1;
  std::vector<float> data;
  int i = 0;
  for (i = 0; i < maxExponentBits; ++i) {
    const int items = isSigned ? (1 << (i + nonSignBits - maxExponentBits)) + 1
                               : (1 << (i + nonSignBits - maxExponentBits + 1)) + 1;
    const auto b = linspace(0.1f, 1.0f, items);
    const float scale = static_cast<float>(std::pow(10.0, -(maxExponentBits - 1) + i));
    for (size_t k = 0; k + 1 < b.size(); ++k) {
      const float mean = (b[k] + b[k + 1]) / 2.0f;
      data.push_back(scale * mean);
      if (isSigned) data.push_back(-scale * mean);
    }
  }
  if (additional > 0) {
    const auto b = linspace(0.1f, 1.0f, additional + 1);
    const float scale = static_cast<float>(std::pow(10.0, -(maxExponentBits - 1) + (i - 1)));
    for (size_t k = 0; k + 1 < b.size(); ++k) {
      const float mean = (b[k] + b[k + 1]) / 2.0f;
      data.push_back(scale * mean);
      if (isSigned) data.push_back(-scale * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  while (data.size() < 256) data.push_back(0.0f);
  data.resize(256);
  std::sort(data.begin(), data.end());
  return data;
}

}  // namespace ts::kernels
