// SGD with momentum, PyTorch semantics (dampening 0, no Nesterov), buf starting at zero:
//   g += wd * p;  buf = mu * buf + g;  p -= lr * buf.
#include "cpu/VecMath.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::kernels::cpu {

void sgdUpdate(float* param, const float* grad, float* buf, int64_t n, float lr, float momentum,
               float weight_decay) {
#pragma omp parallel for simd schedule(static) if (worthThreading(n))
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad[i] + weight_decay * param[i];
    const float b = momentum * buf[i] + g;
    buf[i] = b;
    param[i] -= lr * b;
  }
}

}  // namespace ts::kernels::cpu
