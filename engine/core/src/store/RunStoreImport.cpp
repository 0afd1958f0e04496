// RunStore::importEvents: an events.ndjson loaded into the store as one run.
#include <filesystem>
#include <fstream>
#include "trainscope/core/protocol/BoundedJson.h"

#include "RunStoreImpl.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ts::core {

using store::Db;
using store::requireWritable;

namespace {

// The run's name, backend, ranks, lineage and creation time from its recorder.json, when it
// has a readable one.
store::RunMeta readRecorderMeta(const fs::path& runDir) {
  store::RunMeta meta;
  meta.runDir = runDir.string();
  meta.created = store::nowSeconds();
  meta.status = "running";
  json rec;
  {
    std::ifstream rj(runDir / "recorder.json");
    if (rj) {
      try {
        rec = parseBoundedJson(rj);
      } catch (const json::exception&) {
      }
    }
  }
  if (rec.is_object()) {
    meta.name = rec.value("name", std::string());
    meta.backend = rec.value("backend", std::string());
    meta.ranks = rec.value("ranks", 1);
    meta.parentRun = rec.value("parent_run", int64_t{0});
    meta.teacherRun = rec.value("teacher_run", int64_t{0});
    meta.created = rec.value("created", meta.created);
  }
  return meta;
}

// The run recorded from the same directory, emptied for the import; else a new one.
int64_t runToImportInto(Db& db, store::RunMeta& meta, RunStore::ImportResult& result) {
  int64_t runId = 0;
  {
    auto s = db.prepare("SELECT id FROM runs WHERE run_dir=? ORDER BY id DESC LIMIT 1");
    s.bind(1, meta.runDir);
    if (s.step()) runId = s.i64(0);
  }
  if (runId) {
    store::EventIngestor::clearRunData(db, runId);
    result.replaced = true;
  } else {
    // Parent/teacher ids from another database may not exist here.
    for (int64_t* ref : {&meta.parentRun, &meta.teacherRun}) {
      if (*ref <= 0) continue;
      auto s = db.prepare("SELECT 1 FROM runs WHERE id=?");
      s.bind(1, *ref);
      if (!s.step()) *ref = 0;
    }
    runId = store::EventIngestor::createRun(db, meta);
  }
  return runId;
}

// Every line that is a JSON object with a string `type` goes to the ingestor; the rest are
// counted as bad.
void ingestLines(std::istream& in, store::EventIngestor& ing, RunStore::ImportResult& result) {
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line == "\r") continue;
    json e;
    try {
      e = parseBoundedJson(line);
    } catch (const json::exception&) {
      ++result.badLines;
      continue;
    }
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string()) {
      ++result.badLines;
      continue;
    }
    ing.apply(e);
    ++result.events;
  }
}

}  // namespace

RunStore::ImportResult RunStore::importEvents(const std::string& fileOrDir) {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  requireWritable(db);
  std::error_code ec;
  fs::path file(fileOrDir);
  if (fs::is_directory(file, ec)) file /= "events.ndjson";
  std::ifstream in(file);
  if (!in)
    throw StoreError(StoreError::Kind::BadInput,
                     "cannot read events file " + file.string() +
                         " (give a run directory holding events.ndjson, or the file itself)");
  fs::path runDir = fs::weakly_canonical(fs::absolute(file).parent_path(), ec);
  store::RunMeta meta = readRecorderMeta(runDir);

  ImportResult result;
  store::Transaction tx(db);
  const int64_t runId = runToImportInto(db, meta, result);
  store::EventIngestor ing(db, runId);
  ingestLines(in, ing, result);
  ing.endBatch(store::nowSeconds());
  if (!ing.sawFinished()) {
    auto s = db.prepare(
        "UPDATE runs SET status = 'crashed', reason = ?2 WHERE id = ?1 AND status = 'running' "
        "AND (pid IS NULL OR pid = 0 OR ts_dead(host, pid, 0))");
    s.bind(1, runId).bind(2, "imported from " + file.string() + ": no finished event");
    s.run();
  }
  if (!meta.name.empty() || !result.replaced) {
    // Name a run that has none after its directory.
    auto s = db.prepare("UPDATE runs SET name = ?2 WHERE id = ?1 AND name = ''");
    s.bind(1, runId).bind(2, runDir.filename().string());
    s.run();
  }
  tx.commit();
  result.runId = runId;
  return result;
}

}  // namespace ts::core
