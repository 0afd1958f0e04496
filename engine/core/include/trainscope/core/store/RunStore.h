#pragma once
// The run store: one SQLite file (WAL, busy timeout, foreign keys on) holding every run. The
// engine writes through RunRecorder; the GUI and `trainscope-engine runs` read through RunStore.
// A RunStore is one connection: use one per thread (calls are serialized internally anyway).
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ts::core {

// Current schema version (PRAGMA user_version). Older files are migrated forward on a
// read-write open; newer files are refused.
inline constexpr int kRunStoreSchemaVersion = 3;

class StoreError : public std::runtime_error {
 public:
  enum class Kind {
    NotFound,
    Corrupt,
    Locked,
    ReadOnly,
    Full,
    TooNew,
    NeedsMigration,
    BadInput,
    Other
  };
  StoreError(Kind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// Run statuses: running | completed | stopped | failed | crashed. `crashed` is derived for a
// `running` run whose heartbeat is older than staleAfterSeconds and whose process is gone
// (same host: pid not alive; other host: heartbeat older than 4x the threshold). A read-write
// open also writes that status back.
struct RunSummary {
  int64_t id = 0;
  std::string name;
  std::vector<std::string> tags;
  std::string notes;
  double created = 0, started = 0, finished = 0;  // seconds since the Unix epoch; 0 = unset
  double heartbeat = 0;
  std::string status;
  std::string reason;  // from the `finished` event (or why it was marked failed/crashed)
  std::string backend;
  int ranks = 1;
  int64_t steps = 0;                   // number of step events recorded
  int64_t lastStep = -1;               // highest step number recorded (-1 = none)
  std::optional<double> lastLoss;      // loss of the highest step
  std::optional<double> bestEvalLoss;  // minimum eval loss
  std::optional<double> tokensPerS;    // of the highest step
  std::optional<double> accuracy;      // `accuracy` of the latest eval that sent one, in [0, 1]
  bool profiled = false;               // at least one `kernels` event (a kernel timeline)
  int64_t peakMemory = 0;              // max over ranks of the summed device-tier peaks, bytes
  int64_t parentRun = 0;               // resumed from (0 = none)
  int64_t teacherRun = 0;              // distillation teacher (0 = none)
  int64_t pid = 0;
  std::string host;
  std::string runDir;
};

struct RunDetail : RunSummary {
  nlohmann::json config;  // resolved config (null when no `config` event was recorded)
};

enum class RunSortKey {
  Created,
  Name,
  Status,
  Steps,
  LastLoss,
  BestEvalLoss,
  TokensPerS,
  PeakMemory,
  Id
};

struct RunFilter {
  std::vector<std::string> statuses;  // any of these (empty = all); `crashed` included
  std::string tag;                    // exact tag (empty = any)
  std::string nameContains;           // case-insensitive substring of name (empty = any)
  std::optional<double> createdFrom;  // created >= (epoch seconds)
  std::optional<double> createdTo;    // created <  (epoch seconds)
  // Config field: dotted path ("optimizer.lr" or "$.optimizer.lr") = value. The value is
  // compared as a number when it parses as one, true/false as booleans, else as text.
  std::string configPath;
  std::string configValue;
  RunSortKey sort = RunSortKey::Created;
  bool descending = true;
  int limit = -1;  // -1 = all
  int offset = 0;
};

// Metric columns of the per-step table (names as in the `step` event).
enum class MetricColumn { Loss, Lr, GradNorm, LossScale, Tokens, TokensPerS, StepMs, Skipped };
std::string_view toString(MetricColumn c);  // "loss", "grad_norm", ...
std::optional<MetricColumn> metricColumnFromString(std::string_view s);
std::vector<MetricColumn> allMetricColumns();

// One bucket of a (possibly downsampled) series. Undownsampled: one step per point and
// min == max == mean == the value.
struct MetricPoint {
  int64_t firstStep = 0, lastStep = 0;
  double min = 0, max = 0, mean = 0;
  int64_t count = 1;
};
struct MetricSeries {
  MetricColumn column = MetricColumn::Loss;
  std::vector<MetricPoint> points;
  int64_t totalSteps = 0;  // steps with a value in the requested range
  bool downsampled = false;
};

struct StepRow {  // one full row of the metrics table
  int64_t step = 0;
  double time = 0;
  std::optional<double> loss, lr, gradNorm, lossScale, tokensPerS, stepMs;
  std::optional<int64_t> tokens;
  bool skipped = false;
};
// The row as `runs export --format json` writes it (absent values are null).
nlohmann::json toJson(const StepRow& row);

struct EvalRow {
  int64_t step = 0;
  double time = 0;
  std::optional<double> loss;
  nlohmann::json body;  // the whole eval event
};

struct MemorySampleRow {
  int64_t seq = 0;  // event seq the sample came from
  double time = 0;
  int64_t step = -1;     // step field of the event if any
  bool planned = false;  // true: from `memory_plan` (the estimate); false: measured
  int rank = 0;
  std::string tier;      // device | host | nvme
  std::string category;  // parameters | gradients | optimizer_state | activations | workspace
  int64_t current = 0, peak = 0;
};

struct KernelSummaryRow {
  int64_t seq = 0;
  double time = 0;
  int64_t window = 0;
  nlohmann::json body;  // the whole kernel_summary event (window, ops, ...)
};

struct EventRow {
  int64_t seq = 0;
  double time = 0;
  std::string type;
  nlohmann::json body;  // the whole event
};

struct CheckpointRow {
  int64_t step = 0;
  double time = 0;
  std::string path;
  std::string checksum;
};

struct ArtifactRow {
  int64_t id = 0;
  std::string kind;  // e.g. "trace", "events"
  std::string path;
  double time = 0;
};

struct ConfigDifference {
  std::string path;                    // dotted JSON path
  std::vector<nlohmann::json> values;  // one per compared run (null = absent)
};
struct RunComparison {
  std::vector<RunDetail> runs;
  std::vector<ConfigDifference> configDifferences;  // only the leaves that differ
};

class RunStore {
 public:
  enum class Mode { ReadOnly, ReadWrite };
  struct Options {
    int busyTimeoutMs = 5000;
    double staleAfterSeconds = 15;  // heartbeat age after which a dead `running` run is `crashed`
    bool create = true;             // ReadWrite: create the file (and its directories) if missing
  };

  // Throws StoreError naming the file and what is wrong (missing, not a database, locked past
  // the timeout, read-only, full, written by a newer version, ...).
  static RunStore open(const std::string& path, Mode mode, Options options);
  static RunStore open(const std::string& path, Mode mode = Mode::ReadWrite) {
    return open(path, mode, Options{});
  }
  RunStore(RunStore&&) noexcept;
  RunStore& operator=(RunStore&&) noexcept;
  ~RunStore();

  const std::string& path() const;
  bool readOnly() const;
  int schemaVersion() const;

  // Queries (all throw StoreError on database failures; unknown run ids give nullopt / empty).
  std::vector<RunSummary> listRuns(const RunFilter& filter = {});
  int64_t countRuns(const RunFilter& filter = {});  // ignores limit/offset
  std::optional<RunDetail> getRun(int64_t id);
  // Every run with its config, newest first, in one query (what getRun gives, for all runs).
  std::vector<RunDetail> allRunDetails();
  // Downsampled in SQL to at most ~maxPoints buckets with min/max/mean each, so spikes survive.
  MetricSeries metrics(int64_t id, MetricColumn column, int maxPoints = 2000,
                       std::optional<int64_t> fromStep = {}, std::optional<int64_t> toStep = {});
  std::vector<StepRow> steps(int64_t id, std::optional<int64_t> fromStep = {},
                             std::optional<int64_t> toStep = {});
  std::vector<EvalRow> evals(int64_t id);
  // afterSeq: only samples of later events (a follower's next poll).
  std::vector<MemorySampleRow> memorySamples(int64_t id, bool includePlan = true,
                                             int64_t afterSeq = -1);
  std::vector<KernelSummaryRow> kernelSummaries(int64_t id);
  // Stored events (all types except step, memory and kernel_summary, which live in their own
  // tables; memory_plan, eval and checkpoint are in both), by seq.
  // `types` empty = all.
  std::vector<EventRow> events(int64_t id, const std::vector<std::string>& types = {},
                               int limit = -1, int offset = 0);
  std::vector<CheckpointRow> checkpoints(int64_t id);
  std::vector<ArtifactRow> artifacts(int64_t id);
  RunComparison compare(const std::vector<int64_t>& ids);

  // Edits (throw StoreError{ReadOnly} on a read-only store; return false for an unknown id).
  bool rename(int64_t id, const std::string& name);
  bool setTags(int64_t id, const std::vector<std::string>& tags);
  bool setNotes(int64_t id, const std::string& notes);
  int64_t addArtifact(int64_t id, const std::string& kind, const std::string& path);
  // Deletes the run's rows and, when deleteFiles, its run directory's files that the recorder
  // wrote (events.ndjson, recorder.json) plus its artifacts and checkpoints; the directory
  // itself is removed when it ends up empty. Returns false for an unknown id.
  bool deleteRun(int64_t id, bool deleteFiles = true);
  // Marks dead `running` runs as `crashed` (done on every read-write open). Returns how many.
  int markCrashedRuns();

  // Loads an events.ndjson (a file, or a run directory holding one) into the store. A run
  // already recorded from the same run directory is replaced (so importing twice, or after a
  // partial recording, gives one complete run); otherwise a new run is created, named after
  // recorder.json / the config's name / the directory. Bad lines are skipped and counted.
  struct ImportResult {
    int64_t runId = 0;
    int64_t events = 0;
    int64_t badLines = 0;
    bool replaced = false;
  };
  ImportResult importEvents(const std::string& fileOrDir);

  struct Impl;  // internal (RunStore*.cpp / RunRecorder.cpp)
  Impl& impl() { return *impl_; }

 private:
  explicit RunStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ts::core
