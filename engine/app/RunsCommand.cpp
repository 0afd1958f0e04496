// `trainscope-engine runs list|show|export|delete|import`: the run store on the command line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "Commands.h"
#include "trainscope/core/protocol/ControlSocket.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/ChromeTrace.h"

namespace ts::app {
namespace {

using core::RunStore;
using core::StoreError;
using nlohmann::json;

struct RunsOptions {
  std::string db;
  // list
  std::vector<std::string> statuses;
  std::string tag, name, config, since, until, sort = "created";
  bool ascending = false, asJson = false, keepFiles = false;
  int limit = -1;
  // show/export/delete
  std::string run;
  std::string format, output;
  std::string source;  // import
  int steps = 0;       // profile
};

std::string dbPath(const RunsOptions& o) {
  return o.db.empty() ? core::defaultDatabasePath() : o.db;
}

RunStore openStore(const RunsOptions& o, bool write) {
  std::string path = dbPath(o);
  RunStore::Options so;
  so.create = write;
  if (!write) {
    try {
      return RunStore::open(path, RunStore::Mode::ReadOnly, so);
    } catch (const StoreError& e) {
      if (e.kind() != StoreError::Kind::NeedsMigration) throw;
    }
  }
  return RunStore::open(path, RunStore::Mode::ReadWrite, so);
}

std::string formatTime(double t) {
  if (t <= 0) return "-";
  std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// "YYYY-MM-DD", "YYYY-MM-DDTHH:MM:SS" (local time) or epoch seconds.
std::optional<double> parseTime(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size()) return v;
  for (const char* fmt : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"}) {
    std::tm tm{};
    std::istringstream in(s);
    in >> std::get_time(&tm, fmt);
    if (!in.fail() && in.peek() == EOF) {
      tm.tm_isdst = -1;
      return static_cast<double>(std::mktime(&tm));
    }
  }
  return std::nullopt;
}

std::string fmtOpt(const std::optional<double>& v, int prec = 4) {
  if (!v) return "-";
  std::ostringstream o;
  o << std::setprecision(prec) << *v;
  return o.str();
}

std::string bytes(int64_t b) {
  if (b <= 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::ostringstream o;
  o << std::fixed << std::setprecision(u ? 1 : 0) << v << " " << units[u];
  return o.str();
}

json summaryJson(const core::RunSummary& r) {
  json j = {{"id", r.id},
            {"name", r.name},
            {"tags", r.tags},
            {"notes", r.notes},
            {"created", r.created},
            {"started", r.started},
            {"finished", r.finished},
            {"status", r.status},
            {"reason", r.reason},
            {"backend", r.backend},
            {"ranks", r.ranks},
            {"steps", r.steps},
            {"last_step", r.lastStep},
            {"peak_memory", r.peakMemory},
            {"run_dir", r.runDir}};
  j["last_loss"] = r.lastLoss ? json(*r.lastLoss) : json(nullptr);
  j["best_eval_loss"] = r.bestEvalLoss ? json(*r.bestEvalLoss) : json(nullptr);
  j["tokens_per_s"] = r.tokensPerS ? json(*r.tokensPerS) : json(nullptr);
  j["parent_run"] = r.parentRun ? json(r.parentRun) : json(nullptr);
  j["teacher_run"] = r.teacherRun ? json(r.teacherRun) : json(nullptr);
  return j;
}

// A run is named by its id, or by its exact name when that is unique.
int64_t resolveRun(RunStore& store, const std::string& ref) {
  char* end = nullptr;
  long long id = std::strtoll(ref.c_str(), &end, 10);
  if (!ref.empty() && end == ref.c_str() + ref.size()) {
    if (store.getRun(id)) return id;
    throw StoreError(StoreError::Kind::BadInput, "run " + ref + " is not in database " +
                                                     store.path() +
                                                     " (see `trainscope-engine runs list`)");
  }
  core::RunFilter f;
  f.nameContains = ref;
  std::vector<int64_t> exact;
  for (auto& r : store.listRuns(f))
    if (r.name == ref) exact.push_back(r.id);
  if (exact.size() == 1) return exact[0];
  if (exact.empty())
    throw StoreError(StoreError::Kind::BadInput,
                     "no run named '" + ref + "' in database " + store.path());
  throw StoreError(StoreError::Kind::BadInput,
                   "several runs are named '" + ref + "'; give the run id instead");
}

int doList(const RunsOptions& o) {
  auto store = openStore(o, false);
  core::RunFilter f;
  for (auto& s : o.statuses) {
    static const std::vector<std::string> allowed = {"running", "completed", "stopped", "failed",
                                                     "crashed"};
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::fprintf(stderr,
                   "runs list: --status '%s' is not a status (running, completed, stopped, "
                   "failed, crashed)\n",
                   s.c_str());
      return kExitBadInput;
    }
  }
  f.statuses = o.statuses;
  f.tag = o.tag;
  f.nameContains = o.name;
  if (!o.config.empty()) {
    auto eq = o.config.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr,
                   "runs list: --config '%s' must look like path=value (e.g. "
                   "optimizer.lr=0.001)\n",
                   o.config.c_str());
      return kExitBadInput;
    }
    f.configPath = o.config.substr(0, eq);
    f.configValue = o.config.substr(eq + 1);
  }
  for (auto [text, target] : {std::pair{&o.since, &f.createdFrom}, {&o.until, &f.createdTo}}) {
    if (text->empty()) continue;
    *target = parseTime(*text);
    if (!*target) {
      std::fprintf(stderr,
                   "runs list: '%s' is not a date (YYYY-MM-DD, YYYY-MM-DDTHH:MM:SS or "
                   "epoch seconds)\n",
                   text->c_str());
      return kExitBadInput;
    }
  }
  static const std::map<std::string, core::RunSortKey> sorts = {
      {"created", core::RunSortKey::Created},
      {"name", core::RunSortKey::Name},
      {"status", core::RunSortKey::Status},
      {"steps", core::RunSortKey::Steps},
      {"loss", core::RunSortKey::LastLoss},
      {"eval_loss", core::RunSortKey::BestEvalLoss},
      {"tokens_per_s", core::RunSortKey::TokensPerS},
      {"memory", core::RunSortKey::PeakMemory},
      {"id", core::RunSortKey::Id}};
  auto sit = sorts.find(o.sort);
  if (sit == sorts.end()) {
    std::fprintf(stderr,
                 "runs list: --sort '%s' is not one of created, name, status, steps, "
                 "loss, eval_loss, tokens_per_s, memory, id\n",
                 o.sort.c_str());
    return kExitBadInput;
  }
  f.sort = sit->second;
  f.descending = !o.ascending;
  f.limit = o.limit;
  auto runs = store.listRuns(f);
  if (o.asJson) {
    json arr = json::array();
    for (auto& r : runs) arr.push_back(summaryJson(r));
    std::cout << arr.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("%-6s %-28s %-10s %-8s %9s %10s %10s %12s %10s  %s\n", "ID", "NAME", "STATUS",
              "BACKEND", "STEPS", "LOSS", "EVAL", "TOKENS/S", "PEAK MEM", "CREATED");
  for (auto& r : runs) {
    std::string name = r.name.size() > 28 ? r.name.substr(0, 25) + "..." : r.name;
    std::printf("%-6lld %-28s %-10s %-8s %9lld %10s %10s %12s %10s  %s\n",
                static_cast<long long>(r.id), name.c_str(), r.status.c_str(), r.backend.c_str(),
                static_cast<long long>(r.steps), fmtOpt(r.lastLoss).c_str(),
                fmtOpt(r.bestEvalLoss).c_str(), fmtOpt(r.tokensPerS, 6).c_str(),
                bytes(r.peakMemory).c_str(), formatTime(r.created).c_str());
  }
  if (runs.empty()) std::printf("(no runs in %s)\n", store.path().c_str());
  return kExitOk;
}

int doShow(const RunsOptions& o) {
  auto store = openStore(o, false);
  int64_t id = resolveRun(store, o.run);
  auto r = store.getRun(id);
  json j = summaryJson(*r);
  j["config"] = r->config;
  json cps = json::array();
  for (auto& c : store.checkpoints(id))
    cps.push_back({{"step", c.step}, {"path", c.path}, {"checksum", c.checksum}});
  j["checkpoints"] = cps;
  json evs = json::array();
  for (auto& e : store.evals(id)) evs.push_back(e.body);
  j["evals"] = evs;
  json arts = json::array();
  for (auto& a : store.artifacts(id)) arts.push_back({{"kind", a.kind}, {"path", a.path}});
  j["artifacts"] = arts;
  if (o.asJson) {
    std::cout << j.dump(2) << "\n";
    return kExitOk;
  }
  std::printf("run %lld: %s\n", static_cast<long long>(r->id), r->name.c_str());
  std::printf("  status      %s%s%s\n", r->status.c_str(), r->reason.empty() ? "" : " - ",
              r->reason.c_str());
  std::printf("  backend     %s, %d rank(s)\n", r->backend.c_str(), r->ranks);
  std::printf("  created     %s\n  started     %s\n  finished    %s\n",
              formatTime(r->created).c_str(), formatTime(r->started).c_str(),
              formatTime(r->finished).c_str());
  std::printf("  steps       %lld (last step %lld)\n", static_cast<long long>(r->steps),
              static_cast<long long>(r->lastStep));
  std::printf("  last loss   %s\n  best eval   %s\n  tokens/s    %s\n  peak memory %s\n",
              fmtOpt(r->lastLoss).c_str(), fmtOpt(r->bestEvalLoss).c_str(),
              fmtOpt(r->tokensPerS, 6).c_str(), bytes(r->peakMemory).c_str());
  std::string tags;
  for (auto& t : r->tags) tags += (tags.empty() ? "" : ", ") + t;
  std::printf("  tags        %s\n  notes       %s\n  run dir     %s\n", tags.c_str(),
              r->notes.c_str(), r->runDir.c_str());
  if (r->parentRun) std::printf("  resumed from run %lld\n", static_cast<long long>(r->parentRun));
  if (r->teacherRun) std::printf("  teacher run %lld\n", static_cast<long long>(r->teacherRun));
  for (auto& c : cps)
    std::printf("  checkpoint  step %s: %s\n", c["step"].dump().c_str(),
                c["path"].get<std::string>().c_str());
  std::printf("  config      %s\n", r->config.is_null() ? "-" : r->config.dump(2).c_str());
  return kExitOk;
}

int writeFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  out.close();
  if (!out) {
    std::fprintf(stderr, "runs export: cannot write %s\n", path.c_str());
    return kExitBadInput;
  }
  return kExitOk;
}

std::string csvNum(const std::optional<double>& v) {
  if (!v) return "";
  std::ostringstream o;
  o << std::setprecision(17) << *v;
  return o.str();
}

int doExport(const RunsOptions& o) {
  if (o.format != "csv" && o.format != "json" && o.format != "chrome") {
    std::fprintf(stderr, "runs export: --format '%s' is not one of csv, json, chrome\n",
                 o.format.c_str());
    return kExitBadInput;
  }
  auto store = openStore(o, false);
  int64_t id = resolveRun(store, o.run);
  std::ostringstream out;
  if (o.format == "csv") {
    out << "step,time,loss,lr,grad_norm,loss_scale,tokens,tokens_per_s,step_ms,skipped\n";
    for (auto& s : store.steps(id)) {
      out << s.step << "," << csvNum(s.time) << "," << csvNum(s.loss) << "," << csvNum(s.lr) << ","
          << csvNum(s.gradNorm) << "," << csvNum(s.lossScale) << ","
          << (s.tokens ? std::to_string(*s.tokens) : "") << "," << csvNum(s.tokensPerS) << ","
          << csvNum(s.stepMs) << "," << (s.skipped ? 1 : 0) << "\n";
    }
  } else if (o.format == "json") {
    auto r = store.getRun(id);
    json j = {{"run", summaryJson(*r)}, {"config", r->config}};
    json steps = json::array();
    for (auto& s : store.steps(id)) steps.push_back(core::toJson(s));
    j["metrics"] = steps;
    json evs = json::array();
    for (auto& e : store.evals(id)) evs.push_back(e.body);
    j["evals"] = evs;
    out << j.dump(1) << "\n";
  } else {
    std::vector<profiler::Span> spans;
    profiler::ChromeTraceOptions opts;
    for (auto& e : store.events(id, {"kernels"})) {
      try {
        auto batch = profiler::spansFromKernelsEvent(e.body);
        spans.insert(spans.end(), batch.begin(), batch.end());
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "runs export: skipping kernels event seq %lld: %s\n",
                     static_cast<long long>(e.seq), ex.what());
      }
    }
    if (spans.empty()) {
      std::fprintf(stderr,
                   "runs export: run %lld has no profile (no `kernels` events); profile a window "
                   "with the profiling config or the `profile` command\n",
                   static_cast<long long>(id));
      return kExitBadInput;
    }
    std::stable_sort(spans.begin(), spans.end(),
                     [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
    profiler::writeChromeTrace(out, spans, {}, opts);
  }
  int rc = writeFile(o.output, out.str());
  if (rc == kExitOk) std::printf("wrote %s\n", o.output.c_str());
  return rc;
}

int doDelete(const RunsOptions& o) {
  auto store = openStore(o, true);
  int64_t id = resolveRun(store, o.run);
  store.deleteRun(id, !o.keepFiles);
  std::printf("deleted run %lld\n", static_cast<long long>(id));
  return kExitOk;
}

// A command to a running run through the control socket in its run folder (the engine that
// records it listens there), whoever started it.
int doControl(const RunsOptions& o, core::CommandType type, const std::string& word) {
  auto store = openStore(o, false);
  const int64_t id = resolveRun(store, o.run);
  const auto run = store.getRun(id);
  core::Command c;
  c.type = type;
  c.steps = o.steps;
  if (!run || run->status != "running") {
    std::fprintf(stderr, "runs: run %lld is %s, not running: nothing to send %s to\n",
                 static_cast<long long>(id), run ? run->status.c_str() : "gone", word.c_str());
    return kExitBadInput;
  }
  const std::string err = core::sendControlLine(run->runDir, core::encodeCommand(c));
  if (!err.empty()) {
    std::fprintf(stderr, "runs: run %lld: %s\n", static_cast<long long>(id), err.c_str());
    return kExitBadInput;
  }
  std::printf("sent %s to run %lld (pid %lld)\n", word.c_str(), static_cast<long long>(id),
              static_cast<long long>(run->pid));
  return kExitOk;
}

int doImport(const RunsOptions& o) {
  auto store = openStore(o, true);
  auto r = store.importEvents(o.source);
  std::printf("%s run %lld from %s: %lld events%s\n", r.replaced ? "replaced" : "imported",
              static_cast<long long>(r.runId), o.source.c_str(), static_cast<long long>(r.events),
              r.badLines ? (", " + std::to_string(r.badLines) + " bad lines skipped").c_str() : "");
  return kExitOk;
}

template <class F>
std::function<void()> guarded(F fn, int& exitCode) {
  return [fn, &exitCode] {
    try {
      exitCode = fn();
    } catch (const StoreError& e) {
      std::fprintf(stderr, "trainscope-engine runs: %s\n", e.what());
      exitCode = kExitBadInput;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainscope-engine runs: error: %s\n", e.what());
      exitCode = kExitBadInput;
    }
  };
}

}  // namespace

void addRunsCommand(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<RunsOptions>();
  auto* runs = app.add_subcommand("runs", "Browse, export, delete and import recorded runs");
  runs->require_subcommand(1);
  auto addDb = [opts](CLI::App* c) {
    c->add_option("--db", opts->db,
                  "Run database (default $TRAINSCOPE_DB, else $XDG_DATA_HOME/trainscope/runs.db, "
                  "else ~/.local/share/trainscope/runs.db)");
  };

  auto* list = runs->add_subcommand("list", "List runs");
  addDb(list);
  list->add_option("--status", opts->statuses,
                   "Only runs with this status (running, completed, stopped, failed, crashed); "
                   "repeatable");
  list->add_option("--tag", opts->tag, "Only runs with this tag");
  list->add_option("--name", opts->name, "Only runs whose name contains this text");
  list->add_option("--config", opts->config, "Only runs whose config has path=value");
  list->add_option("--since", opts->since, "Created at or after (YYYY-MM-DD or epoch seconds)");
  list->add_option("--until", opts->until, "Created before (YYYY-MM-DD or epoch seconds)");
  list->add_option("--sort", opts->sort,
                   "created|name|status|steps|loss|eval_loss|tokens_per_s|memory|id");
  list->add_flag("--asc", opts->ascending, "Ascending order (default descending)");
  list->add_option("--limit", opts->limit, "At most this many runs");
  list->add_flag("--json", opts->asJson, "Print JSON");
  list->callback(guarded([opts] { return doList(*opts); }, exitCode));

  auto* show = runs->add_subcommand("show", "Show one run");
  addDb(show);
  show->add_option("run", opts->run, "Run id or name")->required();
  show->add_flag("--json", opts->asJson, "Print JSON");
  show->callback(guarded([opts] { return doShow(*opts); }, exitCode));

  auto* exp = runs->add_subcommand("export",
                                   "Export a run's metrics (csv, json) or profile "
                                   "(chrome trace)");
  addDb(exp);
  exp->add_option("run", opts->run, "Run id or name")->required();
  exp->add_option("--format", opts->format, "csv | json | chrome")->required();
  exp->add_option("--output", opts->output, "Output file")->required();
  exp->callback(guarded([opts] { return doExport(*opts); }, exitCode));

  auto* del = runs->add_subcommand("delete", "Delete a run and the files it recorded");
  addDb(del);
  del->add_option("run", opts->run, "Run id or name")->required();
  del->add_flag("--keep-files", opts->keepFiles, "Keep the run directory's files");
  del->callback(guarded([opts] { return doDelete(*opts); }, exitCode));

  // The control commands of docs/protocol.md, to a run started anywhere on this machine.
  const std::pair<const char*, core::CommandType> controls[] = {
      {"stop", core::CommandType::Stop},
      {"pause", core::CommandType::Pause},
      {"resume", core::CommandType::Resume},
      {"checkpoint", core::CommandType::Checkpoint},
      {"profile", core::CommandType::Profile}};
  for (const auto& [word, type] : controls) {
    auto* c = runs->add_subcommand(
        word, std::string("Send `") + word + "` to a running run (through its control socket)");
    addDb(c);
    c->add_option("run", opts->run, "Run id or name")->required();
    if (type == core::CommandType::Profile)
      c->add_option("--steps", opts->steps, "Steps to profile (0: the config's profile.active)")
          ->check(CLI::NonNegativeNumber);
    const core::CommandType t = type;
    const std::string name = word;
    c->callback(guarded([opts, t, name] { return doControl(*opts, t, name); }, exitCode));
  }

  auto* imp = runs->add_subcommand("import",
                                   "Load a run directory's events.ndjson into the "
                                   "database");
  addDb(imp);
  imp->add_option("source", opts->source, "Run directory or events.ndjson file")->required();
  imp->callback(guarded([opts] { return doImport(*opts); }, exitCode));
}

}  // namespace ts::app
