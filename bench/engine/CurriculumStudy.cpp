// Curriculum study (issue: "measure it"): does easy-first sampling reach the accuracy target
// sooner than uniform sampling on the addition task? For pacing none (uniform), linear, root
// (Platanios et al. 2019: sqrt of c0^2 + (1 - c0^2) t) and step, over 3 seeds, the first eval
// step whose exact-match accuracy on held-out problems reaches the target, and the final
// accuracy. The numbers go into docs/config.md as measured, whichever way they come out.
// Usage: curriculum_study [target=0.9] [steps=1500] [digits=2] [threads=1]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "trainscope/engine/train/Trainer.h"
#include "trainscope/kernels/Backend.h"

using namespace ts;

int main(int argc, char** argv) {
  const double target = argc > 1 ? std::atof(argv[1]) : 0.9;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 1500;
  const int digits = argc > 3 ? std::atoi(argv[3]) : 2;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  const int evalEvery = 50;
  const auto dir = std::filesystem::temp_directory_path() / "trainscope-curriculum-study";
  std::printf(
      "addition, %d digits, 2 layers, d_model 64, %d steps of 32 sequences, eval every "
      "%d steps on 128 held-out problems; target exact match %.2f; curriculum "
      "difficulty, full_at 0.5\n\n",
      digits, steps, evalEvery, target);
  std::printf(
      "| pacing | seed 1 | seed 2 | seed 3 | mean steps to target | final accuracy "
      "(mean) |\n|---|---|---|---|---|---|\n");
  for (const char* pacing : {"none", "linear", "root", "step"}) {
    double sumSteps = 0, sumFinal = 0;
    int reached = 0;
    std::string cells;
    for (int seed : {1, 2, 3}) {
      core::RunConfig c;
      c.model.layers = 2;
      c.model.heads = 4;
      c.model.d_model = 64;
      c.model.seq_len = 16;
      c.data.source = "synthetic";
      c.data.task = "addition";
      c.data.digits = digits;
      c.train.steps = steps;
      c.train.micro_batch = 32;
      c.train.grad_accum = 1;
      c.train.eval_every = evalEvery;
      c.train.checkpoint_every = 0;
      c.train.seed = seed;
      c.optimizer.lr = 3e-3;  // the default preset's recipe
      c.optimizer.betas = {0.9, 0.98};
      c.schedule.type = "cosine";
      c.schedule.warmup_steps = 50;
      c.schedule.min_lr = 3e-4;
      c.device.threads = threads;
      c.curriculum.type = std::string(pacing) == "none" ? "none" : "difficulty";
      c.curriculum.pacing = std::string(pacing) == "none" ? "linear" : pacing;
      c.curriculum.full_at = 0.5;
      auto backend = kernels::makeCpuBackend();
      backend->setThreads(threads);
      engine::TrainerOptions o;
      o.runDir = (dir / (std::string(pacing) + std::to_string(seed))).string();
      o.exactMatchSamples = 128;
      int64_t first = -1;
      o.emit = [&](core::EventType t, nlohmann::json f, bool) {
        if (t == core::EventType::Eval && f.contains("accuracy") && first < 0 &&
            f["accuracy"].get<double>() >= target)
          first = f["step"].get<int64_t>();
      };
      engine::Trainer trainer(c, backend.get(), o);
      const auto r = trainer.run();
      if (r.status != "completed") {
        std::fprintf(stderr, "%s seed %d: %s\n", pacing, seed, r.reason.c_str());
        return 1;
      }
      char cell[48];
      if (first >= 0) {
        std::snprintf(cell, sizeof cell, " %lld |", static_cast<long long>(first));
        sumSteps += double(first);
        ++reached;
      } else {
        std::snprintf(cell, sizeof cell, " not reached |");
      }
      cells += cell;
      sumFinal += r.accuracy;
    }
    char mean[48];
    if (reached == 3)
      std::snprintf(mean, sizeof mean, "%.0f", sumSteps / 3);
    else
      std::snprintf(mean, sizeof mean, "%d of 3 reached", reached);
    std::printf("| %s |%s %s | %.3f |\n", pacing, cells.c_str(), mean, sumFinal / 3);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
