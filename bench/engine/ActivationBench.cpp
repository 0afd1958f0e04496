// Activation memory bench (numbers go into docs/memory.md):
//  1. L = 12 GPT, activation peak (tracker) and step time with checkpointing none / every_k
//     (sqrt) / all, and with int8 compression.
//  2. Attention alone, B = 1, C = 64, 2 heads: flash vs naive peak attention memory (buffers the
//     engine allocates for it) and forward+backward time for T = 256 ... 8192; naive is skipped
//     above ~4 GB.
// Usage: activation_bench [threads] [max_T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/optim/Optimizer.h"

using namespace ts::engine;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void checkpointingTable(int threads) {
  std::printf("\n## L = 12, C = 128, 4 heads, T = 128, B = 8, V = 256, %d thread(s)\n\n", threads);
  std::printf("| mode | activation peak (MiB) | vs none | step (ms, best of 3) | vs none |\n");
  std::printf("|---|---|---|---|---|\n");
  struct Mode {
    const char* name;
    int k;
    GptConfig::Compression comp;
  };
  double base = 0, baseMs = 0;
  for (const Mode& m :
       {Mode{"none", 0, GptConfig::Compression::None},
        Mode{"every_k (k = 3 = round(sqrt 12))", 3, GptConfig::Compression::None},
        Mode{"all", 1, GptConfig::Compression::None}, Mode{"int8", 0, GptConfig::Compression::Int8},
        Mode{"all + int8", 1, GptConfig::Compression::Int8}}) {
    auto backend = ts::kernels::makeCpuBackend();
    backend->setThreads(threads);
    MemoryTracker tracker;
    GptConfig gc;
    gc.layers = 12;
    gc.heads = 4;
    gc.d_model = 128;
    gc.seq_len = 128;
    gc.vocab = 256;
    gc.checkpointEvery = m.k;
    gc.compression = m.comp;
    Gpt model(gc, backend.get(), &tracker);
    model.initWeights(1);
    const int B = 8, T = 128, N = B * T;
    model.allocate(B);
    std::vector<int32_t> tok(N), tgt(N);
    for (int i = 0; i < N; ++i) tok[i] = (i * 31 + 7) % 256, tgt[i] = (i * 17 + 3) % 256;
    double best = 1e30;
    for (int r = 0; r < 4; ++r) {
      const auto t0 = Clock::now();
      model.zeroGrad();
      model.forward(tok.data(), tgt.data(), B, T, 1.f / N);
      model.backward();
      if (r > 0) best = std::min(best, seconds(t0) * 1e3);
    }
    const double peak = tracker.peak(MemoryTier::Device, MemoryCategory::Activations);
    if (m.k == 0 && m.comp == GptConfig::Compression::None) base = peak, baseMs = best;
    std::printf("| %s | %.2f | %.2f | %.1f | %.2f |\n", m.name, peak / 1048576.0, peak / base, best,
                best / baseMs);
  }
}

void attentionTable(int threads, int maxT) {
  std::printf("\n## Attention alone: B = 1, C = 64, 2 heads, fwd + bwd, %d thread(s)\n\n", threads);
  std::printf("| T | naive attention memory (MiB) | flash (MiB) | naive ms | flash ms |\n");
  std::printf("|---|---|---|---|---|\n");
  const int B = 1, C = 64, NH = 2;
  for (int T = 256; T <= maxT; T *= 2) {
    auto backend = ts::kernels::makeCpuBackend();
    backend->setThreads(threads);
    const int64_t N = int64_t(B) * T;
    std::vector<float> qkv(N * 3 * C), out(N * C), dout(N * C), dqkv(N * 3 * C);
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float((i * 37) % 101) / 101.f - 0.5f;
    for (size_t i = 0; i < dout.size(); ++i) dout[i] = float((i * 13) % 97) / 97.f - 0.5f;
    // What each implementation keeps for backward + its backward scratch (docs/memory.md).
    const double naiveBytes = 2.0 * 4 * B * NH * double(T) * T;  // probabilities + d(probs)
    const double flashBytes = 4.0 * B * NH * T;                  // log-sum-exp
    char naiveMs[32] = "skipped (> 4 GB)";
    if (naiveBytes <= 4e9) {
      std::vector<float> att(size_t(B) * NH * T * T), datt(att.size());
      double best = 1e30;
      for (int r = 0; r < 2; ++r) {
        const auto t0 = Clock::now();
        backend->attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
        backend->attentionBackward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), B,
                                   T, C, NH);
        best = std::min(best, seconds(t0) * 1e3);
      }
      std::snprintf(naiveMs, sizeof naiveMs, "%.1f", best);
    }
    std::vector<float> lse(size_t(B) * NH * T);
    double best = 1e30;
    for (int r = 0; r < 2; ++r) {
      const auto t0 = Clock::now();
      backend->flashAttentionForward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
      backend->flashAttentionBackward(dqkv.data(), dout.data(), out.data(), lse.data(), qkv.data(),
                                      B, T, C, NH);
      best = std::min(best, seconds(t0) * 1e3);
    }
    std::printf("| %d | %.2f | %.4f | %s | %.1f |\n", T, naiveBytes / 1048576.0,
                flashBytes / 1048576.0, naiveMs, best);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int maxT = argc > 2 ? std::atoi(argv[2]) : 8192;
  checkpointingTable(threads);
  attentionTable(threads, maxT);
  return 0;
}
