// A stand-in for trainscope-engine that floods stdout with step events at a fixed rate through
// the engine's own EventWriter (GuiLoadE2eTest): it shows that a GUI too busy to read keeps
// nothing from the producer (the writer's thread absorbs the backlog) and loses nothing.
// Invoked as the GUI invokes the engine: `run CONFIG [--db X] [--run-dir DIR] [--set k=v]...`.
//   train.steps   from CONFIG, or --set train.steps=N
//   FLOOD_RATE    events per second (environment; default 2000)
// Step k carries lr = k * 1e-7 and loss = 1 + 1/k, so a reader can check each one arrived.
// Writes DIR/flood-report.json: steps written, lines the writer refused, and its high-water mark
// (lines waiting at once: how far behind the reader fell while the producer went on).
// `capabilities` is refused (exit 2): the GUI shows the probe failure and goes on.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/engine/train/EventWriter.h"

int main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) != "run") {
    std::fprintf(stderr, "flood engine: only `run CONFIG ...` is supported\n");
    return 2;
  }
  int64_t steps = 0;
  std::string runDir = ".";
  {
    std::ifstream in(argv[2]);
    const auto cfg = nlohmann::json::parse(in, nullptr, false);
    if (cfg.is_object() && cfg.contains("train")) steps = cfg["train"].value("steps", int64_t{0});
  }
  for (int i = 3; i + 1 < argc; ++i) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--run-dir") runDir = v;
    if (a == "--set" && v.rfind("train.steps=", 0) == 0) steps = std::stoll(v.substr(12));
  }
  const char* rateEnv = std::getenv("FLOOD_RATE");
  const double rate = rateEnv ? std::atof(rateEnv) : 2000.0;
  if (steps <= 0 || rate <= 0) {
    std::fprintf(stderr, "flood engine: train.steps and FLOOD_RATE must be positive\n");
    return 2;
  }

  ts::core::EventEncoder encoder;
  int64_t refused = 0;
  size_t highWater = 0;
  {
    ts::engine::EventWriter writer(STDOUT_FILENO);
    auto emit = [&](ts::core::EventType t, nlohmann::json f) {
      if (!writer.write(encoder.encode(t, std::move(f)))) ++refused;
    };
    emit(ts::core::EventType::Hello, {{"protocol_version", ts::core::kProtocolVersion},
                                      {"engine_version", "flood"},
                                      {"pid", ::getpid()}});
    emit(ts::core::EventType::Config, {{"config", {{"train", {{"steps", steps}}}}}});
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t k = 1; k <= steps; ++k) {
      std::this_thread::sleep_until(t0 + std::chrono::duration<double>(k / rate));
      ts::core::StepEvent s;
      s.step = k;
      s.loss = 1.0 + 1.0 / static_cast<double>(k);
      s.lr = static_cast<double>(k) * 1e-7;
      s.tokens = k * 256;
      s.tokens_per_s = rate * 256;
      s.step_ms = 1000.0 / rate;
      emit(ts::core::EventType::Step, ts::core::toJson(s));
    }
    highWater = writer.highWater();
    emit(ts::core::EventType::Finished,
         {{"status", "completed"}, {"reason", ""}, {"exit_code", 0}});
    writer.close();
  }
  nlohmann::json report = {
      {"steps_written", steps}, {"refused", refused}, {"high_water", highWater}};
  std::ofstream(runDir + "/flood-report.json") << report.dump() << "\n";
  return 0;
}
