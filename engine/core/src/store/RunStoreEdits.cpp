// RunStore's edits: renaming, tags, notes, artifacts, deleting a run (and its files), and
// marking dead runs as crashed.
#include <algorithm>
#include <filesystem>

#include "RunStoreImpl.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ts::core {

using store::requireWritable;

namespace {

bool isInside(const fs::path& file, const fs::path& dir) {
  std::error_code ec;
  auto f = fs::weakly_canonical(file, ec);
  auto d = fs::weakly_canonical(dir, ec);
  auto rel = f.lexically_relative(d);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

}  // namespace

bool RunStore::rename(int64_t id, const std::string& name) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  auto s = impl_->db.prepare("UPDATE runs SET name=? WHERE id=?");
  s.bind(1, name).bind(2, id).run();
  return impl_->db.changes() > 0;
}

bool RunStore::setTags(int64_t id, const std::vector<std::string>& tags) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  std::vector<std::string> unique;
  for (auto& t : tags)
    if (!t.empty() && std::find(unique.begin(), unique.end(), t) == unique.end())
      unique.push_back(t);
  auto s = impl_->db.prepare("UPDATE runs SET tags=? WHERE id=?");
  s.bind(1, json(unique).dump()).bind(2, id).run();
  return impl_->db.changes() > 0;
}

bool RunStore::setNotes(int64_t id, const std::string& notes) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  auto s = impl_->db.prepare("UPDATE runs SET notes=? WHERE id=?");
  s.bind(1, notes).bind(2, id).run();
  return impl_->db.changes() > 0;
}

int64_t RunStore::addArtifact(int64_t id, const std::string& kind, const std::string& path) {
  std::lock_guard lock(impl_->mutex);
  requireWritable(impl_->db);
  auto s = impl_->db.prepare(
      "INSERT INTO artifacts(run_id, kind, path, time) SELECT id, ?2, ?3, ?4 FROM runs "
      "WHERE id=?1");
  s.bind(1, id).bind(2, kind).bind(3, path).bind(4, store::nowSeconds()).run();
  return impl_->db.changes() > 0 ? impl_->db.lastInsertId() : 0;
}

bool RunStore::deleteRun(int64_t id, bool deleteFiles) {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  requireWritable(db);
  std::string runDir;
  std::vector<std::string> files;
  {
    auto s = db.prepare("SELECT run_dir, status, pid, host FROM runs WHERE id=?");
    s.bind(1, id);
    if (!s.step()) return false;
    runDir = s.text(0);
    // A live engine would train on and write into the folder deleted under it: stop it first.
    if (s.text(1) == "running" && s.text(3) == store::hostName() && store::processAlive(s.i64(2)))
      throw StoreError(StoreError::Kind::BadInput,
                       "run " + std::to_string(id) + " is still running (pid " +
                           std::to_string(s.i64(2)) +
                           "): stop it first (Stop in the app, or `trainscope-engine runs stop " +
                           std::to_string(id) + "`), then delete it");
    auto a = db.prepare(
        "SELECT path FROM artifacts WHERE run_id=?1 UNION SELECT path FROM checkpoints "
        "WHERE run_id=?1");
    a.bind(1, id);
    while (a.step()) files.push_back(a.text(0));
  }
  bool sharedDir = false;
  {
    auto s = db.prepare("SELECT count(*) FROM runs WHERE run_dir=?1 AND id<>?2");
    s.bind(1, runDir).bind(2, id);
    s.step();
    sharedDir = s.i64(0) > 0;
  }
  {
    store::Transaction tx(db);
    auto s = db.prepare("DELETE FROM runs WHERE id=?");
    s.bind(1, id).run();
    tx.commit();
  }
  if (deleteFiles && !runDir.empty() && !sharedDir) {
    std::error_code ec;
    fs::path dir(runDir);
    // What the engine and the app write there (never anything else a user put in it).
    for (const char* name :
         {"events.ndjson", "recorder.json", "recorded.ndjson", "run.json", "control.sock"})
      fs::remove(dir / name, ec);
    // Only files inside the run directory: never delete what lives elsewhere.
    for (auto& f : files)
      if (isInside(f, dir)) fs::remove_all(f, ec);
    if (fs::is_directory(dir / "checkpoints", ec) && fs::is_empty(dir / "checkpoints", ec))
      fs::remove(dir / "checkpoints", ec);
    if (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)) fs::remove(dir, ec);
  }
  return true;
}

int RunStore::markCrashedRuns() {
  std::lock_guard lock(impl_->mutex);
  auto& db = impl_->db;
  if (db.readOnly()) return 0;
  {  // look first: an UPDATE would take the write lock even when nothing is dead
    auto q = db.prepare(
        "SELECT count(*) FROM runs WHERE status='running' AND ts_dead(host, pid, heartbeat)");
    q.step();
    if (q.i64(0) == 0) return 0;
  }
  auto s = db.prepare(
      "UPDATE runs SET status='crashed', reason=CASE WHEN reason='' THEN "
      "'the engine stopped without finishing (heartbeat lost)' ELSE reason END "
      "WHERE status='running' AND ts_dead(host, pid, heartbeat)");
  s.run();
  return db.changes();
}

}  // namespace ts::core
