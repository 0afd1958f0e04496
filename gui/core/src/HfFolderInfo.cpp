#include "trainscope/gui/HfFolderInfo.h"

#include <filesystem>

#include "trainscope/core/model/ModelFamily.h"

namespace ts::gui {

namespace fs = std::filesystem;

QString humanCount(double n) {
  if (n >= 1e9) return QString::number(n / 1e9, 'f', 2) + " B";
  if (n >= 1e6) return QString::number(n / 1e6, 'f', 2) + " M";
  if (n >= 1e3) return QString::number(n / 1e3, 'f', 1) + " K";
  return QString::number(n, 'f', 0);
}

namespace {

QString humanBytes(double b) {
  if (b >= 1e9) return QString::number(b / 1e9, 'f', 2) + " GB";
  if (b >= 1e6) return QString::number(b / 1e6, 'f', 1) + " MB";
  return QString::number(b / 1e3, 'f', 1) + " KB";
}

// Size and modification time of the files a folder's summary is made from.
std::string stampOf(const std::string& path) {
  std::error_code ec;
  std::string s;
  fs::path d(path);
  if (fs::is_regular_file(d, ec)) d = d.parent_path();
  for (const char* name : {"config.json", "model.safetensors", "model.safetensors.index.json"}) {
    const auto p = d / name;
    const auto t = fs::last_write_time(p, ec);
    s += ec ? std::string("-") : std::to_string(t.time_since_epoch().count());
    s += ":" + std::to_string(fs::file_size(p, ec)) + ";";
  }
  return s;
}

}  // namespace

int64_t HfFolderInfo::storedParameters() const {
  int64_t n = 0;
  for (const auto& [dtype, count] : stored.elementsByDtype) n += count;
  return n;
}

QString HfFolderInfo::summary() const {
  if (!ok()) return error;
  const auto& m = info.model;
  const core::ModelFamily& family = core::modelFamily(m.arch);
  // The family the engine reads it as, then its shape.
  QString s =
      QString::fromStdString(family.displayName() + " (" + info.architecture + ")") +
      QStringLiteral(": %1 layers, d_model %2, %3 heads").arg(m.layers).arg(m.d_model).arg(m.heads);
  if (family.readsModelKey("kv_heads") && m.kv_heads != m.heads)
    s += QStringLiteral(" (%1 KV)").arg(m.kv_heads);
  if (family.readsModelKey("d_ff")) s += QStringLiteral(", d_ff %1").arg(m.d_ff);
  s += QStringLiteral(", %1 positions, vocab %2").arg(m.seq_len).arg(m.vocab);
  s += " · " + humanCount(static_cast<double>(storedParameters())) + " parameters";
  s += " · stored " + QString::fromStdString(stored.summary());
  if (!info.configDtype.empty())
    s += " (config.json: " + QString::fromStdString(info.configDtype) + ")";
  s += QStringLiteral(" · %1 in %2 file%3")
           .arg(humanBytes(static_cast<double>(stored.fileBytes)))
           .arg(stored.files)
           .arg(stored.files == 1 ? "" : "s");
  s += " · " + QString::fromStdString(family.description());
  return s;
}

HfFolderInfo inspectHfFolder(const std::string& path) {
  HfFolderInfo out;
  try {
    out.info = core::readHfConfig(path);
    out.stored = core::readHfStoredWeights(out.info.dir);
  } catch (const core::HfConfigError& e) {
    out.error = QString::fromStdString(e.what());
  } catch (const std::exception& e) {  // filesystem errors
    out.error = QString::fromStdString(path + ": " + e.what());
  }
  return out;
}

nlohmann::json applyHfFolder(nlohmann::json doc, const HfFolderInfo& folder) {
  if (!folder.ok()) return doc;
  const auto rc = core::hfRunConfig(folder.info.dir, folder.info.model);
  const auto& m = rc.model;
  auto& model = doc["model"];
  model["arch"] = m.arch;
  model["layers"] = m.layers;
  model["heads"] = m.heads;
  model["d_model"] = m.d_model;
  model["seq_len"] = m.seq_len;
  model["vocab"] = m.vocab;
  // The keys the family's description reads come from config.json (as model.arch auto takes
  // them); the others go.
  nlohmann::json fromFolder = core::toJson(rc)["model"];
  for (const char* k : {"arch", "layers", "heads", "d_model", "seq_len", "vocab", "dropout"})
    fromFolder.erase(k);
  const core::ModelFamily& family = core::modelFamily(m.arch);
  for (const auto& [key, value] : fromFolder.items()) {
    if (family.readsModelKey(key))
      model[key] = value;
    else
      model.erase(key);
  }
  doc["finetune"]["base_checkpoint"] = rc.finetune.base_checkpoint;
  return doc;
}

nlohmann::json applyHfBase(nlohmann::json doc, const HfFolderInfo& folder) {
  if (!folder.ok()) return doc;
  doc = applyHfFolder(std::move(doc), folder);
  fs::path dir(folder.info.dir);
  if (dir.filename().empty()) dir = dir.parent_path();
  const std::string base = dir.filename().string();
  const core::ModelFamily& family = core::modelFamily(folder.info.model.arch);
  doc["name"] = base + "-finetune";
  doc["tags"] = {"finetune", "hf", family.name()};
  const bool synthetic =
      doc.value("data", nlohmann::json::object()).value("source", "synthetic") == "synthetic";
  doc["notes"] =
      "Fine-tunes " + base + " (" + family.displayName() + ", " +
      humanCount(static_cast<double>(folder.storedParameters())).toStdString() +
      " parameters) from the Hugging Face folder " + folder.info.dir + "." +
      (synthetic ? " Data: still the synthetic task; pick a text or jsonl file to fine-tune on "
                   "your own data."
                 : "");
  return doc;
}

const HfFolderInfo& HfFolderCache::get(const std::string& path) {
  const std::string stamp = stampOf(path);
  auto it = entries_.find(path);
  if (it == entries_.end() || it->second.stamp != stamp)
    it = entries_.insert_or_assign(path, Entry{stamp, inspectHfFolder(path)}).first;
  return it->second.folder;
}

void HfFolderCache::put(const std::string& path, HfFolderInfo folder) {
  entries_.insert_or_assign(path, Entry{stampOf(path), std::move(folder)});
}

}  // namespace ts::gui
