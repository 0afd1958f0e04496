// `trainscope-engine validate CONFIG [--set key.path=value ...]`: prints the resolved config
// (every default filled) or every problem, one per line.
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "Commands.h"
#include "trainscope/core/config/Config.h"

namespace ts::app {

void addValidateCommand(CLI::App& app, int& exitCode) {
  struct Options {
    std::string config;
    std::vector<std::string> overrides;
  };
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "Check a run config; print it resolved (defaults filled) or every problem");
  cmd->add_option("CONFIG", opts->config, "Run config JSON file (see docs/config.md)")->required();
  cmd->add_option("--set", opts->overrides,
                  "Override a field before validation: key.path=value (value parsed as JSON, "
                  "else taken as a string), e.g. --set precision.policy=bf16")
      ->take_all()
      ->allow_extra_args(false);
  cmd->callback([opts, &exitCode] {
    core::ConfigResult result = core::loadConfigWithOverrides(opts->config, opts->overrides);
    if (!result.ok() || !result.config) {
      for (const auto& issue : result.issues) {
        // Document-level issues already name the file; field issues get it as a prefix.
        if (issue.path.empty()) {
          std::fprintf(stderr, "%s\n", issue.toString().c_str());
        } else {
          std::fprintf(stderr, "%s: %s\n", opts->config.c_str(), issue.toString().c_str());
        }
      }
      std::fprintf(stderr, "%s: %zu problem%s found\n", opts->config.c_str(), result.issues.size(),
                   result.issues.size() == 1 ? "" : "s");
      exitCode = kExitBadInput;
      return;
    }
    std::cout << core::toJson(*result.config).dump(2) << std::endl;
    exitCode = kExitOk;
  });
}

}  // namespace ts::app
