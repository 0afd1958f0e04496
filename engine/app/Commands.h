#pragma once
// Each subcommand of trainscope-engine lives in its own file and registers itself here.
// Exit codes (docs/cli.md): 0 ok, 2 bad input, 3 run failed, 130 interrupted.
#include <CLI/CLI.hpp>

namespace ts::app {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitRunFailed = 3;
inline constexpr int kExitInterrupted = 130;

// Each adder creates its subcommand on `app`; the callback stores its exit code in `exitCode`.
void addValidateCommand(CLI::App& app, int& exitCode);      // ValidateCommand.cpp
void addRunCommand(CLI::App& app, int& exitCode);           // RunCommand.cpp
void addCapabilitiesCommand(CLI::App& app, int& exitCode);  // CapabilitiesCommand.cpp
void addBenchCommand(CLI::App& app, int& exitCode);         // BenchCommand.cpp
void addRunsCommand(CLI::App& app, int& exitCode);          // RunsCommand.cpp
void addEstimateCommands(CLI::App& app, int& exitCode);     // EstimateCommand.cpp (estimate, plan)
void addImportHfCommand(CLI::App& app, int& exitCode);      // ImportHfCommand.cpp
void addExportHfCommand(CLI::App& app, int& exitCode);      // ExportHfCommand.cpp
void addEvaluateCommand(CLI::App& app, int& exitCode);      // EvaluateCommand.cpp

}  // namespace ts::app
