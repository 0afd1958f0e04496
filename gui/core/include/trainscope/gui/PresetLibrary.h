#pragma once
// Built-in presets embedded from resources/presets/*.json (":/presets/").
#include <vector>

#include <QString>
#include <nlohmann/json.hpp>

namespace ts::gui {

struct Preset {
  QString id;       // file name without .json ("default", "consumer_gpu", ...)
  QString title;    // the config's name
  QString summary;  // the config's notes
  nlohmann::json doc;
};

class PresetLibrary {
 public:
  // Loads every preset in the resource folder; "default" first.
  static std::vector<Preset> builtIn(const QString& dir = QStringLiteral(":/presets"));
  static std::optional<Preset> load(const QString& file, QString* error = nullptr);
};

}  // namespace ts::gui
