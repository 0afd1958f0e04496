// `trainscope-engine capabilities [--json]`: backends, devices, CPU features, precisions and
// techniques this build can run here (the GUI greys out the rest, showing `why`).
#include <cstdio>
#include <iostream>

#include "Commands.h"
#include "trainscope/engine/train/Capabilities.h"

namespace ts::app {

void addCapabilitiesCommand(CLI::App& app, int& exitCode) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("capabilities", "What this engine can do on this machine");
  cmd->add_flag("--json", *json, "Print JSON");
  cmd->callback([json, &exitCode] {
    const auto caps = engine::capabilitiesJson();
    if (*json) {
      std::cout << caps.dump(2) << "\n";
    } else {
      std::cout << "trainscope-engine " << caps["engine_version"].get<std::string>()
                << " (protocol " << caps["protocol_version"] << ")\n";
      std::cout << "CPU: " << caps["cpu"]["model"].get<std::string>() << ", "
                << caps["cpu"]["threads"] << " threads, features:";
      for (const auto& f : caps["cpu"]["features"]) std::cout << " " << f.get<std::string>();
      std::cout << "\nbackends:\n";
      for (const auto& b : caps["backends"]) {
        std::cout << "  " << b["name"].get<std::string>() << ": "
                  << (b["usable"].get<bool>() ? "usable" : "not usable");
        if (b.contains("why")) std::cout << " (" << b["why"].get<std::string>() << ")";
        std::cout << "\n";
      }
      std::cout << "precisions:";
      for (auto it = caps["precisions"].begin(); it != caps["precisions"].end(); ++it)
        if ((*it)["supported"].get<bool>()) std::cout << " " << it.key();
      std::cout << "\ntechniques:";
      for (auto it = caps["techniques"].begin(); it != caps["techniques"].end(); ++it)
        if ((*it)["supported"].get<bool>()) std::cout << " " << it.key();
      std::cout << "\n";
    }
    exitCode = kExitOk;
  });
}

}  // namespace ts::app
