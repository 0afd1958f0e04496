// `trainscope-engine runs ...` through the real command registration (RunsCommand.cpp).
#include <gtest/gtest.h>
#include <poll.h>

#include <sstream>

#include "Commands.h"
#include "StoreTestUtil.h"
#include "trainscope/core/protocol/ControlSocket.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/store/RunRecorder.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts::test;
using nlohmann::json;

namespace {

struct CliResult {
  int code;
  std::string out;
};

CliResult runCli(std::vector<std::string> args) {
  CLI::App app{"test"};
  app.require_subcommand(1);
  int exitCode = 0;
  ts::app::addRunsCommand(app, exitCode);
  args.insert(args.begin(), "trainscope-engine");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  int code;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    code = exitCode;
  } catch (const CLI::ParseError& e) {
    code = app.exit(e) == 0 ? 0 : ts::app::kExitBadInput;
  }
  return {code, testing::internal::GetCapturedStdout()};
}

// A run directory with steps, an eval and two `kernels` batches (profiler's format).
void writeRun(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream out(dir / "events.ndjson");
  int64_t seq = 0;
  auto ev = [&](std::string type, json f) {
    f["type"] = type;
    f["seq"] = seq++;
    f["time"] = 1700000000.0 + seq;
    out << f.dump() << "\n";
  };
  ev("hello", {{"backend", "cpu"}, {"ranks", 1}});
  ev("config", {{"config", {{"name", "cli run"}, {"lr", 0.25}}}});
  for (int s = 0; s < 5; ++s)
    ev("step", {{"step", s},
                {"loss", 4.0 - 0.5 * s},
                {"lr", 0.25},
                {"tokens", 10 * (s + 1)},
                {"skipped", s == 3}});
  ev("eval", {{"step", 4}, {"loss", 2.5}});
  auto span = [](const char* name, int lane, int64_t start, int64_t dur) {
    return json{{"name", name},      {"cat", "gemm"}, {"lane", lane}, {"device", false},
                {"start_ns", start}, {"dur_ns", dur}, {"depth", 0},   {"step", 1},
                {"corr", 0},         {"bytes", 0},    {"flops", 0.0}};
  };
  ev("kernels", {{"rank", 0},
                 {"window", 0},
                 {"batch", 0},
                 {"batches", 2},
                 {"first_step", 1},
                 {"last_step", 1},
                 {"epoch_unix_ns", 0},
                 {"spans", {span("matmul", 0, 1500, 2500), span("softmax", 1, 5000, 1000)}}});
  ev("kernels", {{"rank", 0},
                 {"window", 0},
                 {"batch", 1},
                 {"batches", 2},
                 {"first_step", 1},
                 {"last_step", 1},
                 {"epoch_unix_ns", 0},
                 {"spans", {span("adamw", 0, 9000, 3000)}}});
  ev("finished", {{"status", "completed"}, {"reason", ""}});
}

}  // namespace

TEST(RunsCli, ImportListShowExportDelete) {
  TempDir tmp;
  std::string db = tmp / "runs.db";
  writeRun(tmp.path() / "run");
  auto imp = runCli({"runs", "import", tmp / "run", "--db", db});
  ASSERT_EQ(imp.code, 0) << imp.out;
  EXPECT_NE(imp.out.find("imported run 1"), std::string::npos) << imp.out;

  auto list = runCli({"runs", "list", "--db", db, "--json"});
  ASSERT_EQ(list.code, 0);
  auto arr = json::parse(list.out);
  ASSERT_EQ(arr.size(), 1u);
  EXPECT_EQ(arr[0]["name"], "cli run");
  EXPECT_EQ(arr[0]["status"], "completed");
  EXPECT_EQ(arr[0]["steps"], 5);
  EXPECT_EQ(runCli({"runs", "list", "--db", db}).out.find("cli run") != std::string::npos, true);
  EXPECT_EQ(
      json::parse(runCli({"runs", "list", "--db", db, "--json", "--status", "failed"}).out).size(),
      0u);
  EXPECT_EQ(
      json::parse(runCli({"runs", "list", "--db", db, "--json", "--config", "lr=0.25"}).out).size(),
      1u);
  EXPECT_EQ(runCli({"runs", "list", "--db", db, "--status", "bogus"}).code, 2);
  EXPECT_EQ(runCli({"runs", "list", "--db", db, "--since", "yesterday"}).code, 2);

  auto show = runCli({"runs", "show", "1", "--db", db, "--json"});
  ASSERT_EQ(show.code, 0);
  auto sj = json::parse(show.out);
  EXPECT_EQ(sj["config"]["lr"], 0.25);
  EXPECT_EQ(sj["best_eval_loss"], 2.5);
  EXPECT_EQ(runCli({"runs", "show", "cli run", "--db", db}).code, 0);  // by name
  EXPECT_EQ(runCli({"runs", "show", "99", "--db", db}).code, 2);

  // CSV: one row per step, values as recorded.
  ASSERT_EQ(
      runCli({"runs", "export", "1", "--db", db, "--format", "csv", "--output", tmp / "m.csv"})
          .code,
      0);
  std::ifstream csv(tmp / "m.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "step,time,loss,lr,grad_norm,loss_scale,tokens,tokens_per_s,step_ms,skipped");
  for (int s = 0; s < 5; ++s) {
    ASSERT_TRUE(std::getline(csv, line));
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    f.resize(10);
    EXPECT_EQ(std::stoi(f[0]), s);
    EXPECT_DOUBLE_EQ(std::stod(f[2]), 4.0 - 0.5 * s);
    EXPECT_DOUBLE_EQ(std::stod(f[3]), 0.25);
    EXPECT_EQ(f[4], "");  // not recorded -> empty
    EXPECT_EQ(std::stoi(f[6]), 10 * (s + 1));
    EXPECT_EQ(f[9], s == 3 ? "1" : "0");
  }
  EXPECT_FALSE(std::getline(csv, line));

  ASSERT_EQ(
      runCli({"runs", "export", "1", "--db", db, "--format", "json", "--output", tmp / "m.json"})
          .code,
      0);
  auto mj = json::parse(std::ifstream(tmp / "m.json"));
  ASSERT_EQ(mj["metrics"].size(), 5u);
  EXPECT_EQ(mj["metrics"][2]["loss"], 3.0);
  EXPECT_EQ(mj["metrics"][3]["skipped"], true);
  EXPECT_EQ(mj["run"]["name"], "cli run");

  // Chrome trace: X events in microseconds, process/thread names as metadata.
  ASSERT_EQ(
      runCli({"runs", "export", "1", "--db", db, "--format", "chrome", "--output", tmp / "t.json"})
          .code,
      0);
  auto tj = json::parse(std::ifstream(tmp / "t.json"));
  std::map<std::string, json> x;
  bool processName = false, threadName = false;
  for (auto& e : tj["traceEvents"]) {
    if (e["ph"] == "X") x[e["name"]] = e;
    if (e["ph"] == "M" && e["name"] == "process_name") processName = true;
    if (e["ph"] == "M" && e["name"] == "thread_name") threadName = true;
  }
  ASSERT_EQ(x.size(), 3u);
  EXPECT_DOUBLE_EQ(x["matmul"]["ts"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(x["matmul"]["dur"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(x["adamw"]["ts"].get<double>(), 9.0);
  EXPECT_EQ(x["softmax"]["tid"], 1);
  EXPECT_TRUE(processName);
  EXPECT_TRUE(threadName);
  EXPECT_EQ(
      runCli({"runs", "export", "1", "--db", db, "--format", "xml", "--output", tmp / "x"}).code,
      2);

  ASSERT_EQ(runCli({"runs", "delete", "1", "--db", db}).code, 0);
  EXPECT_EQ(json::parse(runCli({"runs", "list", "--db", db, "--json"}).out).size(), 0u);
  EXPECT_FALSE(fs::exists(tmp.path() / "run" / "events.ndjson"));
  EXPECT_EQ(runCli({"runs", "list", "--db", tmp / "none.db"}).code, 2);  // no such database
}

// A run recorded by a live process (this one) with a control socket in its folder, as the
// engine's rank 0 has: the control commands reach it, delete is refused while it lives.
TEST(RunsCli, ControlCommandsReachARunningRunAndDeleteWaitsForItsEnd) {
  TempDir tmp;
  const std::string db = tmp / "runs.db";
  const fs::path runDir = tmp.path() / "live";
  ts::core::RunRecorder::Options ro;
  ro.dbPath = db;
  ro.runDir = runDir.string();
  ro.name = "live";
  auto rec = std::make_unique<ts::core::RunRecorder>(ro);
  rec->record({{"type", "hello"}, {"seq", 0}, {"time", 1.0}, {"backend", "cpu"}});
  rec->record({{"type", "step"}, {"seq", 1}, {"time", 2.0}, {"step", 1}, {"loss", 2.0}});
  rec.reset();  // committed; the row stays `running` with this process as its writer
  ts::core::ControlServer server(runDir.string());

  auto received = [&](size_t want) {
    std::vector<std::string> lines;
    for (int i = 0; i < 100 && lines.size() < want; ++i) {
      std::vector<pollfd> fds;
      server.addPollFds(fds);
      if (::poll(fds.data(), fds.size(), 20) > 0)
        server.service(fds.data(), fds.size(), [&](const std::string& l) { lines.push_back(l); });
    }
    return lines;
  };
  auto sent = runCli({"runs", "pause", "1", "--db", db});
  EXPECT_EQ(sent.code, 0);
  EXPECT_NE(sent.out.find("sent pause to run 1"), std::string::npos) << sent.out;
  EXPECT_EQ(runCli({"runs", "profile", "live", "--steps", "4", "--db", db}).code, 0);
  EXPECT_EQ(runCli({"runs", "stop", "1", "--db", db}).code, 0);
  const auto lines = received(3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(ts::core::decodeCommand(lines[0]).type, ts::core::CommandType::Pause);
  EXPECT_EQ(ts::core::decodeCommand(lines[1]).type, ts::core::CommandType::Profile);
  EXPECT_EQ(ts::core::decodeCommand(lines[1]).steps, 4);
  EXPECT_EQ(ts::core::decodeCommand(lines[2]).type, ts::core::CommandType::Stop);

  // Its writer (this process) is alive: the row and the folder stay.
  EXPECT_EQ(runCli({"runs", "delete", "1", "--db", db}).code, 2);
  {
    auto store = ts::core::RunStore::open(db, ts::core::RunStore::Mode::ReadOnly);
    EXPECT_TRUE(store.getRun(1));
  }
  EXPECT_TRUE(fs::exists(runDir / "events.ndjson"));
}

TEST(RunsCli, ControlCommandsSayWhyTheyCannotBeDelivered) {
  TempDir tmp;
  const std::string db = tmp / "runs.db";
  writeRun(tmp.path() / "run");
  ASSERT_EQ(runCli({"runs", "import", tmp / "run", "--db", db}).code, 0);
  // Finished: nothing to stop.
  EXPECT_EQ(runCli({"runs", "stop", "1", "--db", db}).code, 2);
  // Recorded as running by a live writer, but nobody listens on its socket.
  ts::core::RunRecorder::Options ro;
  ro.dbPath = db;
  ro.runDir = (tmp.path() / "mute").string();
  ro.name = "mute";
  auto rec = std::make_unique<ts::core::RunRecorder>(ro);
  rec->record({{"type", "hello"}, {"seq", 0}, {"time", 1.0}});
  rec.reset();
  EXPECT_EQ(runCli({"runs", "pause", "mute", "--db", db}).code, 2);
}
