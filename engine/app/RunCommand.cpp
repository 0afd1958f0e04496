// Placeholder until its owner lands the real command.
#include "Commands.h"
namespace ts::app {
void addRunCommand(CLI::App& app, int& exitCode) {}
}  // namespace ts::app
