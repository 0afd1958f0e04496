#include "trainscope/engine/loss/CrossEntropyLoss.h"

#include <vector>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

double CrossEntropyLoss::forwardBackward(Tensor& logits, Tensor& targetsBuf, Tensor& lossesBuf,
                                         const int32_t* targets, int N, int V, float dloss,
                                         int64_t* count) const {
  backend_->copyToDevice(targetsBuf.data(), targets, sizeof(int32_t) * N);
  {
    profiler::ScopedRange r("cross_entropy", profiler::SpanCategory::Elementwise);
    backend_->crossEntropyForwardBackward(lossesBuf.f32(), logits.f32(), logits.f32(),
                                          targetsBuf.i32(), N, V, dloss);
  }
  std::vector<float> losses(static_cast<size_t>(N));
  backend_->copyToHost(losses.data(), lossesBuf.f32(), sizeof(float) * N);
  double sum = 0.0;
  int64_t n = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] >= 0) {
      sum += losses[i];
      ++n;
    }
  }
  if (count) *count = n;
  return sum;
}

}  // namespace ts::engine
