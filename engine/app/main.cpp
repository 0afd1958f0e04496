// trainscope-engine: thin entry point; every subcommand lives in its own file.
#include <cstdio>
#include <exception>

#include "Commands.h"
#include "CpuBaseline.h"

// Runs before every other static initializer (the libraries' may already use AVX2): an older CPU
// gets a sentence naming what it lacks instead of SIGILL.
__attribute__((constructor(101))) static void checkCpuBaseline() {
  ts::app::requireCpuBaseline();
}

int main(int argc, char** argv) {
  CLI::App app{"Trainscope training engine"};
  app.set_version_flag("--version", std::string("trainscope-engine ") + TRAINSCOPE_VERSION);
  app.require_subcommand(1);
  int exitCode = ts::app::kExitOk;
  ts::app::addValidateCommand(app, exitCode);
  ts::app::addRunCommand(app, exitCode);
  ts::app::addCapabilitiesCommand(app, exitCode);
  ts::app::addBenchCommand(app, exitCode);
  ts::app::addRunsCommand(app, exitCode);
  ts::app::addEstimateCommands(app, exitCode);
  ts::app::addImportHfCommand(app, exitCode);
  ts::app::addExportHfCommand(app, exitCode);
  ts::app::addEvaluateCommand(app, exitCode);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : ts::app::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainscope-engine: error: %s\n", e.what());
    return ts::app::kExitRunFailed;
  }
  return exitCode;
}
