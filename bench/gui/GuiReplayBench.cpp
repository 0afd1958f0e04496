// gui_replay_bench [EVENTS] — replays EVENTS (default 1,000,000) step events as the engine
// would write them, in pipe-sized chunks, into a visible dashboard redrawing at 10 Hz.
// Measures the longest gap between ticks of a 5 ms probe timer (the longest "frame" the
// user would see), the longest single dashboard redraw, throughput, and memory.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <QApplication>
#include <QElapsedTimer>
#include <QTimer>

#include "AppStyle.h"
#include "ChartView.h"
#include "RunDashboard.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/gui/EngineClient.h"

using namespace ts::gui;
namespace core = ts::core;

static long rssKiB() {
  std::ifstream f("/proc/self/status");
  std::string k;
  long v = 0;
  while (f >> k) {
    if (k == "VmRSS:") {
      f >> v;
      return v;
    }
    std::getline(f, k);
  }
  return 0;
}

static double loadAverage() {
  double l = 0;
  std::ifstream f("/proc/loadavg");
  f >> l;
  return l;
}

int main(int argc, char** argv) {
  if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  ts::gui::applyAppStyle(app);
  const int64_t total = argc > 1 ? std::atoll(argv[1]) : 1000000;
  const int perChunk = 300;  // ~64 KiB of NDJSON: what one pipe read delivers

  auto* run = new LiveRun("replay");
  auto* client = new EngineClient(run);
  run->setTotalSteps(total);
  RunDashboard dash(run, client);
  dash.resize(1440, 900);
  dash.show();
  QCoreApplication::processEvents();
  const long rss0 = rssKiB();

  core::EventEncoder enc;
  int64_t step = 0;
  std::vector<double> gaps;
  gaps.reserve(1 << 20);
  QElapsedTimer clock;
  clock.start();
  qint64 lastTick = 0;
  // GUI-thread CPU time between ticks: the part of a gap our code is responsible for (the rest
  // is the thread waiting for a core when the machine is shared).
  auto threadCpuNs = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  };
  int64_t lastCpu = 0;
  double maxBusyMs = 0;
  double maxRedrawMs = 0;
  QTimer probe;
  probe.setInterval(5);
  QObject::connect(&probe, &QTimer::timeout, [&] {
    const qint64 now = clock.nsecsElapsed();
    const int64_t cpu = threadCpuNs();
    if (lastTick) {
      gaps.push_back((now - lastTick) / 1e6);
      maxBusyMs = std::max(maxBusyMs, (cpu - lastCpu) / 1e6);
    }
    lastTick = now;
    lastCpu = cpu;
  });
  probe.start();
  // Time each redraw separately (the dashboard's own 10 Hz timer also runs).
  QTimer redrawProbe;
  redrawProbe.setInterval(100);
  QObject::connect(&redrawProbe, &QTimer::timeout, [&] {
    QElapsedTimer t;
    t.start();
    dash.refresh();
    maxRedrawMs = std::max(maxRedrawMs, t.nsecsElapsed() / 1e6);
  });
  redrawProbe.start();

  // The engine is another process: a producer thread stands in for it, encoding chunks and
  // handing them over the way QProcess's readyRead would (bounded, like a 64 KiB pipe).
  double encodeS = 0;
  std::atomic<int64_t> posted{0}, applied{0};  // chunks
  std::atomic<bool> producerDone{false};
  std::thread producer([&] {
    double encS = 0;
    while (step < total) {
      while (posted.load() - applied.load() > 4)
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      const auto e0 = std::chrono::steady_clock::now();
      std::string chunk;
      chunk.reserve(perChunk * 220);
      for (int i = 0; i < perChunk && step < total; ++i) {
        ++step;
        core::StepEvent s;
        s.step = step;
        s.loss = 0.3 + 3.0 * std::exp(-step / 20000.0) + (step % 97 == 0 ? 1.5 : 0.0);
        s.lr = 1e-3;
        s.tokens = step * 1024;
        s.tokens_per_s = 9000 + (step % 13) * 10;
        s.step_ms = 100;
        chunk += enc.encode(core::EventType::Step, core::toJson(s));
      }
      encS += std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
      ++posted;
      QMetaObject::invokeMethod(
          client, [client, c = QByteArray::fromStdString(chunk)] { client->feedQueued(c); },
          Qt::QueuedConnection);
    }
    encodeS = encS;
    producerDone = true;
  });
  // A chunk leaves the pipe once its events are applied on the GUI thread.
  QTimer drain;
  drain.setInterval(1);
  QObject::connect(&drain, &QTimer::timeout, [&] {
    applied = run->lastStep() / perChunk;
    if (producerDone && client->pendingChunks() == 0 && run->lastStep() >= total) {
      drain.stop();
      QTimer::singleShot(300, &app, &QCoreApplication::quit);  // let the last redraws happen
    }
  });
  drain.start();
  const auto t0 = std::chrono::steady_clock::now();
  app.exec();
  producer.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::sort(gaps.begin(), gaps.end());
  const double maxGap = gaps.empty() ? 0 : gaps.back();
  const double p99 = gaps.empty() ? 0 : gaps[static_cast<size_t>(gaps.size() * 0.99)];
  std::printf("events replayed        %lld\n", static_cast<long long>(run->lastStep()));
  std::printf("wall time              %.2f s (%.0f events/s; engine-side encoding %.2f s)\n", wall,
              total / wall, encodeS);
  std::printf("event-loop gap max     %.2f ms (p99 %.2f ms; decoding on a worker thread)\n", maxGap,
              p99);
  std::printf("GUI-thread busy max     %.2f ms of CPU between two ticks (load average %.1f)\n",
              maxBusyMs, loadAverage());
  std::printf("dashboard redraw max   %.2f ms (%llu redraws)\n", maxRedrawMs,
              static_cast<unsigned long long>(dash.redraws()));
  std::printf("points in loss chart   %d (raw curve), %zu stored samples\n",
              dash.lossChart()->pointCount(dash.lossRawSeries()), run->loss().size());
  std::printf("run model memory       %.1f MiB\n", run->bytes() / 1048576.0);
  std::printf("RSS                    %.1f MiB -> %.1f MiB\n", rss0 / 1024.0, rssKiB() / 1024.0);
  const bool ok = maxGap < 50.0 && maxRedrawMs < 50.0;
  std::printf("verdict                %s (frames < 50 ms)\n", ok ? "OK" : "TOO SLOW");
  return 0;
}
