#include "trainscope/gui/PresetLibrary.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <optional>

#include <QDir>
#include <QFile>
#include <QFileInfo>

namespace ts::gui {

std::optional<Preset> PresetLibrary::load(const QString& file, QString* error) {
  QFile f(file);
  if (!f.open(QIODevice::ReadOnly)) {
    if (error) *error = QStringLiteral("cannot open %1: %2").arg(file, f.errorString());
    return std::nullopt;
  }
  Preset p;
  try {
    p.doc = core::parseBoundedJson(f.readAll().toStdString());
  } catch (const std::exception& e) {
    if (error) *error = QStringLiteral("%1: %2").arg(file, e.what());
    return std::nullopt;
  }
  if (!p.doc.is_object()) {
    if (error) *error = QStringLiteral("%1 does not hold a JSON object").arg(file);
    return std::nullopt;
  }
  p.id = QFileInfo(file).completeBaseName();
  p.title = QString::fromStdString(p.doc.value("name", p.id.toStdString()));
  p.summary = QString::fromStdString(p.doc.value("notes", std::string()));
  return p;
}

std::vector<Preset> PresetLibrary::builtIn(const QString& dir) {
  std::vector<Preset> out;
  const auto files = QDir(dir).entryList({"*.json"}, QDir::Files, QDir::Name);
  for (const QString& name : files) {
    if (auto p = load(QDir(dir).filePath(name))) {
      if (p->id == "default")
        out.insert(out.begin(), std::move(*p));
      else
        out.push_back(std::move(*p));
    }
  }
  return out;
}

}  // namespace ts::gui
