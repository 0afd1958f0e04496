#include "trainscope/engine/loss/DistillationLoss.h"

#include <vector>

#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

DistillationSums DistillationLoss::forwardBackward(Tensor& student, const Tensor& teacher,
                                                   Tensor& targetsBuf, Tensor& ceBuf, Tensor& klBuf,
                                                   const int32_t* targets, int N, int V,
                                                   float dloss) const {
  backend_->copyToDevice(targetsBuf.data(), targets, sizeof(int32_t) * N);
  {
    profiler::ScopedRange r("distill_loss", profiler::SpanCategory::Elementwise);
    backend_->distillForwardBackward(ceBuf.f32(), klBuf.f32(), student.f32(), student.f32(),
                                     teacher.f32(), targetsBuf.i32(), N, V, temperature_, alpha_,
                                     dloss);
  }
  std::vector<float> ce(static_cast<size_t>(N)), kl(ce.size());
  backend_->copyToHost(ce.data(), ceBuf.f32(), sizeof(float) * N);
  backend_->copyToHost(kl.data(), klBuf.f32(), sizeof(float) * N);
  DistillationSums s;
  for (int i = 0; i < N; ++i)
    if (targets[i] >= 0) {
      s.ce += ce[size_t(i)];
      s.kl += kl[size_t(i)];
      ++s.count;
    }
  return s;
}

}  // namespace ts::engine
