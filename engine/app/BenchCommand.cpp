// `trainscope-engine bench`: training throughput vs the measured GEMM peak (see Bench.h).
#include <iostream>
#include <sstream>

#include "Commands.h"
#include "trainscope/engine/optim/OffloadStore.h"
#include "trainscope/engine/train/Bench.h"
#include "trainscope/engine/train/Capabilities.h"

namespace ts::app {

void addBenchCommand(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<engine::BenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto precision = std::make_shared<bool>(false);
  auto disk = std::make_shared<std::string>();
  auto diskMiB = std::make_shared<int64_t>(256);
  auto* cmd = app.add_subcommand("bench", "Benchmark training throughput against the GEMM peak");
  cmd->add_option("--threads", opts->threads, "Thread counts to run (default 1 2)");
  cmd->add_option("--steps", opts->steps, "Timed steps per shape (best is reported)");
  cmd->add_flag("--quick", opts->quick, "Only the smallest shape");
  cmd->add_flag("--precision", *precision,
                "Only the precision policies side by side (fp32, bf16, fp16, fp8, fp8-block, "
                "pure_bf16): tokens/s and peak "
                "memory on one shape");
  cmd->add_flag("--json", *json, "Print the results as JSON after the table");
  cmd->add_option("--disk", *disk,
                  "Only the raw sequential write and read rate of this directory (what NVMe "
                  "offload is compared against), in MB/s");
  cmd->add_option("--disk-mib", *diskMiB, "Size of the --disk test file in MiB (default 256)");
  cmd->callback([opts, json, precision, disk, diskMiB, &exitCode] {
    if (!disk->empty()) {
      try {
        const auto [w, r] = engine::measureDiskRate(*disk, *diskMiB << 20);
        std::cout << "disk " << *disk << ": write " << w / 1e6 << " MB/s, read " << r / 1e6
                  << " MB/s (" << *diskMiB << " MiB, sequential)\n";
        if (*json)
          std::cout << nlohmann::json(
                           {{"dir", *disk}, {"write_bytes_per_s", w}, {"read_bytes_per_s", r}})
                           .dump()
                    << "\n";
        exitCode = kExitOk;
      } catch (const std::exception& e) {
        std::cerr << "trainscope-engine bench --disk: " << e.what() << "\n";
        exitCode = kExitBadInput;
      }
      return;
    }
    engine::ensurePassiveOmpWaitPolicy();
    auto caps = engine::capabilitiesJson();
    std::cout << "CPU: " << caps["cpu"]["model"].get<std::string>() << " features:";
    for (const auto& f : caps["cpu"]["features"]) std::cout << " " << f.get<std::string>();
    std::cout << "\nGFLOP/s counts 6*params + 12*L*C*T per token (fwd+bwd, PaLM appendix B).\n";
    auto results = *precision ? engine::runPrecisionBench(*opts, std::cout)
                              : engine::runBench(*opts, std::cout);
    if (*json) std::cout << results.dump(2) << "\n";
    exitCode = kExitOk;
  });
}

}  // namespace ts::app
