// The engine client's worker path under ThreadSanitizer: the engine's stdout is decoded on the
// client's decoder thread and applied to the run on the GUI thread. Fed directly (feedQueued, as
// the replay bench does) and through a real child process (a stand-in engine script), checked
// against the stream the test wrote: every step once, in order, unreadable lines logged.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <QCoreApplication>
#include <QFile>
#include <QTemporaryDir>

#include "../support/WaitUntil.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/LiveRun.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

double lossAt(int64_t step) {
  return 1.0 + 1.0 / static_cast<double>(step);
}

// An engine stream: hello, config, `steps` step events with a garbage line after every 97th.
QByteArray engineStream(int steps, int* garbage) {
  core::EventEncoder enc;
  QByteArray s;
  s += QByteArray::fromStdString(enc.encode(core::EventType::Hello, {{"backend", "cpu"}}));
  s += QByteArray::fromStdString(
      enc.encode(core::EventType::Config, {{"config", {{"train", {{"steps", steps}}}}}}));
  *garbage = 0;
  for (int i = 1; i <= steps; ++i) {
    core::StepEvent e;
    e.step = i;
    e.loss = lossAt(i);
    e.lr = 1e-3;
    e.tokens = i * 100;
    e.tokens_per_s = 1000;
    e.step_ms = 10;
    s += QByteArray::fromStdString(enc.encode(core::EventType::Step, core::toJson(e)));
    if (i % 97 == 0) {
      s += "not an event " + QByteArray::number(i) + "\n";
      ++*garbage;
    }
  }
  return s;
}

int unreadableLogged(const LiveRun& run) {
  int n = 0;
  for (const auto& l : run.log()) n += l.text.contains("unreadable engine output");
  return n;
}

// Every step 1..steps applied once, in order, with its loss.
void expectSteps(const LiveRun& run, int steps) {
  EXPECT_EQ(run.lastStep(), steps);
  ASSERT_EQ(run.loss().size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    ASSERT_EQ(run.loss().x(i), i + 1.0) << "applied out of order at " << i;
    ASSERT_FLOAT_EQ(run.loss().mean(i), static_cast<float>(lossAt(i + 1)));
  }
}

bool spinUntil(const std::function<bool()>& done) {
  return testsupport::waitUntil(
      [&] {
        QCoreApplication::processEvents(QEventLoop::AllEvents, 5);
        return done();
      },
      testsupport::kWaitCapMs, 1);
}

TEST(EngineClientThreads, QueuedChunksAreAppliedOnceInOrder) {
  constexpr int kSteps = 3000;
  int garbage = 0;
  const QByteArray stream = engineStream(kSteps, &garbage);
  LiveRun run("queued");
  EngineClient client(&run);
  // Chunks of awkward sizes (lines split across them); the GUI thread applies results now and
  // then while more are still being decoded, so both queues are busy from both sides.
  int chunks = 0;
  for (qsizetype i = 0, n = 1; i < stream.size(); i += n, n = 1 + (n * 7 + 13) % 600) {
    client.feedQueued(stream.mid(i, n));
    if (++chunks % 50 == 0) QCoreApplication::processEvents();
  }
  ASSERT_TRUE(spinUntil([&] { return client.pendingChunks() == 0; }));
  expectSteps(run, kSteps);
  EXPECT_EQ(run.totalSteps(), kSteps);
  EXPECT_EQ(unreadableLogged(run), garbage);
}

// Destroyed with chunks still being decoded and results not applied: nothing is applied later,
// nothing touches the dead client.
TEST(EngineClientThreads, DestroyedWithWorkInFlight) {
  int garbage = 0;
  const QByteArray stream = engineStream(2000, &garbage);
  LiveRun run("dropped");
  {
    EngineClient client(&run);
    for (qsizetype i = 0; i < stream.size(); i += 100) client.feedQueued(stream.mid(i, 100));
  }
  QCoreApplication::processEvents();  // a wake-up posted to the dead client must be gone
  EXPECT_EQ(run.lastStep(), 0);
  EXPECT_EQ(run.loss().size(), 0u);
}

// A child process writes the stream and exits without a `finished` event: its output arrives in
// many reads, all of it is applied before the exit is judged.
TEST(EngineClientThreads, ProcessOutputIsDecodedOnTheWorker) {
  constexpr int kSteps = 4000;
  int garbage = 0;
  const QByteArray stream = engineStream(kSteps, &garbage);
  QTemporaryDir tmp;
  ASSERT_TRUE(tmp.isValid());
  const QString events = tmp.filePath("events.ndjson"), engine = tmp.filePath("fake-engine");
  {
    QFile f(events);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(stream);
    f.write(R"({"type":"step","seq":1,"step":)");  // a torn last line, flushed at exit
  }
  {
    QFile f(engine);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    // Stands in for trainscope-engine: ignores its arguments, prints, fails.
    f.write("#!/bin/sh\ncat '" + events.toUtf8() + "'\necho 'engine said goodbye' >&2\nexit 3\n");
  }
  ASSERT_EQ(::chmod(engine.toLocal8Bit().constData(), 0755), 0);

  LiveRun run("process");
  EngineClient client(&run);
  int exitCode = -1;
  QObject::connect(&client, &EngineClient::exited, [&](int code) { exitCode = code; });
  LaunchOptions o;
  o.enginePath = engine;
  o.runDir = tmp.filePath("run");
  ASSERT_TRUE(client.start(nlohmann::json::object(), o)) << client.error().toStdString();
  ASSERT_TRUE(spinUntil([&] { return exitCode >= 0; }));
  EXPECT_EQ(exitCode, 3);
  EXPECT_EQ(client.pendingChunks(), 0);
  expectSteps(run, kSteps);
  EXPECT_EQ(unreadableLogged(run), garbage + 1);  // + the torn line
  EXPECT_EQ(run.state(), RunState::Failed);
  bool why = false;
  for (const auto& l : run.log())
    why |= l.text.contains("exited with code 3") && l.text.contains("engine said goodbye");
  EXPECT_TRUE(why);
}

}  // namespace
