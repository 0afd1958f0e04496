#pragma once
// Commands to a run through the control socket in its folder (core/protocol/ControlSocket.h):
// how the app controls runs it did not start, or started and re-attached to after a restart.
#include <cstdint>
#include <string>

#include <QString>

#include "trainscope/core/protocol/Protocol.h"

namespace ts::gui {

struct RunControl {
  // Empty when delivered, else why not (for the log or a message box).
  static QString send(const QString& runDir, core::CommandType type, int steps = 0);
  // Whether an engine listens in runDir now (a connect, nothing sent; microseconds).
  static bool listening(const QString& runDir);
  // Whether the engine process that recorded a run is still alive (this host only: a run
  // recorded on another host answers false).
  static bool engineAlive(int64_t pid, const std::string& host);
};

}  // namespace ts::gui
