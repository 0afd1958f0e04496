// The kernel timeline: level-of-detail queries against brute force on random spans (every span
// when zoomed in; the same covered pixels when zoomed out), range aggregation against
// brute-force sums, hit testing, correlation lookup, steps and windows, loading from a real
// SQLite run store, the range table under QAbstractItemModelTester, and the page driven with
// real mouse events.
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include <gtest/gtest.h>
#include <QAbstractItemModelTester>
#include <QApplication>
#include <QFile>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QWheelEvent>
#include <nlohmann/json.hpp>

#include "GuiTestUtil.h"
#include "TimelinePage.h"
#include "TimelineView.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/gui/TimelineModel.h"
#include "trainscope/profiler/Aggregation.h"

using namespace ts::gui;
namespace core = ts::core;
namespace profiler = ts::profiler;
using profiler::Span;
using profiler::SpanCategory;

namespace {

const std::vector<std::pair<const char*, SpanCategory>> kOps = {
    {"matmul", SpanCategory::Gemm},       {"attention", SpanCategory::Attention},
    {"layernorm", SpanCategory::Norm},    {"gelu", SpanCategory::Elementwise},
    {"adamw", SpanCategory::Optimizer},   {"allreduce", SpanCategory::Communication},
    {"memcpy_h2d", SpanCategory::Memcpy}, {"softmax", SpanCategory::Elementwise}};

int64_t logUniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  return static_cast<int64_t>(std::exp(u(rng)));
}

// Spans in sequence on each (rank, device, lane, depth) track: durations and gaps log-uniform,
// so some regions are dense with tiny spans and others hold long ones. minGap 0 allows spans
// that touch.
std::vector<Span> randomSpans(uint64_t seed, int perTrack, int64_t minDur, int64_t maxDur,
                              int64_t minGap, int64_t maxGap) {
  std::mt19937_64 rng(seed);
  std::vector<Span> out;
  struct Lane {
    int rank;
    bool device;
    int lane, depths;
  };
  const std::vector<Lane> lanes = {
      {0, false, 0, 2}, {0, false, 3, 1}, {0, true, 7, 1}, {1, false, 0, 1}};
  for (const auto& l : lanes)
    for (int depth = 0; depth < l.depths; ++depth) {
      int64_t t = logUniform(rng, 1, 5000);
      for (int i = 0; i < perTrack; ++i) {
        const auto& op = kOps[rng() % kOps.size()];
        Span s;
        s.name = op.first;
        s.category = op.second;
        s.rank = l.rank;
        s.lane = l.lane;
        s.device = l.device;
        s.depth = depth;
        s.start_ns = t;
        s.duration_ns = logUniform(rng, static_cast<double>(minDur), static_cast<double>(maxDur));
        s.step = t / 1000000;
        s.bytes = static_cast<int64_t>(rng() % 4096);
        s.flops = static_cast<double>(rng() % 100000);
        out.push_back(s);
        t += s.duration_ns +
             (minGap == maxGap ? minGap
                               : minGap + logUniform(rng, 1, static_cast<double>(maxGap - minGap)));
      }
    }
  std::shuffle(out.begin(), out.end(), rng);  // build must not rely on input order
  return out;
}

// Pixels of [t0, t0 + pixels * nsPerPx) touched by the half-open intervals.
std::vector<bool> rasterize(const std::vector<std::pair<int64_t, int64_t>>& iv, int64_t t0,
                            int64_t nsPerPx, int pixels) {
  std::vector<int> diff(static_cast<size_t>(pixels) + 1, 0);
  const int64_t t1 = t0 + nsPerPx * pixels;
  for (auto [a, b] : iv) {
    a = std::max(a, t0);
    b = std::min(b, t1);
    if (b <= a) continue;
    const int64_t p0 = (a - t0) / nsPerPx, p1 = (b - t0 + nsPerPx - 1) / nsPerPx;
    ++diff[static_cast<size_t>(p0)];
    --diff[static_cast<size_t>(p1)];
  }
  std::vector<bool> out(static_cast<size_t>(pixels));
  int run = 0;
  for (int p = 0; p < pixels; ++p)
    out[static_cast<size_t>(p)] = (run += diff[static_cast<size_t>(p)]) > 0;
  return out;
}

}  // namespace

// Build keeps every span, on the lane it was recorded on, shifted so the earliest starts at 0.
TEST(TimelineModel, BuildKeepsEverySpanOnItsLane) {
  auto in = randomSpans(1, 300, 10, 100000, 0, 20000);
  int64_t minStart = INT64_MAX;
  std::multiset<std::tuple<int, bool, int, int, int64_t, int64_t, std::string>> want, got;
  for (const auto& s : in) minStart = std::min(minStart, s.start_ns);
  for (const auto& s : in)
    want.insert({s.rank, s.device, s.lane, s.depth, s.start_ns - minStart, s.duration_ns, s.name});
  auto d = TimelineData::build(in);
  ASSERT_EQ(d->spanCount(), in.size());
  for (size_t i = 0; i < d->spanCount(); ++i) {
    const auto& s = d->span(static_cast<int32_t>(i));
    const auto& lane = d->lanes()[static_cast<size_t>(d->laneOfTrack(s.track))];
    EXPECT_EQ(lane.rank, s.rank);
    EXPECT_EQ(lane.device, s.device);
    EXPECT_EQ(lane.id, s.lane);
    EXPECT_EQ(d->depthOfTrack(s.track), s.depth);
    got.insert({s.rank, s.device, s.lane, s.depth, s.start, s.duration(),
                d->spanName(static_cast<int32_t>(i))});
  }
  EXPECT_EQ(got, want);
  ASSERT_EQ(d->lanes().size(), 4u);
  EXPECT_EQ(d->lanes()[0].name, "rank 0 · thread 0");
  EXPECT_EQ(d->lanes()[0].depths, 2);
  EXPECT_EQ(d->lanes()[2].name, "rank 0 · GPU stream 7");
  EXPECT_EQ(d->lanes()[3].name, "rank 1 · thread 0");
}

// Zoomed in (every span and gap wider than a pixel) a query returns exactly the spans that
// overlap the range, one block each.
TEST(TimelineModel, ZoomedInQueryReturnsEverySpan) {
  auto d = TimelineData::build(randomSpans(2, 2000, 1000, 200000, 1000, 50000));
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t t0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(d->end()));
    const int64_t t1 = t0 + 1 + static_cast<int64_t>(rng() % 2000000);
    const double nsPerPx = static_cast<double>(1 + rng() % 1000);  // <= every gap and width
    for (int track = 0; track < d->trackCount(); ++track) {
      std::vector<TimelineBlock> blocks;
      d->query(track, t0, t1, nsPerPx, blocks);
      std::set<int32_t> got, want;
      for (const auto& b : blocks) {
        EXPECT_EQ(b.count, 1);
        EXPECT_EQ(b.start, d->span(b.span).start);
        EXPECT_EQ(b.end, d->span(b.span).end);
        EXPECT_EQ(b.category, d->span(b.span).category);
        got.insert(b.span);
      }
      const auto [b, e] = d->trackSpans(track);
      for (int32_t i = b; i < e; ++i)
        if (d->span(i).end > t0 && d->span(i).start < t1) want.insert(i);
      EXPECT_EQ(got, want) << "track " << track << " [" << t0 << ", " << t1 << ")";
    }
  }
}

// Zoomed out, blocks merge spans narrower than a pixel; they still account for every span
// (disjoint contiguous runs with exact extents and busy sums), cover exactly the pixels the
// spans cover, and stay within the per-frame bound however many spans there are.
TEST(TimelineModel, ZoomedOutBlocksCoverTheSamePixelsAsTheSpans) {
  auto d = TimelineData::build(randomSpans(4, 8000, 5, 300000, 0, 200000));
  std::mt19937_64 rng(5);
  const std::vector<int64_t> resolutions = {3, 70, 1000, 9000, 65536, 400000, 5000000};
  int64_t merged = 0;  // the test must exercise merging
  for (int64_t nsPerPx : resolutions)
    for (int trial = 0; trial < 6; ++trial) {
      int64_t t0 = 0, t1 = d->end();
      if (trial > 0 || d->end() / nsPerPx > 20000) {
        t0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(d->end()));
        t1 = std::min(d->end(), t0 + nsPerPx * static_cast<int64_t>(200 + rng() % 1800));
      }
      const int pixels = static_cast<int>((t1 - t0 + nsPerPx - 1) / nsPerPx);
      if (pixels <= 0) continue;
      for (int track = 0; track < d->trackCount(); ++track) {
        std::vector<TimelineBlock> blocks;
        d->query(track, t0, t1, static_cast<double>(nsPerPx), blocks);
        const auto [tb, te] = d->trackSpans(track);
        std::vector<std::pair<int64_t, int64_t>> spanIv, blockIv;
        std::vector<int> owner(static_cast<size_t>(te - tb), 0);
        for (size_t k = 0; k < blocks.size(); ++k) {
          const auto& b = blocks[k];
          ASSERT_GE(b.span, tb);
          ASSERT_LE(b.span + b.count, te);
          int64_t lo = INT64_MAX, hi = INT64_MIN, busy = 0;
          for (int32_t i = b.span; i < b.span + b.count; ++i) {
            ++owner[static_cast<size_t>(i - tb)];
            lo = std::min(lo, d->span(i).start);
            hi = std::max(hi, d->span(i).end);
            busy += d->span(i).duration();
          }
          EXPECT_EQ(b.start, lo);
          EXPECT_EQ(b.end, hi);
          EXPECT_EQ(b.busy, busy);
          merged += b.count > 1;
          if (k > 0) {
            EXPECT_GE(b.start, blocks[k - 1].start);
          }
          blockIv.push_back({b.start, b.end});
        }
        for (int32_t i = tb; i < te; ++i) {
          const auto& s = d->span(i);
          EXPECT_LE(owner[static_cast<size_t>(i - tb)], 1) << "span in two blocks";
          if (s.end > t0 && s.start < t1) {
            EXPECT_EQ(owner[static_cast<size_t>(i - tb)], 1)
                << "span " << i << " missing at " << nsPerPx << " ns/px";
            spanIv.push_back({s.start, s.end});
          }
        }
        EXPECT_EQ(rasterize(blockIv, t0, nsPerPx, pixels), rasterize(spanIv, t0, nsPerPx, pixels))
            << "track " << track << " at " << nsPerPx << " ns/px";
        EXPECT_LE(static_cast<int>(blocks.size()), 2 * pixels + 6)
            << "track " << track << " at " << nsPerPx << " ns/px";
      }
    }
  EXPECT_GT(merged, 100);
}

// A step span with two kernels nested in it: the shares are of self time, so the step gets
// what its kernels leave (20%), not 100 / 180, and the shares add to 100%.
TEST(TimelineModel, ShareIsSelfTimeSoNestedSpansDoNotAddUpPast100) {
  auto span = [](const char* name, int depth, int64_t start, int64_t dur) {
    Span s;
    s.name = name;
    s.depth = depth;
    s.start_ns = start;
    s.duration_ns = dur;
    return s;
  };
  auto d = TimelineData::build({span("step", 0, 1000, 100), span("matmul_fwd", 1, 1000, 40),
                                span("adamw_step", 1, 1050, 40)});
  const auto rows = d->aggregate(0, d->end());
  ASSERT_EQ(rows.size(), 3u);
  std::map<std::string, RangeRow> byName;
  for (const auto& r : rows) byName[r.name] = r;
  EXPECT_EQ(byName["step"].totalNs, 100);
  EXPECT_EQ(byName["step"].selfNs, 20);
  EXPECT_DOUBLE_EQ(byName["step"].share, 0.2);
  EXPECT_DOUBLE_EQ(byName["matmul_fwd"].share, 0.4);
  EXPECT_DOUBLE_EQ(byName["step"].share + byName["matmul_fwd"].share + byName["adamw_step"].share,
                   1.0);
}

// Range aggregation against brute-force sums over every span.
TEST(TimelineModel, RangeAggregationMatchesBruteForce) {
  auto in = randomSpans(6, 3000, 10, 500000, 0, 100000);
  auto d = TimelineData::build(in);
  int64_t minStart = INT64_MAX;
  for (const auto& s : in) minStart = std::min(minStart, s.start_ns);
  // Each span's parent: the span one depth up in its lane that contains it (brute force).
  std::vector<int> parent(in.size(), -1);
  for (size_t c = 0; c < in.size(); ++c)
    for (size_t q = 0; in[c].depth > 0 && q < in.size(); ++q) {
      const auto &x = in[c], &y = in[q];
      if (y.rank == x.rank && y.device == x.device && y.lane == x.lane && y.depth == x.depth - 1 &&
          y.start_ns <= x.start_ns && x.start_ns + x.duration_ns <= y.start_ns + y.duration_ns)
        parent[c] = static_cast<int>(q);
    }
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 25; ++trial) {
    int64_t t0 = static_cast<int64_t>(rng() % static_cast<uint64_t>(d->end()));
    int64_t t1 = t0 + static_cast<int64_t>(rng() % static_cast<uint64_t>(d->end() / 3 + 1));
    if (trial == 0) t0 = 0, t1 = d->end();
    std::vector<int> lanes;
    if (trial % 3 == 1) lanes = {0, 2};
    struct Ref {
      int64_t count = 0;
      int64_t total = 0, self = 0;
      long double sumDur = 0;
    };
    std::map<std::pair<std::string, bool>, Ref> ref;
    long double sum = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      const auto& s = in[k];
      const int64_t a = s.start_ns - minStart, b = a + s.duration_ns;
      if (!(b > t0 && a < t1)) continue;
      if (!lanes.empty()) {
        // lane indices: 0 = rank0 thread0, 1 = rank0 thread3, 2 = rank0 stream7, 3 = rank1
        const int li = s.rank == 1 ? 3 : s.device ? 2 : s.lane == 3 ? 1 : 0;
        if (std::find(lanes.begin(), lanes.end(), li) == lanes.end()) continue;
      }
      auto& r = ref[{s.name, s.device}];
      ++r.count;
      const int64_t inside = std::min(b, t1) - std::max(a, t0);
      r.total += inside;
      r.self += inside;
      r.sumDur += s.duration_ns;
      if (parent[k] >= 0) ref[{in[parent[k]].name, in[parent[k]].device}].self -= inside;
    }
    for (const auto& [key, r] : ref) sum += r.self;
    const auto rows = d->aggregate(t0, t1, lanes);
    ASSERT_EQ(rows.size(), ref.size()) << "trial " << trial;
    double shares = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      const auto& r = rows[k];
      auto it = ref.find({r.name, r.device});
      ASSERT_NE(it, ref.end()) << r.name;
      EXPECT_EQ(r.count, it->second.count) << r.name;
      EXPECT_EQ(r.totalNs, it->second.total) << r.name;
      EXPECT_NEAR(r.meanNs, static_cast<double>(it->second.sumDur / it->second.count),
                  1e-6 * r.meanNs);
      EXPECT_EQ(r.selfNs, it->second.self) << r.name;
      EXPECT_NEAR(r.share, static_cast<double>(it->second.self / sum), 1e-12);
      if (k > 0) {
        EXPECT_GE(rows[k - 1].totalNs, r.totalNs);
      }
      shares += r.share;
    }
    EXPECT_NEAR(shares, 1.0, 1e-9);
  }
}

// Hit test: the span containing a point (brute force), nothing in a gap, the nearest within
// the slack.
TEST(TimelineModel, SpanAtFindsTheSpanUnderAPoint) {
  auto d = TimelineData::build(randomSpans(8, 500, 100, 20000, 10, 20000));
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 2000; ++trial) {
    const int track = static_cast<int>(rng() % static_cast<uint64_t>(d->trackCount()));
    const int64_t t = static_cast<int64_t>(rng() % static_cast<uint64_t>(d->end() + 1000));
    const auto [b, e] = d->trackSpans(track);
    int32_t containing = -1, nearest = -1;
    int64_t nearestDist = INT64_MAX;
    for (int32_t i = b; i < e; ++i) {
      const auto& s = d->span(i);
      if (s.start <= t && t < s.end) containing = i;
      const int64_t dist = t < s.start ? s.start - t : t - s.end + 1;
      if (dist < nearestDist) nearestDist = dist, nearest = i;
    }
    EXPECT_EQ(d->spanAt(track, t, 0), containing) << "t=" << t;
    const int32_t near = d->spanAt(track, t, 500);
    if (containing >= 0)
      EXPECT_EQ(near, containing);
    else if (nearestDist <= 500)
      EXPECT_EQ(near, nearest);
    else
      EXPECT_EQ(near, -1);
  }
}

namespace {

// A small profile as the engine records one: per step a "step" range, ops inside it (depth 1)
// each launching a kernel on GPU stream 7 (same correlation id), per rank.
std::vector<Span> engineLikeProfile(int rank, int firstStep, int steps, int opsPerStep) {
  std::vector<Span> out;
  int64_t t = 1000;
  uint64_t corr = (static_cast<uint64_t>(rank) << 40) + 1;
  for (int s = firstStep; s < firstStep + steps; ++s) {
    Span step;
    step.name = "step";
    step.category = SpanCategory::Step;
    step.rank = rank;
    step.start_ns = t;
    step.step = s;
    step.correlation = corr++;
    int64_t u = t + 500;
    for (int k = 0; k < opsPerStep; ++k) {
      const auto& op = kOps[static_cast<size_t>(k) % kOps.size()];
      Span h;
      h.name = std::string(op.first) + "_launch";
      h.category = op.second;
      h.rank = rank;
      h.depth = 1;
      h.start_ns = u;
      h.duration_ns = 4000;
      h.step = s;
      h.correlation = corr++;
      Span g;
      g.name = std::string(op.first) + "_kernel";
      g.category = op.second;
      g.rank = rank;
      g.device = true;
      g.lane = 7;
      g.start_ns = u + 3000;
      g.duration_ns = 9000 + 1000 * k;
      g.step = s;
      g.correlation = h.correlation;
      g.flops = 2.0e6;
      g.bytes = 65536;
      out.push_back(h);
      out.push_back(g);
      u += 13000 + 1000 * k;
    }
    step.duration_ns = u - t + 500;
    out.push_back(step);
    t = u + 2000;
  }
  return out;
}

}  // namespace

TEST(TimelineModel, CorrelationLinksKernelsToTheirHostRange) {
  auto d = TimelineData::build(engineLikeProfile(0, 5, 3, 4));
  int kernels = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(d->spanCount()); ++i) {
    const auto& s = d->span(i);
    if (s.device) {
      ++kernels;
      const int32_t h = d->launchingRange(i);
      ASSERT_GE(h, 0);
      EXPECT_FALSE(d->span(h).device);
      EXPECT_EQ(d->span(h).correlation, s.correlation);
      // names pair up: "<op>_launch" launched "<op>_kernel"
      const std::string op = d->spanName(i).substr(0, d->spanName(i).find("_kernel"));
      EXPECT_EQ(d->spanName(h), op + "_launch");
      EXPECT_EQ(d->launchedSpans(h), std::vector<int32_t>{i});
      EXPECT_EQ(d->parentRange(i), -1);
    } else if (s.depth == 1) {
      const int32_t p = d->parentRange(i);
      ASSERT_GE(p, 0);
      EXPECT_EQ(d->spanName(p), "step");
      EXPECT_EQ(d->span(p).step, s.step);
      EXPECT_EQ(d->launchingRange(i), -1);
    } else {
      EXPECT_TRUE(d->launchedSpans(i).empty());  // the step range launched nothing itself
    }
  }
  EXPECT_EQ(kernels, 12);
}

TEST(TimelineModel, StepBoundariesAndWindows) {
  auto spans = engineLikeProfile(0, 5, 3, 2);
  auto late = engineLikeProfile(0, 20, 2, 2);
  for (auto& s : late) s.start_ns += 10000000;
  spans.insert(spans.end(), late.begin(), late.end());
  std::vector<ProfileWindowInfo> windows = {{0, 0, 5, 7, 0, 0}, {0, 1, 20, 21, 0, 0}};
  auto d = TimelineData::build(spans, windows);
  // Reference: the "step" ranges.
  std::map<int64_t, std::pair<int64_t, int64_t>> want;
  int64_t minStart = INT64_MAX;
  for (const auto& s : spans) minStart = std::min(minStart, s.start_ns);
  for (const auto& s : spans)
    if (s.category == SpanCategory::Step)
      want[s.step] = {s.start_ns - minStart, s.start_ns - minStart + s.duration_ns};
  ASSERT_EQ(d->steps().size(), want.size());
  for (const auto& m : d->steps()) {
    EXPECT_EQ(m.start, want[m.step].first) << m.step;
    EXPECT_EQ(m.end, want[m.step].second) << m.step;
  }
  ASSERT_EQ(d->windows().size(), 2u);
  EXPECT_EQ(d->windows()[1].start, want[20].first);
  EXPECT_EQ(d->windows()[1].end, want[21].second);
  ASSERT_TRUE(d->windowForStep(6));
  EXPECT_EQ(d->windowForStep(6)->window, 0);
  EXPECT_EQ(d->windowForStep(21)->window, 1);
  EXPECT_FALSE(d->windowForStep(10));
  EXPECT_FALSE(d->stepMark(10));
  EXPECT_FALSE(windowCoveringStep({}, 3));
}

TEST(TimelineRangeModel, PassesItemModelTester) {
  TimelineRangeModel m;
  QAbstractItemModelTester tester(&m, QAbstractItemModelTester::FailureReportingMode::Fatal);
  auto d = TimelineData::build(randomSpans(10, 200, 10, 50000, 0, 10000));
  m.setRows(d->aggregate(0, d->end()), 0, d->end());
  ASSERT_GT(m.rowCount(), 3);
  EXPECT_EQ(m.columnCount(), TimelineRangeModel::ColumnCount);
  for (int c = TimelineRangeModel::Category; c < TimelineRangeModel::ColumnCount; ++c) {
    m.sort(c, Qt::AscendingOrder);
    for (int r = 1; r < m.rowCount(); ++r)
      EXPECT_LE(m.index(r - 1, c).data(Qt::UserRole).toDouble(),
                m.index(r, c).data(Qt::UserRole).toDouble())
          << "column " << c;
    m.sort(c, Qt::DescendingOrder);
    for (int r = 1; r < m.rowCount(); ++r)
      EXPECT_GE(m.index(r - 1, c).data(Qt::UserRole).toDouble(),
                m.index(r, c).data(Qt::UserRole).toDouble())
          << "column " << c;
  }
  m.sort(TimelineRangeModel::Name, Qt::AscendingOrder);
  for (int r = 1; r < m.rowCount(); ++r)
    EXPECT_LE(m.index(r - 1, 0).data().toString(), m.index(r, 0).data().toString());
  EXPECT_EQ(m.headerData(TimelineRangeModel::Share, Qt::Horizontal).toString(), "Share (self)");
  m.setRows(d->aggregate(d->end() / 2, d->end() / 2 + 1000), d->end() / 2, d->end() / 2 + 1000);
  m.clear();
  EXPECT_EQ(m.rowCount(), 0);
}

// ---------------------------------------------------------------------------------- store

namespace {

// Records a two-rank profiled run (rank 1's tracer epoch epochOffset ns after rank 0's) through the
// engine's RunRecorder, plus a run with no profile. Returns {profiled id, plain id}.
std::pair<int64_t, int64_t> recordRuns(const std::string& db, const QString& dir,
                                       int64_t epochOffset, bool corruptBatch = false) {
  const int64_t epoch0 = 1700000000000000000, epoch1 = epoch0 + epochOffset;
  int64_t profiled = 0, plain = 0;
  {
    core::RunRecorder::Options o;
    o.dbPath = db;
    o.runDir = (dir + "/profiled").toStdString();
    o.name = "profiled";
    o.backend = "cpu";
    o.ranks = 2;
    core::RunRecorder rec(o);
    int64_t seq = 0;
    rec.record({{"type", "hello"}, {"seq", seq++}, {"time", 1.7e9}, {"ranks", 2}});
    for (int rank = 0; rank < 2; ++rank) {
      profiler::KernelsBatchInfo info;
      info.rank = rank;
      info.window = 0;
      info.first_step = 5;
      info.last_step = 7;
      info.epoch_unix_ns = rank ? epoch1 : epoch0;
      for (auto body : profiler::kernelsBatches(engineLikeProfile(rank, 5, 3, 4), info, 7)) {
        body["type"] = "kernels";
        body["seq"] = seq++;
        body["time"] = 1.7e9 + 1;
        rec.record(body);
      }
      auto summary = profiler::toJson(profiler::summarize(engineLikeProfile(rank, 5, 3, 4)));
      summary["rank"] = rank;
      summary["window"] = 0;
      summary["first_step"] = 5;
      summary["last_step"] = 7;
      summary["type"] = "kernel_summary";
      summary["seq"] = seq++;
      summary["time"] = 1.7e9 + 1;
      rec.record(summary);
    }
    if (corruptBatch)
      rec.record({{"type", "kernels"},
                  {"seq", seq++},
                  {"time", 1.7e9 + 2},
                  {"rank", 0},
                  {"spans", {{{"name", "x"}, {"dur_ns", "long"}}}}});
    rec.record(
        {{"type", "finished"}, {"seq", seq++}, {"time", 1.7e9 + 3}, {"status", "completed"}});
    rec.close();
    profiled = rec.runId();
  }
  {
    core::RunRecorder::Options o;
    o.dbPath = db;
    o.runDir = (dir + "/plain").toStdString();
    o.name = "plain";
    core::RunRecorder rec(o);
    rec.record({{"type", "hello"}, {"seq", 0}, {"time", 1.7e9}});
    rec.record({{"type", "finished"}, {"seq", 1}, {"time", 1.7e9 + 1}, {"status", "completed"}});
    rec.close();
    plain = rec.runId();
  }
  return {profiled, plain};
}

}  // namespace

TEST(TimelineModel, LoadsARunFromTheRunStoreOnAWorkerThread) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  auto [profiled, plain] = recordRuns(db, dir.path(), 2500000, true);
  ASSERT_GT(profiled, 0);

  TimelineModel model;
  QSignalSpy changed(&model, &TimelineModel::changed);
  QSignalSpy failed(&model, &TimelineModel::loadFailed);
  model.loadRun(db, profiled);
  EXPECT_TRUE(model.loading());
  ASSERT_TRUE(changed.wait(testutil::kWaitCapMs));
  EXPECT_EQ(failed.count(), 0);
  const TimelineData* d = model.data();
  ASSERT_NE(d, nullptr);
  const size_t perRank = engineLikeProfile(0, 5, 3, 4).size();
  EXPECT_EQ(d->spanCount(), 2 * perRank);
  ASSERT_EQ(model.warnings().size(), 1);  // the malformed batch, named by its seq
  EXPECT_TRUE(model.warnings().front().contains("seq")) << model.warnings().front().toStdString();
  // Lanes: per rank its host thread and its GPU stream.
  ASSERT_EQ(d->lanes().size(), 4u);
  EXPECT_EQ(d->lanes()[3].name, "rank 1 · GPU stream 7");
  // One clock: rank 1's first span sits 2.5 ms (its epoch offset) after rank 0's.
  int64_t first0 = INT64_MAX, first1 = INT64_MAX;
  for (size_t i = 0; i < d->spanCount(); ++i) {
    const auto& s = d->span(static_cast<int32_t>(i));
    (s.rank ? first1 : first0) = std::min(s.rank ? first1 : first0, s.start);
  }
  EXPECT_EQ(first0, 0);
  EXPECT_EQ(first1 - first0, 2500000);
  EXPECT_EQ(d->originUnixNs(), 1700000000000000000 + 1000);
  ASSERT_EQ(d->windows().size(), 2u);  // window 0 of each rank
  EXPECT_EQ(d->windowForStep(6)->firstStep, 5);

  // The cheap listing the throughput chart uses.
  QString err;
  auto windows = listProfileWindows(db, profiled, &err);
  EXPECT_TRUE(err.isEmpty()) << err.toStdString();
  ASSERT_EQ(windows.size(), 2u);
  EXPECT_TRUE(windowCoveringStep(windows, 7));
  EXPECT_FALSE(windowCoveringStep(windows, 8));
  EXPECT_TRUE(listProfileWindows(db, plain, &err).empty());

  // No profile, unknown run, missing database: errors as text.
  model.loadRun(db, plain);
  ASSERT_TRUE(failed.wait(testutil::kWaitCapMs));
  EXPECT_TRUE(failed.last().at(0).toString().contains("no profile"));
  // In the app's words (its button), not the protocol's ("send the `profile` command").
  EXPECT_TRUE(failed.last().at(0).toString().contains("“Profile now”"))
      << failed.last().at(0).toString().toStdString();
  EXPECT_FALSE(failed.last().at(0).toString().contains("command"));
  EXPECT_EQ(model.data(), nullptr);
  model.loadRun(db, 999);
  ASSERT_TRUE(failed.wait(testutil::kWaitCapMs));
  EXPECT_TRUE(failed.last().at(0).toString().contains("999"));
  model.loadRun(dir.filePath("missing.db").toStdString(), 1);
  ASSERT_TRUE(failed.wait(testutil::kWaitCapMs));
  EXPECT_TRUE(failed.last().at(0).toString().contains("missing.db"))
      << failed.last().at(0).toString().toStdString();
  EXPECT_FALSE(listProfileWindows(dir.filePath("missing.db").toStdString(), 1, &err).size());
  EXPECT_FALSE(err.isEmpty());
}

// ---------------------------------------------------------------------------------- page

namespace {

void sendMouse(QWidget* w, QEvent::Type type, QPoint pos, Qt::MouseButton button,
               Qt::MouseButtons buttons, Qt::KeyboardModifiers mods = Qt::NoModifier) {
  QMouseEvent e(type, QPointF(pos), w->mapToGlobal(QPointF(pos)), button, buttons, mods);
  QApplication::sendEvent(w, &e);
}

void dragOn(QWidget* w, QPoint from, QPoint to, Qt::MouseButton button,
            Qt::KeyboardModifiers mods = Qt::NoModifier) {
  sendMouse(w, QEvent::MouseButtonPress, from, button, button, mods);
  for (int i = 1; i <= 5; ++i)
    sendMouse(w, QEvent::MouseMove, from + (to - from) * i / 5, Qt::NoButton, button, mods);
  sendMouse(w, QEvent::MouseButtonRelease, to, button, Qt::NoButton, mods);
}

}  // namespace

TEST(TimelinePage, WheelZoomsDragPansSelectFillsTheTableClickShowsDetails) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  auto [profiled, plain] = recordRuns(db, dir.path(), 20000);
  TimelinePage page{RunRepository(db)};
  page.setShowDialogs(false);
  page.resize(1200, 760);
  page.show();
  QSignalSpy loaded(&page, &TimelinePage::loaded);
  page.showRun(profiled, 6);
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  TimelineView* view = page.view();
  const TimelineData* d = page.model()->data();
  ASSERT_NE(d, nullptr);
  // Jumped to step 6: the view shows that step (and not the whole profile).
  const auto mark = d->stepMark(6);
  ASSERT_TRUE(mark);
  EXPECT_LE(view->visibleStart(), mark->start);
  EXPECT_GE(view->visibleEnd(), mark->end);
  EXPECT_LT(view->visibleEnd() - view->visibleStart(), d->end() / 2);
  EXPECT_TRUE(page.statusText().contains("step 6")) << page.statusText().toStdString();

  // Wheel up zooms in around the cursor: the range shrinks, the time under it stays put.
  view->zoomToFit();
  const QRect plot = view->plotRect();
  const QPoint at(plot.left() + plot.width() / 3, plot.top() + 10);
  const int64_t before = view->visibleEnd() - view->visibleStart();
  const int64_t under = view->timeForX(at.x());
  QWheelEvent wheel(QPointF(at), view->mapToGlobal(QPointF(at)), QPoint(), QPoint(0, 240),
                    Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(view, &wheel);
  const int64_t after = view->visibleEnd() - view->visibleStart();
  EXPECT_NEAR(static_cast<double>(after), before / 1.5625, before * 0.01);
  EXPECT_NEAR(static_cast<double>(view->timeForX(at.x())), static_cast<double>(under),
              static_cast<double>(after) / plot.width() * 2);
  // Wheel down zooms back out.
  QWheelEvent out(QPointF(at), view->mapToGlobal(QPointF(at)), QPoint(), QPoint(0, -240),
                  Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
  QApplication::sendEvent(view, &out);
  EXPECT_NEAR(static_cast<double>(view->visibleEnd() - view->visibleStart()),
              static_cast<double>(before), before * 0.01);

  // Drag pans: moving the content right by 100 px shows earlier times.
  view->zoomAt(4, plot.center().x());
  const int64_t t0 = view->visibleStart();
  const double nsPerPx =
      static_cast<double>(view->visibleEnd() - view->visibleStart()) / plot.width();
  dragOn(view, plot.center(), plot.center() + QPoint(100, 0), Qt::LeftButton);
  EXPECT_NEAR(static_cast<double>(t0 - view->visibleStart()), 100 * nsPerPx, nsPerPx * 2);

  // Shift-drag selects a range; the table holds its aggregation.
  view->zoomToFit();
  const int xa = plot.left() + plot.width() / 5, xb = plot.left() + plot.width() * 3 / 5;
  dragOn(view, QPoint(xa, plot.top() + 30), QPoint(xb, plot.top() + 30), Qt::LeftButton,
         Qt::ShiftModifier);
  ASSERT_TRUE(view->selection());
  const auto [s0, s1] = *view->selection();
  EXPECT_NEAR(static_cast<double>(s0), static_cast<double>(view->timeForX(xa)),
              2 * static_cast<double>(view->visibleEnd() - view->visibleStart()) / plot.width());
  const auto want = d->aggregate(s0, s1);
  ASSERT_GT(want.size(), 0u);
  ASSERT_EQ(page.rangeModel()->rowCount(), static_cast<int>(want.size()));
  int64_t total = 0, wantTotal = 0;
  for (const auto& r : page.rangeModel()->rows()) total += r.totalNs;
  for (const auto& r : want) wantTotal += r.totalNs;
  EXPECT_EQ(total, wantTotal);
  // Right-drag selects too; a plain click elsewhere keeps the selection.
  dragOn(view, QPoint(xb, plot.top() + 30), QPoint(xa + 10, plot.top() + 30), Qt::RightButton);
  EXPECT_LT(view->selection()->first, view->selection()->second);

  // Click a GPU kernel: details name it and its launching host range.
  int32_t kernel = -1;
  for (int32_t i = 0; i < static_cast<int32_t>(d->spanCount()) && kernel < 0; ++i)
    if (d->span(i).device && d->span(i).rank == 0 && d->span(i).step == 6) kernel = i;
  ASSERT_GE(kernel, 0);
  const auto& ks = d->span(kernel);
  view->setVisibleRange(ks.start - ks.duration(), ks.end + ks.duration());
  auto r = view->spanRect(kernel);
  ASSERT_TRUE(r);
  QSignalSpy clicked(view, &TimelineView::spanClicked);
  sendMouse(view, QEvent::MouseButtonPress, r->center(), Qt::LeftButton, Qt::LeftButton);
  sendMouse(view, QEvent::MouseButtonRelease, r->center(), Qt::LeftButton, Qt::NoButton);
  ASSERT_EQ(clicked.count(), 1);
  EXPECT_EQ(clicked.first().at(0).toInt(), kernel);
  const QString details = page.detailsText();
  EXPECT_TRUE(details.contains(QString::fromStdString(d->spanName(kernel))))
      << details.toStdString();
  const int32_t host = d->launchingRange(kernel);
  ASSERT_GE(host, 0);
  EXPECT_TRUE(details.contains("Launched by")) << details.toStdString();
  EXPECT_TRUE(details.contains(QString::fromStdString(d->spanName(host)))) << details.toStdString();

  // Export: a Chrome trace with one X event per span.
  const QString path = dir.filePath("trace.json");
  QString err;
  ASSERT_TRUE(page.exportChromeTrace(path, &err)) << err.toStdString();
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const auto trace = nlohmann::json::parse(f.readAll().toStdString());
  size_t xEvents = 0;
  for (const auto& e : trace["traceEvents"]) xEvents += e["ph"] == "X";
  EXPECT_EQ(xEvents, d->spanCount());

  // A run without a profile: the error is shown, not thrown.
  page.showRun(plain);
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  EXPECT_TRUE(page.statusText().contains("no profile")) << page.statusText().toStdString();
  EXPECT_FALSE(page.exportChromeTrace(dir.filePath("none.json"), &err));
}

// With nothing chosen, the page opens on the newest run that has a profile, not on the newest
// run (here one without a profile, which could only say "no profile").
TEST(TimelinePage, OpensOnTheNewestProfiledRun) {
  QTemporaryDir dir;
  const std::string db = dir.filePath("runs.db").toStdString();
  auto [profiled, plain] = recordRuns(db, dir.path(), 20000);
  ASSERT_GT(plain, profiled) << "the run without a profile is the newest";
  TimelinePage page{RunRepository(db)};
  page.setShowDialogs(false);
  QSignalSpy loaded(&page, &TimelinePage::loaded);
  ASSERT_TRUE(loaded.wait(testutil::kWaitCapMs));
  EXPECT_EQ(page.model()->runId(), profiled);
}
