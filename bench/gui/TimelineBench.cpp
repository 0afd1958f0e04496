// gui_timeline_bench [SPANS] — builds a kernel timeline of SPANS (default 1,000,000) synthetic
// spans on a few lanes (two host threads with nested ranges, two GPU streams), then renders a
// sequence of pan/zoom frames of the real TimelineView into an offscreen QImage: fully zoomed
// out, zooming in step by step to a few microseconds, panning there, and zooming back out.
// Reports the model build time, worst and median frame time, blocks drawn per frame, and the
// time of a whole-profile range aggregation. Target: every frame under 16 ms.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <QApplication>
#include <QImage>
#include <QPainter>

#include "AppStyle.h"
#include "TimelineView.h"
#include "trainscope/gui/TimelineModel.h"

using namespace ts::gui;
namespace profiler = ts::profiler;
using Clock = std::chrono::steady_clock;

namespace {

double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

std::vector<profiler::Span> syntheticSpans(int64_t total) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  auto logu = [&](double lo, double hi) {
    return static_cast<int64_t>(std::exp(std::log(lo) + u(rng) * (std::log(hi) - std::log(lo))));
  };
  static const std::pair<const char*, profiler::SpanCategory> ops[] = {
      {"matmul", profiler::SpanCategory::Gemm},
      {"attention", profiler::SpanCategory::Attention},
      {"layernorm", profiler::SpanCategory::Norm},
      {"gelu", profiler::SpanCategory::Elementwise},
      {"adamw", profiler::SpanCategory::Optimizer},
      {"allreduce", profiler::SpanCategory::Communication},
      {"memcpy", profiler::SpanCategory::Memcpy}};
  std::vector<profiler::Span> out;
  out.reserve(static_cast<size_t>(total));
  uint64_t corr = 1;
  int64_t t = 0;
  for (int64_t step = 0; static_cast<int64_t>(out.size()) < total; ++step) {
    const int64_t stepStart = t;
    for (int thread = 0; thread < 2; ++thread) {
      int64_t h = stepStart + 200;
      int64_t g = stepStart + 3000;
      for (int op = 0; op < 400 && static_cast<int64_t>(out.size()) < total; ++op) {
        const auto& o = ops[rng() % 7];
        profiler::Span r;
        r.name = o.first;
        r.category = o.second;
        r.lane = thread;
        r.depth = 1;
        r.start_ns = h;
        r.duration_ns = logu(2000, 200000);
        r.step = step;
        r.correlation = corr++;
        out.push_back(r);
        // Nested tiny ranges inside.
        int64_t c = h + 50;
        for (int k = 0; k < 3; ++k) {
          profiler::Span in = r;
          in.depth = 2;
          in.start_ns = c;
          in.duration_ns = std::max<int64_t>(10, r.duration_ns / 5);
          in.correlation = corr++;
          out.push_back(in);
          c += in.duration_ns + 20;
        }
        // Its kernel on the thread's stream.
        profiler::Span k = r;
        k.device = true;
        k.lane = 7 + thread;
        k.depth = 0;
        g = std::max(g, h + 1500);
        k.start_ns = g;
        k.duration_ns = logu(1000, 300000);
        k.name = std::string(o.first) + "_kernel";
        out.push_back(k);
        g += k.duration_ns + logu(100, 5000);
        h += r.duration_ns + logu(50, 3000);
      }
      t = std::max({t, h, g});
    }
    profiler::Span s;
    s.name = "step";
    s.category = profiler::SpanCategory::Step;
    s.start_ns = stepStart;
    s.duration_ns = t - stepStart;
    s.step = step;
    out.push_back(s);
    t += 10000;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  applyAppStyle(app);
  const int64_t total = argc > 1 ? std::atoll(argv[1]) : 1000000;

  auto spans = syntheticSpans(total);
  const size_t n = spans.size();
  auto t = Clock::now();
  auto data = TimelineData::build(std::move(spans));
  const double buildMs = msSince(t);

  TimelineModel model;
  TimelineView view(&model);
  view.resize(1600, 800);
  model.setData(data);
  QImage img(view.size(), QImage::Format_ARGB32_Premultiplied);

  struct Frame {
    double ms;
    int blocks;
    double rangeNs;
  };
  std::vector<Frame> frames;
  auto frame = [&] {
    auto f0 = Clock::now();
    QPainter p(&img);
    // As a repaint of the opaque widget: no background pre-fill.
    view.render(&p, QPoint(), QRegion(), QWidget::DrawChildren);
    p.end();
    frames.push_back({msSince(f0), view.lastFrameBlocks(),
                      static_cast<double>(view.visibleEnd() - view.visibleStart())});
  };
  const double x = view.plotRect().left() + view.plotRect().width() * 0.37;
  for (int i = 0; i < 3; ++i) frame();  // warm-up (fonts, caches): not counted
  frames.clear();
  view.zoomToFit();
  for (int i = 0; i < 20; ++i) {  // fully zoomed out, panning a little
    view.setVisibleRange(view.visibleStart() + (i % 2 ? 1 : -1) * (data->end() / 200),
                         view.visibleEnd() + (i % 2 ? 1 : -1) * (data->end() / 200));
    frame();
  }
  const size_t outFrames = frames.size();
  while (view.visibleEnd() - view.visibleStart() > 5000) {  // zoom in to ~5 us
    view.zoomAt(1.25, x);
    frame();
  }
  const size_t zoomInEnd = frames.size();
  for (int i = 0; i < 40; ++i) {  // pan while zoomed in
    const int64_t shift = (view.visibleEnd() - view.visibleStart()) / 7;
    view.setVisibleRange(view.visibleStart() + shift, view.visibleEnd() + shift);
    frame();
  }
  while (view.visibleEnd() - view.visibleStart() < data->end()) {  // and back out
    view.zoomAt(1 / 1.25, x);
    frame();
  }
  view.zoomAt(1 / 1.25, x);
  frame();

  auto stats = [&](size_t b, size_t e, const char* what) {
    std::vector<double> ms;
    int maxBlocks = 0;
    double sumBlocks = 0;
    for (size_t i = b; i < e; ++i) {
      ms.push_back(frames[i].ms);
      maxBlocks = std::max(maxBlocks, frames[i].blocks);
      sumBlocks += frames[i].blocks;
    }
    std::sort(ms.begin(), ms.end());
    std::printf(
        "  %-28s %4zu frames  median %6.2f ms  worst %6.2f ms  blocks/frame mean %7.0f "
        "max %6d\n",
        what, e - b, ms[ms.size() / 2], ms.back(), sumBlocks / double(e - b), maxBlocks);
    return ms.back();
  };
  std::printf("gui_timeline_bench: %zu spans on %zu lanes (%d tracks), view %dx%d\n", n,
              data->lanes().size(), data->trackCount(), view.width(), view.height());
  std::printf("  model build                  %8.1f ms\n", buildMs);
  const double w1 = stats(0, outFrames, "zoomed out (pan)");
  const double w2 = stats(outFrames, zoomInEnd, "zooming in");
  const double w3 = stats(zoomInEnd, zoomInEnd + 40, "zoomed in (pan)");
  const double w4 = stats(zoomInEnd + 40, frames.size(), "zooming out");
  const double w = stats(0, frames.size(), "all frames");
  {  // the model's share of a zoomed-out frame
    std::vector<TimelineBlock> blocks;
    const double nsPerPx = static_cast<double>(data->end()) / view.plotRect().width();
    auto q0 = Clock::now();
    for (int rep = 0; rep < 20; ++rep) {
      blocks.clear();
      for (int tr = 0; tr < data->trackCount(); ++tr)
        data->query(tr, 0, data->end(), nsPerPx, blocks);
    }
    std::printf("  queries of a zoomed-out frame %7.2f ms (%zu blocks)\n", msSince(q0) / 20,
                blocks.size());
  }
  t = Clock::now();
  const auto rows = data->aggregate(data->begin(), data->end());
  std::printf("  aggregate whole profile      %8.1f ms (%zu rows)\n", msSince(t), rows.size());
  t = Clock::now();
  const auto half = data->aggregate(data->end() / 4, data->end() / 2, {0, 2});
  std::printf("  aggregate quarter, 2 lanes   %8.1f ms (%zu rows)\n", msSince(t), half.size());
  std::printf("  worst frame %.2f ms: %s (target 16 ms)\n", std::max({w, w1, w2, w3, w4}),
              w < 16 ? "OK" : "OVER");
  return 0;
}
