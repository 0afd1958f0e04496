#include "trainscope/gui/RunControl.h"

#include <signal.h>

#include <cerrno>

#include <QFile>
#include <QSysInfo>

#include "trainscope/core/protocol/ControlSocket.h"

namespace ts::gui {

QString RunControl::send(const QString& runDir, core::CommandType type, int steps) {
  if (runDir.isEmpty()) return QStringLiteral("the run's folder is not recorded");
  core::Command c;
  c.type = type;
  c.steps = steps;
  return QString::fromStdString(
      core::sendControlLine(runDir.toStdString(), core::encodeCommand(c)));
}

bool RunControl::listening(const QString& runDir) {
  return !runDir.isEmpty() && core::controlListening(runDir.toStdString());
}

bool RunControl::engineAlive(int64_t pid, const std::string& host) {
  if (pid <= 0 || QSysInfo::machineHostName().toStdString() != host) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  // An exited child not yet reaped (a zombie) has finished.
  QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
  if (!stat.open(QIODevice::ReadOnly)) return true;
  const QByteArray s = stat.readAll();
  const int close = s.lastIndexOf(')');
  return close < 0 || close + 2 >= s.size() || s[close + 2] != 'Z';
}

}  // namespace ts::gui
