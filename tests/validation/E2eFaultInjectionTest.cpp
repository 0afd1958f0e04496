// Faults injected into the real engine: SIGKILL at random points (mid-step, mid-checkpoint
// write, mid-database commit) 50 times, and a full disk or I/O error while a checkpoint or a
// recording batch is written. The kill points inside writes come from the LD_PRELOAD shim
// tests/support/FaultInject.c; what must survive is what the engine promised: every step the
// recorder acknowledged in recorded.ndjson is in the database, and the newest checkpoint left
// on disk resumes to the bit-identical weights of the uninterrupted run.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "Support.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts;
using namespace ts::validation;
using nlohmann::json;

namespace {

constexpr int kSteps = 16;
constexpr int kCheckpointEvery = 4;

// A tiny model (a run takes well under a second) with a checkpoint every 4 steps.
fs::path writeConfig(const fs::path& dir) {
  json c = {{"name", "faults"},
            {"model", {{"layers", 2}, {"heads", 2}, {"d_model", 32}, {"seq_len", 16}}},
            {"data", {{"source", "synthetic"}, {"task", "addition"}, {"digits", 2}}},
            {"train",
             {{"steps", kSteps},
              {"micro_batch", 4},
              {"eval_every", 0},
              {"checkpoint_every", kCheckpointEvery},
              {"seed", 7}}},
            {"device", {{"threads", 1}}}};
  const fs::path p = dir / "faults.json";
  std::ofstream(p) << c.dump(1);
  return p;
}

std::string readBytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Complete checkpoints (step_NNNNNNNN with a state.json; never a .tmp or .old leftover), newest
// first.
std::vector<fs::path> checkpoints(const fs::path& runDir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(runDir / "checkpoints", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) == 0 && n.find('.') == std::string::npos &&
        fs::exists(e.path() / "state.json"))
      out.push_back(e.path());
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// The last acknowledgement in recorded.ndjson: {run_id, step, seq}; null when none.
json lastAck(const fs::path& runDir) {
  std::ifstream in(runDir / "recorded.ndjson");
  json last;
  std::string line;
  while (std::getline(in, line)) {
    auto j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "torn acknowledgement line: " << line;
    if (!j.is_discarded()) last = j;
  }
  return last;
}

struct FaultRig {
  fs::path dir = tempDir("faults");
  fs::path config = writeConfig(dir);
  fs::path db = dir / "runs.db";
  std::string shim = TS_FAULT_INJECT_LIB;

  Child start(const fs::path& runDir, const std::vector<std::string>& env = {},
              const std::string& resume = "") {
    std::vector<std::string> args = {TRAINSCOPE_ENGINE_BIN, "run",       config.string(), "--db",
                                     db.string(),           "--run-dir", runDir.string()};
    if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
    return spawn(args, env);
  }
  std::vector<std::string> fault(const std::string& path, long skip, long long afterBytes,
                                 const std::string& action, int err = ENOSPC) const {
    return {"LD_PRELOAD=" + shim,
            "TS_FAULT_PATH=" + path,
            "TS_FAULT_SKIP=" + std::to_string(skip),
            "TS_FAULT_AFTER_BYTES=" + std::to_string(afterBytes),
            "TS_FAULT_ACTION=" + action,
            "TS_FAULT_ERRNO=" + std::to_string(err)};
  }
};

// Every step the recorder acknowledged is in the database (opened afresh, as the GUI would),
// with the loss the engine emitted for it.
void expectAcknowledgedStepsPresent(const fs::path& db, const fs::path& runDir,
                                    const std::map<int64_t, double>& emitted) {
  const json ack = lastAck(runDir);
  auto store = core::RunStore::open(db.string());  // read-write: recovers the WAL
  if (ack.is_null()) return;                       // killed before the first commit
  const int64_t id = ack.at("run_id"), upTo = ack.at("step");
  std::set<int64_t> have;
  for (const auto& r : store.steps(id)) {
    have.insert(r.step);
    if (auto it = emitted.find(r.step); it != emitted.end() && r.loss)
      EXPECT_EQ(*r.loss, it->second) << "step " << r.step;
  }
  for (int64_t s = 1; s <= upTo; ++s)
    EXPECT_TRUE(have.count(s)) << "step " << s << " was acknowledged (" << ack.dump()
                               << ") but is not in the database";
}

std::map<int64_t, double> stepLosses(const Child& c) {
  std::map<int64_t, double> m;
  for (const auto& e : c.events())
    if (e.value("type", "") == "step" && e.contains("loss") && e["loss"].is_number())
      m[e["step"].get<int64_t>()] = e["loss"].get<double>();
  return m;
}

}  // namespace

TEST(E2eFaultInjection, FiftySigkillsLoseNoAcknowledgedStepAndResumeBitwise) {
  FaultRig rig;
  // The uninterrupted run: its final weights and optimizer state are the reference.
  const fs::path refDir = rig.dir / "reference";
  Child ref = rig.start(refDir);
  ASSERT_EQ(ref.wait(), 0);
  const auto refCkpts = checkpoints(refDir);
  ASSERT_FALSE(refCkpts.empty());
  const std::string refModel = readBytes(refCkpts.front() / "model.safetensors");
  const std::string refOpt = readBytes(refCkpts.front() / "optimizer.safetensors");
  ASSERT_FALSE(refModel.empty());
  const auto modelBytes = fs::file_size(refCkpts.front() / "model.safetensors");
  const auto optBytes = fs::file_size(refCkpts.front() / "optimizer.safetensors");

  std::mt19937 rng(20261204);
  int killed = 0, resumedFromCheckpoint = 0;
  int where[3] = {0, 0, 0};
  for (int i = 0; i < 50; ++i) {
    const int mode = i % 3;  // 0: mid-step, 1: while writing a checkpoint, 2: during a commit
    SCOPED_TRACE("iteration " + std::to_string(i) + " mode " + std::to_string(mode));
    const fs::path runDir = rig.dir / ("killed_" + std::to_string(i));
    std::vector<std::string> env;
    if (mode == 1) {
      const bool model = rng() % 2;
      env = rig.fault(model ? "model.safetensors" : "optimizer.safetensors",
                      long(rng() % (kSteps / kCheckpointEvery)),
                      (long long)(rng() % (model ? modelBytes : optBytes)), "kill");
    }
    if (mode == 2) env = rig.fault("runs.db-wal", 0, (long long)(rng() % 160000), "kill");
    Child c = rig.start(runDir, env);
    ASSERT_GT(c.pid, 0);
    if (mode == 0) {
      const int64_t at = 1 + int64_t(rng() % (kSteps - 1));
      c.readUntil([&](const std::string& l) {
        auto j = json::parse(l, nullptr, false);
        return !j.is_discarded() && j.value("type", "") == "step" && j.value("step", 0) >= at;
      });
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 4000));
      ::kill(c.pid, SIGKILL);
    }
    const int code = c.wait();
    if (code == 128 + SIGKILL) {
      ++killed;
      ++where[mode];
    } else {
      EXPECT_EQ(code, 0) << "a run the fault missed must still complete";
    }
    expectAcknowledgedStepsPresent(rig.db, runDir, stepLosses(c));

    // The newest complete checkpoint (none: from scratch) resumes to the reference bits.
    const auto left = checkpoints(runDir);
    const std::string from = left.empty() ? "" : left.front().string();
    resumedFromCheckpoint += !from.empty();
    const fs::path resumedDir = rig.dir / ("resumed_" + std::to_string(i));
    Child r = rig.start(resumedDir, {}, from);
    ASSERT_EQ(r.wait(), 0) << "resume from '" << from << "' failed";
    const auto fin = checkpoints(resumedDir);
    ASSERT_FALSE(fin.empty());
    EXPECT_EQ(fin.front().filename(), refCkpts.front().filename());
    EXPECT_TRUE(readBytes(fin.front() / "model.safetensors") == refModel)
        << "weights after resuming " << from << " differ from the uninterrupted run";
    EXPECT_TRUE(readBytes(fin.front() / "optimizer.safetensors") == refOpt)
        << "optimizer state after resuming " << from << " differs";
    fs::remove_all(resumedDir);
  }
  std::printf(
      "killed %d of 50 (mid-step %d, checkpoint %d, commit %d); %d resumed from a "
      "checkpoint\n",
      killed, where[0], where[1], where[2], resumedFromCheckpoint);
  EXPECT_GE(where[0], 15);
  EXPECT_GE(where[1], 15) << "every checkpoint fault lies inside a file the run writes";
  EXPECT_GE(where[2], 5) << "the commit faults must land in a commit";
  EXPECT_GE(resumedFromCheckpoint, 20);
  fs::remove_all(rig.dir);
}

// A full disk (ENOSPC) or an I/O error (EIO) while the second checkpoint is written: the first
// stays intact and resumes, the failure is reported, and the run goes on to the end.
TEST(E2eFaultInjection, FullDiskOrIoErrorDuringACheckpointKeepsThePreviousOne) {
  FaultRig rig;
  const fs::path refDir = rig.dir / "reference";
  ASSERT_EQ(rig.start(refDir).wait(), 0);
  const std::string refModel = readBytes(checkpoints(refDir).front() / "model.safetensors");

  for (auto [file, err, text] : {std::tuple{"optimizer.safetensors", ENOSPC, "No space left"},
                                 std::tuple{"model.safetensors", EIO, "Input/output error"}}) {
    SCOPED_TRACE(file);
    // Not named after `file`: the shim matches the pattern anywhere in a path.
    const fs::path runDir = rig.dir / ("fault_" + fs::path(file).stem().string());
    Child c = rig.start(runDir, rig.fault(file, 1, 1000, "errno", err));
    ASSERT_EQ(c.wait(), 0);
    std::string warning;
    for (const auto& e : c.events())
      if (e.value("type", "") == "warning") warning += e.value("message", "") + "\n";
    EXPECT_NE(warning.find("checkpoint at step 8 failed, previous checkpoint kept"),
              std::string::npos)
        << warning;
    EXPECT_NE(warning.find(text), std::string::npos) << warning;
    // No half-written checkpoint is left looking complete, nor its temporary directory.
    std::error_code ec;
    EXPECT_FALSE(fs::exists(runDir / "checkpoints" / "step_00000008", ec));
    for (const auto& e : fs::directory_iterator(runDir / "checkpoints"))
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
    // The first checkpoint is intact: resuming it reproduces the uninterrupted run.
    const fs::path first = runDir / "checkpoints" / "step_00000004";
    ASSERT_TRUE(fs::exists(first / "state.json"));
    const fs::path resumed = rig.dir / ("resumed_" + fs::path(file).stem().string());
    ASSERT_EQ(rig.start(resumed, {}, first.string()).wait(), 0);
    EXPECT_TRUE(readBytes(checkpoints(resumed).front() / "model.safetensors") == refModel);
  }
  fs::remove_all(rig.dir);
}

// The database's WAL refuses writes (full disk, then an I/O error) mid-run: the engine says so,
// keeps every event in events.ndjson, finishes the run, and the database still opens with every
// step it acknowledged.
TEST(E2eFaultInjection, FullDiskOrIoErrorDuringARecordingBatchIsReportedAndLosesNothing) {
  for (int err : {ENOSPC, EIO}) {
    SCOPED_TRACE(err);
    FaultRig rig;
    const fs::path runDir = rig.dir / "run";
    Child c = rig.start(runDir, rig.fault("runs.db-wal", 0, 40000, "errno", err));
    ASSERT_EQ(c.wait(), 0);
    std::string warning;
    for (const auto& e : c.events())
      if (e.value("type", "") == "warning") warning += e.value("message", "") + "\n";
    EXPECT_NE(warning.find("database"), std::string::npos) << warning;
    EXPECT_NE(warning.find("recording continues in"), std::string::npos) << warning;
    expectAcknowledgedStepsPresent(rig.db, runDir, stepLosses(c));
    // The events file has the whole run: `runs import` can rebuild it.
    std::ifstream in(runDir / "events.ndjson");
    int steps = 0;
    std::string line;
    while (std::getline(in, line)) {
      const auto j = json::parse(line, nullptr, false);
      steps += j.is_object() && j.value("type", "") == "step";
    }
    EXPECT_EQ(steps, kSteps);
    fs::remove_all(rig.dir);
  }
}
