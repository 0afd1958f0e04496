#include <algorithm>

#include <gtest/gtest.h>
#include <QCoreApplication>

#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/gui/EngineClient.h"
#include "trainscope/gui/LiveRun.h"

using namespace ts::gui;
namespace core = ts::core;

static QByteArray stepLine(core::EventEncoder& enc, int64_t step, double loss) {
  core::StepEvent s;
  s.step = step;
  s.loss = loss;
  s.lr = 1e-3;
  s.tokens = step * 1000;
  s.tokens_per_s = 5000;
  s.step_ms = 200;
  return QByteArray::fromStdString(enc.encode(core::EventType::Step, core::toJson(s)));
}

TEST(LiveRun, EventsFromTheStreamFillTheModel) {
  LiveRun run("t");
  EngineClient client(&run);
  core::EventEncoder enc;
  QByteArray stream;
  stream += QByteArray::fromStdString(enc.encode(core::EventType::Hello, {{"backend", "cpu"}}));
  stream += QByteArray::fromStdString(
      enc.encode(core::EventType::Config, {{"config", {{"train", {{"steps", 100}}}}}}));
  for (int i = 1; i <= 10; ++i) stream += stepLine(enc, i, 5.0 - 0.1 * i);
  stream += "this is not json\n";
  core::MemoryReport rep;
  rep.ranks.resize(1);
  rep.ranks[0].at(core::MemoryTier::Device, core::MemoryCategory::Parameters) = {1000, 1200};
  stream += QByteArray::fromStdString(enc.encode(core::EventType::Memory, core::toJson(rep)));
  stream +=
      QByteArray::fromStdString(enc.encode(core::EventType::Eval, {{"step", 10}, {"loss", 4.2}}));
  // Deliver in awkward chunks: lines split across reads must still decode.
  for (int i = 0; i < stream.size(); i += 37) client.feed(stream.mid(i, 37));

  EXPECT_EQ(run.state(), RunState::Running);
  EXPECT_EQ(run.totalSteps(), 100);
  EXPECT_EQ(run.lastStep(), 10);
  EXPECT_EQ(run.loss().size(), 10u);
  EXPECT_DOUBLE_EQ(run.loss().lastY(), 4.0);
  EXPECT_EQ(run.evalLoss().size(), 1u);
  ASSERT_TRUE(run.measured().has_value());
  EXPECT_EQ(
      run.measured()->ranks[0].at(core::MemoryTier::Device, core::MemoryCategory::Parameters).peak,
      1200);
  ASSERT_EQ(run.memoryOverTime().size(), 1u);
  EXPECT_DOUBLE_EQ(run.memoryOverTime()[0].lastY(), 1000.0);
  EXPECT_NEAR(run.progress(), 0.10, 1e-12);
  // The garbage line is reported in the log, not silently dropped.
  bool logged = false;
  for (const auto& l : run.log()) logged |= l.text.contains("unreadable");
  EXPECT_TRUE(logged);

  client.feed(QByteArray::fromStdString(
      enc.encode(core::EventType::Finished, {{"status", "completed"}, {"reason", ""}})));
  EXPECT_EQ(run.state(), RunState::Completed);
  EXPECT_FALSE(run.isActive());
}

TEST(LiveRun, SmoothingRecomputesOverTheWholeCurve) {
  LiveRun run("t");
  for (int i = 1; i <= 50; ++i) {
    core::StepEvent s;
    s.step = i;
    s.loss = i % 2 ? 2.0 : 4.0;
    run.applyStep(s, 1000.0 + i);
  }
  run.setSmoothing(0.0);
  EXPECT_DOUBLE_EQ(run.lossSmoothed().lastY(), 4.0);
  run.setSmoothing(0.9);
  const auto ref = debiasedEma(std::vector<double>([] {
                                 std::vector<double> v;
                                 for (int i = 1; i <= 50; ++i) v.push_back(i % 2 ? 2.0 : 4.0);
                                 return v;
                               }()),
                               0.9);
  EXPECT_NEAR(run.lossSmoothed().lastY(), ref.back(), 1e-5);
  EXPECT_EQ(run.lossSmoothed().size(), 50u);
}

TEST(LiveRun, EtaFollowsThePace) {
  LiveRun run("t");
  run.setTotalSteps(110);
  for (int i = 1; i <= 10; ++i) {
    core::StepEvent s;
    s.step = i;
    s.loss = 1;
    run.applyStep(s, 100.0 + 0.5 * i);  // 0.5 s per step
  }
  ASSERT_TRUE(run.etaSeconds().has_value());
  EXPECT_NEAR(*run.etaSeconds(), 100 * 0.5, 1e-6);
  // Paused: no pace, so no time left to promise; resumed, the pace is back.
  run.setState(RunState::Paused);
  EXPECT_FALSE(run.etaSeconds().has_value());
  run.setState(RunState::Running);
  EXPECT_TRUE(run.etaSeconds().has_value());
}

// Throughput that swings 40K-160K step to step gets a smoothed curve beside the raw one, as
// the loss does.
TEST(LiveRun, SmoothedThroughput) {
  LiveRun run("t");
  for (int i = 1; i <= 200; ++i) {
    core::StepEvent s;
    s.step = i;
    s.loss = 1;
    s.tokens_per_s = i % 2 ? 40000 : 160000;
    run.applyStep(s, 100.0 + i);
  }
  const SeriesBuffer& raw = run.tokensPerS();
  const SeriesBuffer& smooth = run.tokensPerSSmoothed();
  ASSERT_EQ(smooth.size(), raw.size());
  double lo = 1e300, hi = 0;
  for (size_t i = smooth.size() - 50; i < smooth.size(); ++i) {
    lo = std::min(lo, smooth.mean(i));
    hi = std::max(hi, smooth.mean(i));
  }
  EXPECT_GT(lo, 80000);
  EXPECT_LT(hi, 120000);
  EXPECT_LT(hi - lo, (160000 - 40000) / 4);
}

// An eval's exact-match accuracy is kept for the dashboard's header (the latest one).
TEST(LiveRun, KeepsTheLatestAccuracy) {
  LiveRun run("t");
  EXPECT_FALSE(run.accuracy().has_value());
  run.apply(core::Event{core::EventType::Eval, "eval", 0, 0, {{"step", 100}, {"accuracy", 0.5}}});
  run.apply(core::Event{core::EventType::Eval, "eval", 0, 0, {{"step", 200}, {"accuracy", 0.996}}});
  ASSERT_TRUE(run.accuracy().has_value());
  EXPECT_DOUBLE_EQ(*run.accuracy(), 0.996);
}

TEST(EngineClient, MissingEngineFailsFastWithAClearMessage) {
  LiveRun run("t");
  EngineClient client(&run);
  LaunchOptions o;
  o.enginePath = "/nonexistent/trainscope-engine";
  EXPECT_FALSE(client.start(nlohmann::json::object(), o));
  EXPECT_TRUE(client.error().contains("not found"));
  EXPECT_EQ(run.state(), RunState::Failed);
}

// Several ranks: the engine relaunches itself under mpirun (with the config's hostfile), so
// the app starts `trainscope-engine run` the same way whatever the rank count.
TEST(EngineClient, EngineStartsItsOwnRanks) {
  LaunchOptions o;
  o.dbPath = "/tmp/x.db";
  auto [prog, args] = EngineClient::commandLine("/e/trainscope-engine", "/r/run.json", o);
  EXPECT_EQ(prog, "/e/trainscope-engine");
  EXPECT_EQ(args, QStringList({"run", "/r/run.json", "--db", "/tmp/x.db"}));
  EXPECT_FALSE(args.contains("mpirun"));
  auto [p1, a1] = EngineClient::commandLine("/e/trainscope-engine", "/r/run.json", {});
  EXPECT_EQ(p1, "/e/trainscope-engine");
  EXPECT_EQ(a1, QStringList({"run", "/r/run.json"}));
}

// A distillation run's two loss terms and a fine-tuning run's parameter counts (trainable vs
// frozen, NF4 storage, the teacher) reach the model from the engine's step and memory events.
TEST(LiveRun, DistillationTermsAndParameterCounts) {
  LiveRun run("d");
  EngineClient client(&run);
  core::EventEncoder enc;
  QByteArray stream;
  for (int i = 1; i <= 4; ++i) {
    core::StepEvent s;
    s.step = i;
    s.loss = 1.0;
    nlohmann::json j = core::toJson(s);
    j["distill_ce"] = 2.0 - 0.1 * i;
    j["distill_kl"] = 0.5 - 0.05 * i;
    stream += QByteArray::fromStdString(enc.encode(core::EventType::Step, j));
  }
  core::MemoryReport rep;
  rep.ranks.resize(1);
  nlohmann::json mem = core::toJson(rep);
  mem["params"] = {
      {"total", 1000}, {"trainable", 40}, {"frozen", 960}, {"nf4_bytes", 520}, {"teacher", 4000}};
  stream += QByteArray::fromStdString(enc.encode(core::EventType::Memory, mem));
  client.feed(stream);
  ASSERT_EQ(run.distillCe().size(), 4u);
  ASSERT_EQ(run.distillKl().size(), 4u);
  EXPECT_DOUBLE_EQ(run.distillCe().lastY(), 1.6);
  EXPECT_DOUBLE_EQ(run.distillKl().lastY(), 0.3);
  ASSERT_TRUE(run.parameterCounts().is_object());
  EXPECT_EQ(run.parameterCounts()["trainable"], 40);
  EXPECT_EQ(run.parameterCounts()["frozen"], 960);
  EXPECT_EQ(run.parameterCounts()["teacher"], 4000);
}
