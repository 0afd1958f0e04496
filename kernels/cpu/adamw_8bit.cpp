// 8-bit AdamW, blockwise (bitsandbytes' algorithm; OpList.h has the update). Blocks run in
// parallel; within a block the order is fixed, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "trainscope/kernels/CpuOps.h"
#include "trainscope/kernels/DynamicMap.h"

namespace ts::kernels::cpu {

void adamw8bitUpdate(float* param, const float* grad, uint8_t* qm, uint8_t* qv, float* absM,
                     float* absV, const float* mapM, const float* mapV, int64_t n, int block,
                     float lr, float beta1, float beta2, float eps, float weight_decay,
                     int64_t step) {
  if (block < 1 || block > 1024)
    throw std::invalid_argument("adamw8bitUpdate: block must be 1..1024");
  const float c1 = 1.0f - static_cast<float>(std::pow(double(beta1), double(step)));
  const float c2 = static_cast<float>(std::sqrt(1.0 - std::pow(double(beta2), double(step))));
  const float stepSize = -lr * c2 / c1;
  const float decay = 1.0f - lr * weight_decay;
  const int64_t blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    float m[1024], v[1024];
    float am = 0.f, av = 0.f;
    for (int64_t i = lo; i < hi; ++i) {
      const float g = grad[i];
      float mi = mapM[qm[i]] * absM[b], vi = mapV[qv[i]] * absV[b];
      if (std::isfinite(g)) {
        mi = beta1 * mi + (1.0f - beta1) * g;
        vi = beta2 * vi + (1.0f - beta2) * g * g;
        float p = param[i] + stepSize * (mi / (std::sqrt(vi) + c2 * eps));
        if (weight_decay > 0.f) p *= decay;
        param[i] = p;
      } else {
        mi = 0.f;
        vi = 0.f;
      }
      m[i - lo] = mi;
      v[i - lo] = vi;
      am = std::max(am, std::fabs(mi));
      av = std::max(av, std::fabs(vi));
    }
    absM[b] = am;
    absV[b] = av;
    const float im = am > 0.f ? 1.0f / am : 0.f, iv = av > 0.f ? 1.0f / av : 0.f;
    for (int64_t i = lo; i < hi; ++i) {
      qm[i] = nearestCode(mapM, m[i - lo] * im);
      qv[i] = nearestCode(mapV, v[i - lo] * iv);
    }
  }
}

}  // namespace ts::kernels::cpu
