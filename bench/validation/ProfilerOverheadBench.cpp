// Profiler overhead on real training (issue 7: < 3% of step time on the tiny preset). Trains the
// default preset for N steps with profiling off and with every step profiled, alternating runs,
// and prints the median step time of each and their ratio. Not a test: timings are noisy.
//   profiler_overhead_bench [steps=60] [repeats=5] [threads=1]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "trainscope/core/config/Config.h"
#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/Backend.h"

using namespace ts;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Step times (ms) of one run; the first two steps (allocation, warm caches) are dropped.
std::vector<double> run(core::RunConfig c, const std::string& dir, size_t* spans) {
  auto backend = kernels::makeCpuBackend();
  backend->setThreads(c.device.threads);
  engine::TrainerOptions o;
  o.runDir = dir;
  o.evalBatches = 1;
  o.exactMatchSamples = 0;
  std::vector<double> ms;
  o.emit = [&](core::EventType t, nlohmann::json f, bool) {
    if (t == core::EventType::Step && f["step"].get<int64_t>() > 2)
      ms.push_back(f["step_ms"].get<double>());
    if (t == core::EventType::Kernels && spans) *spans += f["spans"].size();
  };
  engine::Trainer trainer(c, backend.get(), o);
  auto r = trainer.run();
  if (r.status != "completed") {
    std::fprintf(stderr, "run failed: %s\n", r.reason.c_str());
    std::exit(3);
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  auto loaded =
      core::loadConfigWithOverrides(std::string(TRAINSCOPE_PRESET_DIR) + "/default.json",
                                    {"train.steps=" + std::to_string(steps), "train.eval_every=0",
                                     "device.threads=" + std::to_string(threads)});
  if (!loaded.ok()) {
    std::fprintf(stderr, "bad preset: %s\n", loaded.issues.front().toString().c_str());
    return 2;
  }
  core::RunConfig off = *loaded.config, on = off;
  on.profile = {true, 0, 0, steps, 1};  // every step inside one window
  const auto dir = std::filesystem::temp_directory_path() /
                   ("trainscope_overhead_" + std::to_string(::getpid()));
  std::vector<double> offMs, onMs;
  size_t spans = 0;
  for (int r = 0; r < repeats; ++r) {
    auto a = run(off, (dir / "off").string(), nullptr);
    auto b = run(on, (dir / "on").string(), &spans);
    offMs.insert(offMs.end(), a.begin(), a.end());
    onMs.insert(onMs.end(), b.begin(), b.end());
  }
  std::filesystem::remove_all(dir);
  const double mOff = median(offMs), mOn = median(onMs);
  std::printf("default preset, %d steps x %d runs, %d thread(s)\n", steps, repeats, threads);
  std::printf("median step time: profiling off %.3f ms, on %.3f ms, ratio %.4f (%+.2f%%)\n", mOff,
              mOn, mOn / mOff, 100.0 * (mOn / mOff - 1.0));
  std::printf("spans recorded per profiled step: %.0f\n",
              spans / double(std::max(1, repeats * steps)));
  return 0;
}
