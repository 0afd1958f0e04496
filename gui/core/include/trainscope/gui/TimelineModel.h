#pragma once
// The kernel timeline's data: profiler spans of a run (`kernels` events) sorted into lanes
// (rank x host thread / device stream), one track per nesting depth, with a level-of-detail
// pyramid so a frame at any zoom draws a bounded number of blocks, range aggregation by
// kernel/op name, hit testing, correlation lookup (device kernel -> launching host range), step
// boundaries and profile windows. Qt Core only; the widgets only paint what this returns.
//
// Times are ns on one clock for every rank (each rank's spans are shifted by its tracer epoch),
// with 0 at the earliest span.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <QAbstractTableModel>
#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include "trainscope/profiler/Tracer.h"

namespace ts::gui {

// One recorded span (compact; names interned).
struct TimelineSpan {
  int64_t start = 0, end = 0;  // ns, half-open [start, end)
  int64_t step = -1;
  uint64_t correlation = 0;
  int64_t bytes = 0;
  double flops = 0;
  int32_t name = 0;   // index into TimelineData::names()
  int32_t track = 0;  // index into TimelineData::tracks()
  int16_t depth = 0;
  profiler::SpanCategory category = profiler::SpanCategory::Other;
  bool device = false;
  int rank = 0;
  int lane = 0;  // thread index (host) or stream id (device), as recorded
  int64_t duration() const { return end - start; }
};

struct TimelineLane {
  int rank = 0;
  bool device = false;
  int id = 0;          // thread index or stream id
  QString name;        // "rank 0 · thread 2", "rank 1 · GPU stream 7"
  int firstTrack = 0;  // tracks firstTrack .. firstTrack + depths - 1, one per depth
  int depths = 1;
};

// A profile window as the engine recorded it, with its extent on the timeline when loaded.
struct ProfileWindowInfo {
  int rank = 0;
  int window = 0;
  int64_t firstStep = 0, lastStep = 0;
  int64_t start = 0, end = 0;  // ns on the timeline; 0/0 when not known (listed, not loaded)
};

struct StepMark {
  int64_t step = 0;
  int64_t start = 0, end = 0;  // the step's "step" spans if recorded, else its spans' extent
};

// What a query returns: one span (count == 1, span = its id) or several spans narrower than a
// pixel merged with their sub-pixel neighbours (count > 1, span = the first one's id).
struct TimelineBlock {
  int64_t start = 0, end = 0;
  int32_t span = 0;
  int32_t count = 1;
  int64_t busy = 0;                                                 // summed span durations
  profiler::SpanCategory category = profiler::SpanCategory::Other;  // busiest category
  int depth = 0;
};

// One row of a range aggregation (grouped by name and host/device).
struct RangeRow {
  std::string name;
  profiler::SpanCategory category = profiler::SpanCategory::Other;
  bool device = false;
  int64_t count = 0;    // spans overlapping the range
  int64_t totalNs = 0;  // their time inside the range (clipped to it)
  double meanNs = 0;    // mean full duration of those spans
  // Self (exclusive) time: totalNs less the time of the spans nested directly inside them,
  // so a parent and its children are not counted twice.
  int64_t selfNs = 0;
  double share = 0;  // selfNs / sum of selfNs of all rows, in [0, 1]: the shares add to 100%
};

class TimelineData {
 public:
  // spans: start_ns already on one clock for all ranks. windows: as recorded (extents are
  // filled in from the steps they cover).
  static std::shared_ptr<const TimelineData> build(std::vector<profiler::Span> spans,
                                                   std::vector<ProfileWindowInfo> windows = {},
                                                   int64_t originUnixNs = 0);

  size_t spanCount() const { return spans_.size(); }
  const TimelineSpan& span(int32_t id) const { return spans_[static_cast<size_t>(id)]; }
  const std::string& name(int32_t nameId) const { return names_[static_cast<size_t>(nameId)]; }
  const std::string& spanName(int32_t id) const { return name(span(id).name); }
  const std::vector<TimelineLane>& lanes() const { return lanes_; }
  int trackCount() const { return static_cast<int>(tracks_.size()); }
  int laneOfTrack(int track) const { return tracks_[static_cast<size_t>(track)].lane; }
  int depthOfTrack(int track) const { return tracks_[static_cast<size_t>(track)].depth; }
  // Span ids of a track, ordered by start.
  std::pair<int32_t, int32_t> trackSpans(int track) const {
    const auto& t = tracks_[static_cast<size_t>(track)];
    return {t.begin, t.end};
  }
  const std::vector<StepMark>& steps() const { return steps_; }
  const std::vector<ProfileWindowInfo>& windows() const { return windows_; }
  // Categories present, in enum order.
  const std::vector<profiler::SpanCategory>& categories() const { return categories_; }
  int64_t begin() const { return begin_; }                // 0 unless empty
  int64_t end() const { return end_; }                    // latest span end
  int64_t originUnixNs() const { return originUnixNs_; }  // Unix time of t = 0

  // Blocks of `track` overlapping [t0, t1] at nsPerPixel (> 0), ordered by start. Neighbours
  // closer than a pixel are merged when one of them is narrower than a pixel, so a track gives
  // at most about 2 * (t1 - t0) / nsPerPixel + 4 blocks however many spans it holds, and the
  // blocks cover exactly the pixels the spans cover. Appends to out.
  void query(int track, int64_t t0, int64_t t1, double nsPerPixel,
             std::vector<TimelineBlock>& out) const;
  // The span of `track` containing t, else the nearest one within slackNs; -1 when none.
  int32_t spanAt(int track, int64_t t, int64_t slackNs = 0) const;
  // Device span -> the host range that launched it (same rank and correlation id); -1 if none.
  int32_t launchingRange(int32_t id) const;
  // Host range -> the device spans it launched.
  std::vector<int32_t> launchedSpans(int32_t id) const;
  // The enclosing range one depth up in the same lane; -1 at depth 0.
  int32_t parentRange(int32_t id) const;
  // Spans overlapping [t0, t1) on the given lanes (empty = all), grouped by (name, device),
  // ordered by total time descending, then name.
  std::vector<RangeRow> aggregate(int64_t t0, int64_t t1, const std::vector<int>& lanes = {}) const;
  // The recorded window whose steps include `step`.
  std::optional<ProfileWindowInfo> windowForStep(int64_t step) const;
  std::optional<StepMark> stepMark(int64_t step) const;

  // The spans as profiler spans (timeline clock), for Chrome trace export.
  std::vector<profiler::Span> toProfilerSpans() const;

 private:
  struct Level {  // merged blocks of one track at gap threshold `gap`
    int64_t gap = 0;
    std::vector<int64_t> start, end, maxEnd;  // maxEnd: prefix maximum of end
    std::vector<int32_t> first;               // first span id; count = next first - first
    std::vector<int64_t> busy;
    std::vector<uint8_t> category;
  };
  struct Track {
    int lane = 0, depth = 0;
    int32_t begin = 0, end = 0;  // span ids
    std::vector<Level> levels;   // coarser and coarser
  };
  struct CorrEntry {
    int rank;
    uint64_t corr;
    bool device;
    int32_t id;
  };
  using LaneKey = std::tuple<int, bool, int>;  // rank, device, lane id
  std::map<LaneKey, int> addLanes(const std::vector<profiler::Span>& in);
  void addSpans(std::vector<profiler::Span>& in, const std::map<LaneKey, int>& laneIndex,
                int64_t minStart);
  void indexTracks(const std::vector<int32_t>& perTrack);
  void buildLevels(Track& t);
  void addSteps();
  void addWindows(std::vector<ProfileWindowInfo> windows);
  void addCategories();
  void addCorrelationIndex();

  std::vector<TimelineSpan> spans_;  // by track, then start
  std::vector<int64_t> maxEnd_;      // per track prefix maximum of end, indexed by span id
  std::vector<std::string> names_;
  std::vector<TimelineLane> lanes_;
  std::vector<Track> tracks_;
  std::vector<StepMark> steps_;
  std::vector<ProfileWindowInfo> windows_;
  std::vector<CorrEntry> corr_;  // sorted by (rank, corr, device)
  std::vector<profiler::SpanCategory> categories_;
  int64_t begin_ = 0, end_ = 0, originUnixNs_ = 0;
};

// "1.25 ms", "830 µs", "75 ns", "2.50 s".
QString formatDurationNs(double ns);

// The profile windows a run recorded (from its kernel_summary events, cheap: no spans are
// read). Empty with *error set when the database cannot be read.
std::vector<ProfileWindowInfo> listProfileWindows(const std::string& dbPath, int64_t runId,
                                                  QString* error = nullptr);
// The window among `windows` whose steps include `step`.
std::optional<ProfileWindowInfo> windowCoveringStep(const std::vector<ProfileWindowInfo>& windows,
                                                    int64_t step);

// Reads every `kernels` event of a run and builds its timeline. Throws std::runtime_error with
// a message naming the run and the database (no profile, unreadable database, ...); malformed
// batches are skipped and described in *warnings.
std::shared_ptr<const TimelineData> loadTimeline(const std::string& dbPath, int64_t runId,
                                                 QStringList* warnings = nullptr);

// Holds the timeline shown by a view; loads runs on a worker thread and applies the result on
// the GUI thread. A newer load supersedes one still running.
class TimelineModel : public QObject {
  Q_OBJECT
 public:
  explicit TimelineModel(QObject* parent = nullptr);
  ~TimelineModel() override;

  const TimelineData* data() const { return data_.get(); }
  std::shared_ptr<const TimelineData> shared() const { return data_; }
  void setData(std::shared_ptr<const TimelineData> data);
  void setSpans(std::vector<profiler::Span> spans, std::vector<ProfileWindowInfo> windows = {});
  void clear();

  void loadRun(const std::string& dbPath, int64_t runId);
  bool loading() const { return loading_; }
  int64_t runId() const { return runId_; }
  const QStringList& warnings() const { return warnings_; }

 signals:
  void changed();  // new data (or cleared)
  void loadFailed(const QString& error);

 private:
  struct Result;
  std::shared_ptr<const TimelineData> data_;
  QFutureWatcher<std::shared_ptr<Result>>* watcher_ = nullptr;
  uint64_t generation_ = 0;
  bool loading_ = false;
  int64_t runId_ = 0;
  QStringList warnings_;
};

// A range aggregation as a table: Name, Category, Count, Total, Mean, Share. Display text is
// formatted; Qt::UserRole gives the raw number (ns, fraction) for sorting and tests.
class TimelineRangeModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Category, Count, Total, Mean, Share, ColumnCount };
  explicit TimelineRangeModel(QObject* parent = nullptr);

  void setRows(std::vector<RangeRow> rows, int64_t t0, int64_t t1);
  void clear();
  const std::vector<RangeRow>& rows() const { return rows_; }
  int64_t rangeStart() const { return t0_; }
  int64_t rangeEnd() const { return t1_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;

 private:
  std::vector<RangeRow> rows_;
  int64_t t0_ = 0, t1_ = 0;
};

}  // namespace ts::gui
