#include "trainscope/gui/TimelineModel.h"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

#include <QtConcurrent/QtConcurrentRun>

#include "trainscope/core/store/RunStore.h"
#include "trainscope/profiler/Aggregation.h"

namespace ts::gui {

namespace {

constexpr int kCategoryCount = static_cast<int>(profiler::SpanCategory::Other) + 1;
// Level k of the pyramid merges at gap kBaseGap * kLevelFactor^k. Below kBaseGap ns per pixel
// the raw spans are walked: a view that narrow holds few spans.
constexpr int64_t kBaseGap = 64;
constexpr int64_t kLevelFactor = 4;
// A level that merges less than this fraction of its input is not stored (saves memory on
// sparse tracks; the finer level answers for it).
constexpr double kMinLevelReduction = 0.9;

// One item the merge walks: a raw span or a block of a level.
struct Item {
  int64_t start, end;
  int32_t first, count;
  int64_t busy;
  int category;
};

// Greedy left-to-right merge shared by the pyramid and the queries: an item joins the open
// block when the gap between them is under `gap` and one of the two is narrower than `gap`.
// Consecutive outputs are then either `gap` apart or both at least `gap` wide, which bounds
// the output to about 2 * extent / gap + 4 blocks, and every bridged gap is under `gap`.
class Merger {
 public:
  explicit Merger(int64_t gap) : gap_(gap) {}
  template <class Emit>
  void push(const Item& it, Emit&& sink) {
    if (open_) {
      const bool narrow = cur_.end - cur_.start < gap_ || it.end - it.start < gap_;
      if (it.start - cur_.end < gap_ && narrow) {
        cur_.end = std::max(cur_.end, it.end);
        cur_.count += it.count;
        cur_.busy += it.busy;
        cats_[static_cast<size_t>(it.category)] += it.busy;
        return;
      }
      flush(sink);
    }
    cur_ = it;
    cats_.fill(0);
    cats_[static_cast<size_t>(it.category)] = it.busy;
    open_ = true;
  }
  template <class Emit>
  void flush(Emit&& sink) {
    if (!open_) return;
    if (cur_.count > 1) {
      int best = 0;
      for (int c = 1; c < kCategoryCount; ++c)
        if (cats_[static_cast<size_t>(c)] > cats_[static_cast<size_t>(best)]) best = c;
      cur_.category = best;
    }
    sink(cur_);
    open_ = false;
  }

 private:
  int64_t gap_;
  bool open_ = false;
  Item cur_{};
  std::array<int64_t, kCategoryCount> cats_{};
};

QString laneName(int rank, bool device, int id) {
  return device ? QStringLiteral("rank %1 · GPU stream %2").arg(rank).arg(id)
                : QStringLiteral("rank %1 · thread %2").arg(rank).arg(id);
}

}  // namespace

QString formatDurationNs(double ns) {
  const double a = std::abs(ns);
  if (a >= 1e9) return QString::number(ns / 1e9, 'f', 2) + " s";
  if (a >= 1e6) return QString::number(ns / 1e6, 'f', a >= 1e8 ? 1 : 2) + " ms";
  if (a >= 1e3) return QString::number(ns / 1e3, 'f', a >= 1e5 ? 0 : 1) + " µs";
  return QString::number(ns, 'f', 0) + " ns";
}

// ---------------------------------------------------------------------------------- build

std::shared_ptr<const TimelineData> TimelineData::build(std::vector<profiler::Span> in,
                                                        std::vector<ProfileWindowInfo> windows,
                                                        int64_t originUnixNs) {
  auto d = std::shared_ptr<TimelineData>(new TimelineData);
  int64_t minStart = in.empty() ? 0 : in.front().start_ns;
  for (const auto& s : in) minStart = std::min(minStart, s.start_ns);
  d->originUnixNs_ = originUnixNs + minStart;
  const auto laneIndex = d->addLanes(in);
  d->addSpans(in, laneIndex, minStart);
  d->addSteps();
  d->addWindows(std::move(windows));
  d->addCategories();
  d->addCorrelationIndex();
  return d;
}

// Lanes: rank, host threads before device streams, by id; one track per nesting depth.
// Returns each lane's index by (rank, device, lane id).
std::map<TimelineData::LaneKey, int> TimelineData::addLanes(const std::vector<profiler::Span>& in) {
  std::map<LaneKey, int> laneDepth;
  for (const auto& s : in) {
    int& depth = laneDepth[{s.rank, s.device, s.lane}];
    depth = std::max(depth, std::clamp(s.depth, 0, 255));
  }
  std::map<LaneKey, int> laneIndex;
  for (const auto& [key, depth] : laneDepth) {
    TimelineLane l;
    std::tie(l.rank, l.device, l.id) = key;
    l.name = laneName(l.rank, l.device, l.id);
    l.firstTrack = static_cast<int>(tracks_.size());
    l.depths = depth + 1;
    laneIndex[key] = static_cast<int>(lanes_.size());
    for (int k = 0; k <= depth; ++k) {
      Track t;
      t.lane = static_cast<int>(lanes_.size());
      t.depth = k;
      tracks_.push_back(std::move(t));
    }
    lanes_.push_back(std::move(l));
  }
  return laneIndex;
}

// Spans, interned names, grouped by track (counting sort) and then by start. Consumes `in`.
void TimelineData::addSpans(std::vector<profiler::Span>& in,
                            const std::map<LaneKey, int>& laneIndex, int64_t minStart) {
  std::unordered_map<std::string, int32_t> nameIds;
  std::vector<TimelineSpan> tmp;
  tmp.reserve(in.size());
  std::vector<int32_t> perTrack(tracks_.size() + 1, 0);
  for (auto& s : in) {
    TimelineSpan t;
    t.start = s.start_ns - minStart;
    t.end = t.start + std::max<int64_t>(0, s.duration_ns);
    t.step = s.step;
    t.correlation = s.correlation;
    t.bytes = s.bytes;
    t.flops = s.flops;
    auto [it, fresh] = nameIds.try_emplace(s.name, static_cast<int32_t>(names_.size()));
    if (fresh) names_.push_back(std::move(s.name));
    t.name = it->second;
    t.depth = static_cast<int16_t>(std::clamp(s.depth, 0, 255));
    t.category = s.category;
    t.device = s.device;
    t.rank = s.rank;
    t.lane = s.lane;
    const auto& lane = lanes_[static_cast<size_t>(laneIndex.at({s.rank, s.device, s.lane}))];
    t.track = lane.firstTrack + t.depth;
    ++perTrack[static_cast<size_t>(t.track) + 1];
    tmp.push_back(t);
  }
  in.clear();
  in.shrink_to_fit();
  std::partial_sum(perTrack.begin(), perTrack.end(), perTrack.begin());
  spans_.resize(tmp.size());
  {
    std::vector<int32_t> next(perTrack.begin(), perTrack.end() - 1);
    for (auto& t : tmp) spans_[static_cast<size_t>(next[static_cast<size_t>(t.track)]++)] = t;
  }
  tmp.clear();
  tmp.shrink_to_fit();
  indexTracks(perTrack);
}

// Each track's span range (sorted by start), the prefix maximum of ends, the extent, and the
// level-of-detail pyramid.
void TimelineData::indexTracks(const std::vector<int32_t>& perTrack) {
  maxEnd_.resize(spans_.size());
  for (size_t k = 0; k < tracks_.size(); ++k) {
    Track& t = tracks_[k];
    t.begin = perTrack[k];
    t.end = perTrack[k + 1];
    auto b = spans_.begin() + t.begin, e = spans_.begin() + t.end;
    if (!std::is_sorted(b, e, [](auto& x, auto& y) { return x.start < y.start; }))
      std::stable_sort(b, e, [](auto& x, auto& y) { return x.start < y.start; });
    int64_t m = INT64_MIN;
    for (int32_t i = t.begin; i < t.end; ++i) {
      m = std::max(m, spans_[static_cast<size_t>(i)].end);
      maxEnd_[static_cast<size_t>(i)] = m;
      end_ = std::max(end_, m);
    }
    buildLevels(t);
  }
}

// Step boundaries: the "step" ranges when recorded, else the extent of the step's spans.
void TimelineData::addSteps() {
  std::map<int64_t, StepMark> stepRanges, spanRanges;
  auto widen = [](std::map<int64_t, StepMark>& m, const TimelineSpan& s) {
    auto [it, fresh] = m.try_emplace(s.step, StepMark{s.step, s.start, s.end});
    if (!fresh) {
      it->second.start = std::min(it->second.start, s.start);
      it->second.end = std::max(it->second.end, s.end);
    }
  };
  int64_t lastStep = INT64_MIN;  // spans of one step are mostly consecutive: skip map lookups
  StepMark* cur = nullptr;
  for (const auto& s : spans_) {
    if (s.step < 0) continue;
    if (s.category == profiler::SpanCategory::Step) {
      widen(stepRanges, s);
    } else if (cur && s.step == lastStep) {
      cur->start = std::min(cur->start, s.start);
      cur->end = std::max(cur->end, s.end);
    } else {
      widen(spanRanges, s);
      cur = &spanRanges[s.step];
      lastStep = s.step;
    }
  }
  for (auto& [step, mark] : spanRanges) {
    auto it = stepRanges.find(step);
    steps_.push_back(it != stepRanges.end() ? it->second : mark);
  }
  for (auto& [step, mark] : stepRanges)
    if (!spanRanges.count(step)) steps_.push_back(mark);
  std::sort(steps_.begin(), steps_.end(), [](auto& a, auto& b) { return a.step < b.step; });
}

// Windows: one per (rank, window), extent from the steps it covers.
void TimelineData::addWindows(std::vector<ProfileWindowInfo> windows) {
  std::sort(windows.begin(), windows.end(), [](auto& a, auto& b) {
    return std::tie(a.firstStep, a.rank, a.window) < std::tie(b.firstStep, b.rank, b.window);
  });
  windows.erase(
      std::unique(windows.begin(), windows.end(),
                  [](auto& a, auto& b) { return a.rank == b.rank && a.window == b.window; }),
      windows.end());
  for (auto& w : windows) {
    bool any = false;
    for (const auto& m : steps_) {
      if (m.step < w.firstStep || m.step > w.lastStep) continue;
      w.start = any ? std::min(w.start, m.start) : m.start;
      w.end = any ? std::max(w.end, m.end) : m.end;
      any = true;
    }
  }
  windows_ = std::move(windows);
}

// The categories present, in enum order (the legend's).
void TimelineData::addCategories() {
  std::array<bool, kCategoryCount> seen{};
  for (const auto& s : spans_) seen[static_cast<size_t>(s.category)] = true;
  for (int c = 0; c < kCategoryCount; ++c)
    if (seen[static_cast<size_t>(c)]) categories_.push_back(static_cast<profiler::SpanCategory>(c));
}

// Correlation index: spans with a correlation id, by (rank, id, device).
void TimelineData::addCorrelationIndex() {
  for (int32_t i = 0; i < static_cast<int32_t>(spans_.size()); ++i) {
    const auto& s = spans_[static_cast<size_t>(i)];
    if (s.correlation) corr_.push_back({s.rank, s.correlation, s.device, i});
  }
  std::sort(corr_.begin(), corr_.end(), [](const CorrEntry& a, const CorrEntry& b) {
    return std::tie(a.rank, a.corr, a.device, a.id) < std::tie(b.rank, b.corr, b.device, b.id);
  });
}

void TimelineData::buildLevels(Track& t) {
  size_t prevCount = static_cast<size_t>(t.end - t.begin);
  if (prevCount < 2) return;
  // Items of the finest stored level (raw spans to begin with).
  std::vector<Item> items;
  items.reserve(prevCount);
  for (int32_t i = t.begin; i < t.end; ++i) {
    const auto& s = spans_[static_cast<size_t>(i)];
    items.push_back({s.start, s.end, i, 1, s.end - s.start, static_cast<int>(s.category)});
  }
  std::vector<Item> next;
  const int64_t extent = maxEnd_[static_cast<size_t>(t.end - 1)] - items.front().start;
  for (int64_t gap = kBaseGap; items.size() > 1 && gap / kLevelFactor <= extent;
       gap *= kLevelFactor) {
    next.clear();
    Merger m(gap);
    auto sink = [&](const Item& it) { next.push_back(it); };
    for (const auto& it : items) m.push(it, sink);
    m.flush(sink);
    if (static_cast<double>(next.size()) > kMinLevelReduction * static_cast<double>(items.size()))
      continue;  // barely merges: keep walking the finer level
    Level lv;
    lv.gap = gap;
    const size_t n = next.size();
    lv.start.resize(n);
    lv.end.resize(n);
    lv.maxEnd.resize(n);
    lv.first.resize(n);
    lv.busy.resize(n);
    lv.category.resize(n);
    int64_t mx = INT64_MIN;
    for (size_t i = 0; i < n; ++i) {
      lv.start[i] = next[i].start;
      lv.end[i] = next[i].end;
      mx = std::max(mx, next[i].end);
      lv.maxEnd[i] = mx;
      lv.first[i] = next[i].first;
      lv.busy[i] = next[i].busy;
      lv.category[i] = static_cast<uint8_t>(next[i].category);
    }
    t.levels.push_back(std::move(lv));
    items.swap(next);
  }
}

// ---------------------------------------------------------------------------------- queries

void TimelineData::query(int track, int64_t t0, int64_t t1, double nsPerPixel,
                         std::vector<TimelineBlock>& out) const {
  if (track < 0 || track >= trackCount() || t1 < t0) return;
  const Track& t = tracks_[static_cast<size_t>(track)];
  if (t.begin == t.end) return;
  const int64_t px = std::max<int64_t>(1, static_cast<int64_t>(nsPerPixel));
  const Level* lv = nullptr;
  for (const auto& l : t.levels)
    if (l.gap <= px) lv = &l;

  Merger m(px);
  auto sink = [&](const Item& it) {
    out.push_back({it.start, it.end, it.first, it.count, it.busy,
                   static_cast<profiler::SpanCategory>(it.category), t.depth});
  };
  // The first item that can overlap t0 is the first whose prefix-maximum end passes t0.
  if (!lv) {
    const auto b = maxEnd_.begin() + t.begin, e = maxEnd_.begin() + t.end;
    for (auto i = static_cast<int32_t>(std::upper_bound(b, e, t0) - maxEnd_.begin()); i < t.end;
         ++i) {
      const auto& s = spans_[static_cast<size_t>(i)];
      if (s.start > t1) break;
      if (s.end < t0) continue;
      m.push({s.start, s.end, i, 1, s.end - s.start, static_cast<int>(s.category)}, sink);
    }
  } else {
    const size_t n = lv->start.size();
    for (size_t i = static_cast<size_t>(std::upper_bound(lv->maxEnd.begin(), lv->maxEnd.end(), t0) -
                                        lv->maxEnd.begin());
         i < n; ++i) {
      if (lv->start[i] > t1) break;
      if (lv->end[i] < t0) continue;
      const int32_t next = i + 1 < n ? lv->first[i + 1] : t.end;
      m.push({lv->start[i], lv->end[i], lv->first[i], next - lv->first[i], lv->busy[i],
              lv->category[i]},
             sink);
    }
  }
  m.flush(sink);
}

int32_t TimelineData::spanAt(int track, int64_t t, int64_t slackNs) const {
  if (track < 0 || track >= trackCount()) return -1;
  const Track& tr = tracks_[static_cast<size_t>(track)];
  if (tr.begin == tr.end) return -1;
  auto first = spans_.begin() + tr.begin, last = spans_.begin() + tr.end;
  const int32_t j = static_cast<int32_t>(
      std::partition_point(first, last, [&](const TimelineSpan& s) { return s.start <= t; }) -
      spans_.begin());
  int32_t best = -1;
  int64_t bestDist = INT64_MAX, bestDur = INT64_MAX;
  auto consider = [&](int32_t i) {
    const auto& s = spans_[static_cast<size_t>(i)];
    const int64_t dist = t < s.start ? s.start - t : (t >= s.end ? t - s.end + 1 : 0);
    if (dist > slackNs) return;
    if (dist < bestDist || (dist == bestDist && s.duration() < bestDur)) {
      best = i;
      bestDist = dist;
      bestDur = s.duration();
    }
  };
  // Backwards while an earlier span can still reach t (bounded: overlaps within a depth are
  // rare).
  for (int32_t i = j - 1, n = 0; i >= tr.begin && n < 4096; --i, ++n) {
    if (maxEnd_[static_cast<size_t>(i)] + slackNs < t) break;
    consider(i);
  }
  if (j < tr.end) consider(j);
  return best;
}

int32_t TimelineData::launchingRange(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= spans_.size()) return -1;
  const auto& s = span(id);
  if (!s.device || !s.correlation) return -1;
  const CorrEntry key{s.rank, s.correlation, false, INT32_MIN};
  auto it = std::lower_bound(corr_.begin(), corr_.end(), key, [](auto& a, auto& b) {
    return std::tie(a.rank, a.corr, a.device, a.id) < std::tie(b.rank, b.corr, b.device, b.id);
  });
  if (it == corr_.end() || it->rank != s.rank || it->corr != s.correlation || it->device) return -1;
  return it->id;
}

std::vector<int32_t> TimelineData::launchedSpans(int32_t id) const {
  std::vector<int32_t> out;
  if (id < 0 || static_cast<size_t>(id) >= spans_.size()) return out;
  const auto& s = span(id);
  if (s.device || !s.correlation) return out;
  const CorrEntry key{s.rank, s.correlation, true, INT32_MIN};
  auto it = std::lower_bound(corr_.begin(), corr_.end(), key, [](auto& a, auto& b) {
    return std::tie(a.rank, a.corr, a.device, a.id) < std::tie(b.rank, b.corr, b.device, b.id);
  });
  for (; it != corr_.end() && it->rank == s.rank && it->corr == s.correlation && it->device; ++it)
    out.push_back(it->id);
  return out;
}

int32_t TimelineData::parentRange(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= spans_.size()) return -1;
  const auto& s = span(id);
  if (s.depth == 0) return -1;
  const int parentTrack = s.track - 1;  // tracks of a lane are consecutive by depth
  const int32_t p = spanAt(parentTrack, s.start, 0);
  if (p < 0) return -1;
  const auto& ps = span(p);
  return ps.start <= s.start && s.end <= ps.end ? p : -1;
}

std::vector<RangeRow> TimelineData::aggregate(int64_t t0, int64_t t1,
                                              const std::vector<int>& lanes) const {
  if (t1 < t0) std::swap(t0, t1);
  struct Acc {
    int64_t count = 0, total = 0, self = 0, sumDur = 0;
    int category = 0;
  };
  std::vector<Acc> acc(names_.size() * 2);
  std::vector<bool> useLane(lanes_.size(), lanes.empty());
  for (int l : lanes)
    if (l >= 0 && static_cast<size_t>(l) < lanes_.size()) useLane[static_cast<size_t>(l)] = true;
  for (const auto& tr : tracks_) {
    if (!useLane[static_cast<size_t>(tr.lane)] || tr.begin == tr.end) continue;
    const auto b = maxEnd_.begin() + tr.begin, e = maxEnd_.begin() + tr.end;
    // Overlap of [start, end) with [t0, t1); a zero-length span counts when it lies inside.
    for (auto i = static_cast<int32_t>(std::upper_bound(b, e, t0 - 1) - maxEnd_.begin());
         i < tr.end; ++i) {
      const auto& s = spans_[static_cast<size_t>(i)];
      if (s.start >= t1) break;
      const bool overlaps = s.end > s.start ? s.end > t0 : s.start >= t0;
      if (!overlaps) continue;
      Acc& a = acc[static_cast<size_t>(s.name) * 2 + (s.device ? 1 : 0)];
      if (a.count == 0) a.category = static_cast<int>(s.category);
      ++a.count;
      const int64_t inside = std::min(s.end, t1) - std::max(s.start, t0);
      a.total += inside;
      a.self += inside;
      a.sumDur += s.duration();
      // The parent (same lane, so also counted) loses this time from its self time.
      if (const int32_t p = parentRange(i); p >= 0) {
        const auto& ps = spans_[static_cast<size_t>(p)];
        acc[static_cast<size_t>(ps.name) * 2 + (ps.device ? 1 : 0)].self -= inside;
      }
    }
  }
  std::vector<RangeRow> rows;
  int64_t sum = 0;
  for (size_t k = 0; k < acc.size(); ++k) {
    const Acc& a = acc[k];
    if (!a.count) continue;
    RangeRow r;
    r.name = names_[k / 2];
    r.device = k % 2 == 1;
    r.category = static_cast<profiler::SpanCategory>(a.category);
    r.count = a.count;
    r.totalNs = std::max<int64_t>(0, a.total);
    r.meanNs = static_cast<double>(a.sumDur) / static_cast<double>(a.count);
    r.selfNs = std::max<int64_t>(0, a.self);
    sum += r.selfNs;
    rows.push_back(std::move(r));
  }
  for (auto& r : rows)
    r.share = sum > 0 ? static_cast<double>(r.selfNs) / static_cast<double>(sum) : 0.0;
  std::sort(rows.begin(), rows.end(), [](const RangeRow& a, const RangeRow& b) {
    if (a.totalNs != b.totalNs) return a.totalNs > b.totalNs;
    return std::tie(a.name, a.device) < std::tie(b.name, b.device);
  });
  return rows;
}

std::optional<ProfileWindowInfo> TimelineData::windowForStep(int64_t step) const {
  return windowCoveringStep(windows_, step);
}

std::optional<StepMark> TimelineData::stepMark(int64_t step) const {
  auto it = std::lower_bound(steps_.begin(), steps_.end(), step,
                             [](const StepMark& m, int64_t s) { return m.step < s; });
  if (it == steps_.end() || it->step != step) return std::nullopt;
  return *it;
}

std::vector<profiler::Span> TimelineData::toProfilerSpans() const {
  std::vector<profiler::Span> out;
  out.reserve(spans_.size());
  for (const auto& s : spans_) {
    profiler::Span p;
    p.name = names_[static_cast<size_t>(s.name)];
    p.category = s.category;
    p.rank = s.rank;
    p.lane = s.lane;
    p.device = s.device;
    p.start_ns = s.start;
    p.duration_ns = s.duration();
    p.depth = s.depth;
    p.correlation = s.correlation;
    p.bytes = s.bytes;
    p.flops = s.flops;
    p.step = s.step;
    out.push_back(std::move(p));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](auto& a, auto& b) { return a.start_ns < b.start_ns; });
  return out;
}

std::optional<ProfileWindowInfo> windowCoveringStep(const std::vector<ProfileWindowInfo>& windows,
                                                    int64_t step) {
  for (const auto& w : windows)
    if (w.firstStep <= step && step <= w.lastStep) return w;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------- loading

namespace {
core::RunStore openReadOnly(const std::string& dbPath) {
  core::RunStore::Options o;
  o.create = false;
  return core::RunStore::open(dbPath, core::RunStore::Mode::ReadOnly, o);
}
}  // namespace

std::vector<ProfileWindowInfo> listProfileWindows(const std::string& dbPath, int64_t runId,
                                                  QString* error) {
  std::vector<ProfileWindowInfo> out;
  try {
    auto store = openReadOnly(dbPath);
    for (const auto& row : store.kernelSummaries(runId)) {
      ProfileWindowInfo w;
      w.rank = row.body.value("rank", 0);
      w.window = row.body.value("window", static_cast<int>(row.window));
      w.firstStep = row.body.value("first_step", int64_t{0});
      w.lastStep = row.body.value("last_step", w.firstStep);
      out.push_back(w);
    }
  } catch (const std::exception& e) {
    if (error) *error = QString::fromStdString(e.what());
    return {};
  }
  return out;
}

std::shared_ptr<const TimelineData> loadTimeline(const std::string& dbPath, int64_t runId,
                                                 QStringList* warnings) {
  auto store = openReadOnly(dbPath);
  if (!store.getRun(runId))
    throw std::runtime_error("run " + std::to_string(runId) + " is not in database " + dbPath);
  struct Batch {
    int64_t epoch;
    std::vector<profiler::Span> spans;
  };
  std::vector<Batch> batches;
  std::vector<ProfileWindowInfo> windows;
  for (auto& e : store.events(runId, {"kernels"})) {
    try {
      Batch b;
      b.spans = profiler::spansFromKernelsEvent(e.body);
      b.epoch = e.body.value("epoch_unix_ns", int64_t{0});
      ProfileWindowInfo w;
      w.rank = e.body.value("rank", 0);
      w.window = e.body.value("window", 0);
      w.firstStep = e.body.value("first_step", int64_t{0});
      w.lastStep = e.body.value("last_step", w.firstStep);
      windows.push_back(w);
      batches.push_back(std::move(b));
    } catch (const std::exception& ex) {
      if (warnings)
        *warnings << QStringLiteral("skipped kernels event seq %1: %2")
                         .arg(e.seq)
                         .arg(QString::fromStdString(ex.what()));
    }
  }
  size_t total = 0;
  for (const auto& b : batches) total += b.spans.size();
  if (total == 0)
    throw std::runtime_error("run " + std::to_string(runId) +
                             " has no profile (no kernel timeline was recorded): turn on "
                             "profiling in the wizard, or press “Profile now” on the Live tab "
                             "while it runs");
  // One clock for every rank: shift each batch by its epoch relative to the earliest epoch.
  int64_t minEpoch = INT64_MAX;
  for (const auto& b : batches) minEpoch = std::min(minEpoch, b.epoch);
  std::vector<profiler::Span> spans;
  spans.reserve(total);
  for (auto& b : batches)
    for (auto& s : b.spans) {
      s.start_ns += b.epoch - minEpoch;
      spans.push_back(std::move(s));
    }
  return TimelineData::build(std::move(spans), std::move(windows), minEpoch);
}

// ---------------------------------------------------------------------------------- model

struct TimelineModel::Result {
  std::shared_ptr<const TimelineData> data;
  QString error;
  QStringList warnings;
};

TimelineModel::TimelineModel(QObject* parent) : QObject(parent) {}
TimelineModel::~TimelineModel() = default;

void TimelineModel::setData(std::shared_ptr<const TimelineData> data) {
  ++generation_;  // a load still running no longer applies
  loading_ = false;
  data_ = std::move(data);
  emit changed();
}

void TimelineModel::setSpans(std::vector<profiler::Span> spans,
                             std::vector<ProfileWindowInfo> windows) {
  setData(TimelineData::build(std::move(spans), std::move(windows)));
}

void TimelineModel::clear() {
  runId_ = 0;
  warnings_.clear();
  setData(nullptr);
}

void TimelineModel::loadRun(const std::string& dbPath, int64_t runId) {
  const uint64_t gen = ++generation_;
  loading_ = true;
  runId_ = runId;
  auto* watcher = new QFutureWatcher<std::shared_ptr<Result>>(this);
  connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, gen] {
    watcher->deleteLater();
    if (gen != generation_) return;  // superseded
    auto r = watcher->result();
    loading_ = false;
    warnings_ = r->warnings;
    if (!r->error.isEmpty()) {
      data_.reset();
      emit changed();
      emit loadFailed(r->error);
      return;
    }
    data_ = r->data;
    emit changed();
  });
  watcher->setFuture(QtConcurrent::run([dbPath, runId] {
    auto r = std::make_shared<Result>();
    try {
      r->data = loadTimeline(dbPath, runId, &r->warnings);
    } catch (const std::exception& e) {
      r->error = QString::fromStdString(e.what());
    }
    return r;
  }));
}

}  // namespace ts::gui
