// Data parallel and ZeRO with real ranks: `mpirun -np N trainscope-engine run ...` on CPU.
//
// Equivalence: N ranks with micro-batch b train the same weights as one rank with micro-batch
// N*b (the same global batch, the loss normalized by its target tokens): equal up to fp32
// summation order. Measured after 4 AdamW steps of the default preset (fp32): max |dw| 3.7e-8
// on 2 ranks and 5.2e-8 on 4, every stage alike; the bound is 1e-6 (a missing or doubled
// reduction moves weights by ~lr = 3e-3 per step).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/WaitUntil.h"
#include "trainscope/core/store/RunStore.h"
#include "trainscope/engine/io/Safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kEngine = TRAINSCOPE_ENGINE_BIN;
const std::string kPreset = std::string(TRAINSCOPE_SOURCE_DIR) + "/resources/presets/default.json";

struct Proc {
  pid_t pid = -1;
  int wait(double timeoutS, bool* timedOut = nullptr) {
    const auto t0 = std::chrono::steady_clock::now();
    int st = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid, &st, WNOHANG);
      if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeoutS) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
        if (timedOut) *timedOut = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

// Runs argv with stdout/stderr to files (stdin from /dev/null).
Proc start(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  Proc p;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::setpgid(0, 0);
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return p;
}

// As start(), with the child's stdin a pipe: *in receives its write end.
Proc startWithInput(const std::vector<std::string>& args, const fs::path& out, const fs::path& err,
                    int* in) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  Proc p;
  p.pid = ::fork();
  if (p.pid == 0) {
    ::setpgid(0, 0);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fds[0], 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[0]);
  *in = fds[1];
  return p;
}

std::vector<std::string> mpirun(int ranks) {
  std::vector<std::string> a = {"mpirun", "-np", std::to_string(ranks), "--oversubscribe"};
  if (::geteuid() == 0) a.push_back("--allow-run-as-root");
  return a;
}

struct RunOutput {
  fs::path dir;
  int exitCode = -1;
  std::vector<json> events;
  std::string err;
  const json* first(const std::string& type) const {
    for (const auto& e : events)
      if (e.value("type", "") == type) return &e;
    return nullptr;
  }
};

std::string readText(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("ts_dist_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(root_);
  }
  // The default preset, small and short, with `sets` on top; `ranks` > 1 under mpirun.
  RunOutput train(const std::string& name, int ranks, std::vector<std::string> sets,
                  const std::string& resume = "", bool viaMpirun = true) {
    RunOutput r;
    r.dir = root_ / name;
    std::vector<std::string> args =
        ranks > 1 && viaMpirun ? mpirun(ranks) : std::vector<std::string>{};
    args.insert(args.end(), {kEngine, "run", preset_, "--db", (root_ / "runs.db").string(),
                             "--run-dir", r.dir.string()});
    std::vector<std::string> base = {"train.steps=4", "train.eval_every=0",
                                     "train.checkpoint_every=0", "device.threads=1",
                                     "parallel.ranks=" + std::to_string(ranks)};
    base.insert(base.end(), sets.begin(), sets.end());
    for (const auto& s : base) args.insert(args.end(), {"--set", s});
    if (!resume.empty()) args.insert(args.end(), {"--resume", resume});
    Proc p = start(args, root_ / (name + ".out"), root_ / (name + ".err"));
    r.exitCode = p.wait(testsupport::kWaitCapMs / 1000.0);
    std::ifstream f(root_ / (name + ".out"));
    for (std::string line; std::getline(f, line);)
      if (!line.empty()) r.events.push_back(json::parse(line, nullptr, false));
    r.err = readText(root_ / (name + ".err"));
    return r;
  }
  fs::path root_;
  std::string preset_ = kPreset;  // the run config train() starts from
};

using Weights = std::map<std::string, std::vector<float>>;

Weights weightsAt(const fs::path& ckpt) {
  const std::string bytes = readText(ckpt / "model.safetensors");
  const auto f = ts::engine::SafetensorsFile::parse(bytes, (ckpt / "model.safetensors").string());
  Weights w;
  for (const auto& [name, entry] : f.entries()) {
    const auto& e = entry;
    int64_t n = 1;
    for (auto d : e.shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    f.readF32(name, v.data(), n);
    w[name] = std::move(v);
  }
  return w;
}

fs::path finalCheckpoint(const RunOutput& r, int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08d", step);
  return r.dir / "checkpoints" / buf;
}

double maxDiff(const Weights& a, const Weights& b) {
  double m = 0;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [name, va] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << "tensor " << name << " missing";
      continue;
    }
    EXPECT_EQ(va.size(), it->second.size()) << name;
    for (size_t i = 0; i < va.size() && i < it->second.size(); ++i)
      m = std::max(m, double(std::fabs(va[i] - it->second[i])));
  }
  return m;
}

constexpr double kWeightTol = 1e-6;

// Elements of b further than `tol` from a's.
int64_t countBeyond(const Weights& a, const Weights& b, double tol) {
  int64_t n = 0;
  for (const auto& [name, va] : a) {
    const auto& vb = b.at(name);
    for (size_t i = 0; i < va.size() && i < vb.size(); ++i)
      n += std::fabs(double(va[i]) - double(vb[i])) > tol;
  }
  return n;
}
int64_t countElements(const Weights& w) {
  int64_t n = 0;
  for (const auto& [name, v] : w) n += int64_t(v.size());
  return n;
}

std::string describe(const RunOutput& r) {
  std::string s = "exit " + std::to_string(r.exitCode) + "\n" + r.err.substr(0, 3000);
  for (const auto& e : r.events)
    if (e.value("type", "") == "error") s += "\n" + e.value("message", "");
  return s;
}

// A rank's current bytes of one memory category in one tier (a memory event's rank entry).
int64_t memCurrent(const json& rank, const char* tier, const char* category) {
  return rank.at("tiers").at(tier).at(category).at("current").get<int64_t>();
}

// The estimator's plan (the run's memory_plan event) equals the first measured memory event in
// every tier and category of every rank, current and peak.
void expectPlanExact(const RunOutput& r) {
  const json* mem = r.first("memory");
  const json* plan = r.first("memory_plan");
  ASSERT_TRUE(mem && plan);
  const json& planRanks =
      plan->contains("report") ? plan->at("report").at("ranks") : plan->at("ranks");
  for (const auto& rk : mem->at("ranks")) {
    const int rank = rk.at("rank").get<int>();
    const json& p = planRanks.at(size_t(rank)).at("tiers");
    for (const char* tier : {"device", "host", "nvme"})
      for (const char* c :
           {"parameters", "gradients", "optimizer_state", "activations", "workspace"})
        EXPECT_EQ(rk.at("tiers").at(tier).at(c), p.at(tier).at(c))
            << "rank " << rank << " " << tier << " " << c;
  }
}

}  // namespace

TEST_F(Distributed, RanksTrainTheWeightsOfOneRankWithTheWholeBatch) {
  const RunOutput ref = train("ref", 1, {"train.micro_batch=32"});
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 4));
  for (int n : {2, 4}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", stage " + std::to_string(stage));
      const std::string name = "n" + std::to_string(n) + "z" + std::to_string(stage);
      const RunOutput r = train(name, n,
                                {"train.micro_batch=" + std::to_string(32 / n),
                                 "parallel.zero_stage=" + std::to_string(stage)});
      ASSERT_EQ(r.exitCode, 0) << describe(r);
      const double d = maxDiff(w1, weightsAt(finalCheckpoint(r, 4)));
      EXPECT_LE(d, kWeightTol);
      // And the run reports the global batch: the same losses as one rank.
      std::vector<double> l1, ln;
      for (const auto& e : ref.events)
        if (e.value("type", "") == "step") l1.push_back(e.at("loss").get<double>());
      for (const auto& e : r.events)
        if (e.value("type", "") == "step") ln.push_back(e.at("loss").get<double>());
      ASSERT_EQ(l1.size(), ln.size());
      for (size_t i = 0; i < l1.size(); ++i) EXPECT_NEAR(l1[i], ln[i], 1e-5) << "step " << i + 1;
    }
  }
}

TEST_F(Distributed, GradientAccumulationAndMixedPrecisionMatchOneRank) {
  // Two micro-batches per step (stage 2/3 reduce-scatter each one into the running shard).
  for (const std::string pol : {"fp32", "bf16"}) {
    SCOPED_TRACE(pol);
    const RunOutput ref = train(
        "ref" + pol, 1, {"train.micro_batch=16", "train.grad_accum=2", "precision.policy=" + pol});
    ASSERT_EQ(ref.exitCode, 0) << describe(ref);
    const Weights w1 = weightsAt(finalCheckpoint(ref, 4));
    for (int stage : {0, 2, 3}) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      const RunOutput r =
          train(pol + "z" + std::to_string(stage), 2,
                {"train.micro_batch=8", "train.grad_accum=2", "precision.policy=" + pol,
                 "parallel.zero_stage=" + std::to_string(stage)});
      ASSERT_EQ(r.exitCode, 0) << describe(r);
      // bf16: the weights are rounded to bf16 after each step; summation order can flip a
      // rounding (one bf16 ulp of a 0.1-sized weight is 2^-11 ~ 5e-4).
      EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(r, 4))), pol == "fp32" ? kWeightTol : 1e-3);
    }
  }
}

TEST_F(Distributed, RanksReadTheirRowsOfATextFile) {
  // A text file: each rank reads only its rows of the global batch, and the loss is normalized
  // over the whole batch's targets, so the weights are one rank's.
  const fs::path text = root_ / "corpus.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 400; ++i)
      f << "line " << i << ": the quick brown fox jumps over the lazy dog " << i * 7919 % 1000
        << "\n";
  }
  const std::vector<std::string> data = {"data.source=text", "data.path=" + text.string(),
                                         "model.vocab=256", "model.seq_len=32"};
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.end(), data.begin(), data.end());
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=16"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  for (int stage : {0, 2}) {
    const RunOutput r =
        train("z" + std::to_string(stage), 2,
              with({"train.micro_batch=8", "parallel.zero_stage=" + std::to_string(stage)}));
    ASSERT_EQ(r.exitCode, 0) << describe(r);
    EXPECT_LE(maxDiff(weightsAt(finalCheckpoint(ref, 4)), weightsAt(finalCheckpoint(r, 4))),
              kWeightTol)
        << "stage " << stage;
  }
}

TEST_F(Distributed, LoraAdaptersShardOverAFrozenBase) {
  // LoRA on a frozen (random) base: the adapters' state is sharded; stage 3 shards the base too.
  const std::vector<std::string> lora = {"finetune.lora.r=4",
                                         "finetune.lora.targets=[\"q\",\"v\",\"fc\"]"};
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.end(), lora.begin(), lora.end());
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=16", "train.steps=6"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 6));
  for (int stage = 1; stage <= 3; ++stage) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const RunOutput r = train("z" + std::to_string(stage), 2,
                              with({"train.micro_batch=8", "train.steps=6",
                                    "parallel.zero_stage=" + std::to_string(stage)}));
    ASSERT_EQ(r.exitCode, 0) << describe(r);
    EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(r, 6))), kWeightTol);
    // Value and gradient space are laid out apart (the base is frozen); the plan knows both.
    expectPlanExact(r);
  }
  // A one-rank adapter checkpoint (no fp32 master) resumes under ZeRO-3 on 2 ranks.
  const RunOutput half = train("half", 1, with({"train.micro_batch=16", "train.steps=3"}));
  ASSERT_EQ(half.exitCode, 0) << describe(half);
  const RunOutput rest =
      train("rest", 2, with({"train.micro_batch=8", "train.steps=6", "parallel.zero_stage=3"}),
            finalCheckpoint(half, 3).string());
  ASSERT_EQ(rest.exitCode, 0) << describe(rest);
  EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(rest, 6))), kWeightTol);
}

TEST_F(Distributed, OptimizerOffloadToHostAndNvmeTrainsTheSameWeights) {
  const RunOutput ref = train("ref", 1, {"train.micro_batch=16", "train.steps=6"});
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 6));
  const fs::path nvme = root_ / "nvme";
  fs::create_directories(nvme);
  for (const std::string where : {"cpu", "nvme"}) {
    for (int stage : {1, 3}) {
      SCOPED_TRACE(where + ", stage " + std::to_string(stage));
      const RunOutput r = train(
          where + std::to_string(stage), 2,
          {"train.micro_batch=8", "train.steps=6", "parallel.zero_stage=" + std::to_string(stage),
           "parallel.offload_optimizer=" + where, "parallel.nvme_path=" + nvme.string()});
      ASSERT_EQ(r.exitCode, 0) << describe(r);
      EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(r, 6))), kWeightTol);
      // The state is where the config put it: 12 bytes (m, v, fp32 master) per shard element,
      // none on the device; the plan predicted every tier.
      const json* mem = r.first("memory");
      const json* plan = r.first("memory_plan");
      ASSERT_TRUE(mem && plan);
      const json& planRanks =
          plan->contains("report") ? plan->at("report").at("ranks") : plan->at("ranks");
      int64_t shard = 0;
      for (const auto& rk : mem->at("ranks")) {
        const json& t = rk.at("tiers");
        auto cur = [&](const char* tier, const char* c) {
          return t.at(tier).at(c).at("current").get<int64_t>();
        };
        EXPECT_EQ(cur("device", "optimizer_state"), 0);
        const int64_t off = cur(where == "cpu" ? "host" : "nvme", "optimizer_state");
        EXPECT_GT(off, 0);
        EXPECT_EQ(off % 12, 0);
        shard = off / 12;
        EXPECT_EQ(cur("host", "gradients"), 4 * shard);  // the reduced gradients come over
        const json& p = planRanks.at(size_t(rk.at("rank").get<int>())).at("tiers");
        for (const char* tier : {"device", "host", "nvme"})
          for (const char* c : {"parameters", "gradients", "optimizer_state", "workspace"})
            EXPECT_EQ(t.at(tier).at(c), p.at(tier).at(c)) << tier << " " << c;
      }
      // Step events say what moved: nvme reads and writes the whole state once per step.
      const json* step = r.first("step");
      ASSERT_TRUE(step);
      EXPECT_EQ(step->value("offload", ""), where);
      EXPECT_EQ(step->value("offload_bytes", int64_t(0)), 2 * 4 * shard);  // grads in, weights out
      if (where == "nvme") {
        EXPECT_EQ(step->value("offload_read_bytes", int64_t(0)), 12 * shard);
        EXPECT_EQ(step->value("offload_write_bytes", int64_t(0)), 12 * shard);
      }
    }
  }
  // The offload files are the run's scratch: gone when it ends.
  EXPECT_TRUE(fs::is_empty(nvme));
  // A checkpoint resumes into offloaded state (and the state it resumes is the checkpoint's).
  const RunOutput half =
      train("half", 2,
            {"train.micro_batch=8", "train.steps=3", "parallel.zero_stage=2",
             "parallel.offload_optimizer=nvme", "parallel.nvme_path=" + nvme.string()});
  ASSERT_EQ(half.exitCode, 0) << describe(half);
  const RunOutput rest =
      train("rest", 2,
            {"train.micro_batch=8", "train.steps=6", "parallel.zero_stage=2",
             "parallel.offload_optimizer=nvme", "parallel.nvme_path=" + nvme.string()},
            finalCheckpoint(half, 3).string());
  ASSERT_EQ(rest.exitCode, 0) << describe(rest);
  EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(rest, 6))), kWeightTol);
}

// 8-bit AdamW offloaded: the shard's 8-bit state (codes, absmaxes, small tensors' fp32 state)
// and an fp32 master on the host or in files, updated there. The weights are the device 8-bit
// optimizer's on one rank (to the 8-bit tolerance of EightBitAdamWShardsItsBlockwiseState), the
// state sits in its tier at the size the device optimizer keeps plus the master, nvme reads and
// writes all of it once per step, the plan is exact, and a device 8-bit checkpoint resumes into
// it (the same state names and layout).
TEST_F(Distributed, EightBitOptimizerOffloadTrainsTheSameWeights) {
  const fs::path nvme = root_ / "nvme";
  fs::create_directories(nvme);
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(),
             {"optimizer.state_bits=8", "train.steps=6", "parallel.nvme_path=" + nvme.string()});
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=16"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 6));
  const json* refMem = ref.first("memory");
  ASSERT_TRUE(refMem);
  const int64_t refState = memCurrent(refMem->at("ranks").at(0), "device", "optimizer_state");
  for (const std::string where : {"cpu", "nvme"}) {
    for (int stage : {1, 3}) {
      SCOPED_TRACE(where + ", stage " + std::to_string(stage));
      const RunOutput r =
          train(where + std::to_string(stage), 2,
                with({"train.micro_batch=8", "parallel.zero_stage=" + std::to_string(stage),
                      "parallel.offload_optimizer=" + where}));
      ASSERT_EQ(r.exitCode, 0) << describe(r);
      const Weights wn = weightsAt(finalCheckpoint(r, 6));
      EXPECT_LE(maxDiff(w1, wn), 1e-4);
      EXPECT_LE(countBeyond(w1, wn, kWeightTol), countElements(w1) / 1000);
      expectPlanExact(r);
      int64_t state = 0, shards = 0;
      for (const auto& rk : r.first("memory")->at("ranks")) {
        EXPECT_EQ(memCurrent(rk, "device", "optimizer_state"), 0);
        state += memCurrent(rk, where == "cpu" ? "host" : "nvme", "optimizer_state");
        shards += memCurrent(rk, "host", "gradients") / 4;  // the reduced gradient shard comes over
      }
      // The device optimizer's 8-bit state (fp32 policy: no master) plus a 4-byte master per
      // shard element.
      EXPECT_EQ(state, refState + 4 * shards);
      const json* step = r.first("step");
      ASSERT_TRUE(step);
      if (where == "nvme") {
        const int64_t perRank = state / 2;  // about: rank 0's is what the event reports
        EXPECT_GT(step->value("offload_read_bytes", int64_t(0)), perRank / 2);
        EXPECT_EQ(step->value("offload_read_bytes", int64_t(0)),
                  step->value("offload_write_bytes", int64_t(0)));
      }
    }
  }
  EXPECT_TRUE(fs::is_empty(nvme));
  // A device 8-bit checkpoint (one rank) resumes into the offloaded optimizer.
  const RunOutput half = train("half", 1, with({"train.micro_batch=16", "train.steps=3"}));
  ASSERT_EQ(half.exitCode, 0) << describe(half);
  const RunOutput rest = train(
      "rest", 2,
      with({"train.micro_batch=8", "parallel.zero_stage=2", "parallel.offload_optimizer=nvme"}),
      finalCheckpoint(half, 3).string());
  ASSERT_EQ(rest.exitCode, 0) << describe(rest);
  const Weights wr = weightsAt(finalCheckpoint(rest, 6));
  EXPECT_LE(maxDiff(w1, wr), 1e-4);
  EXPECT_LE(countBeyond(w1, wr, kWeightTol), countElements(w1) / 1000);
}

TEST_F(Distributed, ParameterOffloadUnderZeroThreeTrainsTheSameWeights) {
  const fs::path nvme = root_ / "nvme";
  fs::create_directories(nvme);
  for (const std::string pol : {"fp32", "bf16"}) {
    const RunOutput ref = train(
        "ref" + pol, 1, {"train.micro_batch=16", "precision.policy=" + pol, "train.eval_every=2"});
    ASSERT_EQ(ref.exitCode, 0) << describe(ref);
    const Weights w1 = weightsAt(finalCheckpoint(ref, 4));
    for (const std::string params : {"cpu", "nvme"}) {
      for (const std::string opt : {"none", "nvme"}) {
        SCOPED_TRACE(pol + ", params " + params + ", optimizer " + opt);
        const RunOutput r =
            train(pol + params + opt, 2,
                  {"train.micro_batch=8", "precision.policy=" + pol, "train.eval_every=2",
                   "parallel.zero_stage=3", "parallel.offload_params=" + params,
                   "parallel.offload_optimizer=" + opt, "parallel.nvme_path=" + nvme.string()});
        ASSERT_EQ(r.exitCode, 0) << describe(r);
        // Equal to one rank; bf16 rounds the same sums in another order (one ulp is 2^-8 of a
        // weight, and the measured difference is 1.2e-7).
        EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(r, 4))), pol == "fp32" ? kWeightTol : 1e-3);
        // Between steps the shard is in its tier and the device holds none of it; the plan
        // predicted every tier of every rank, current and peak (the blocks gathered whole two
        // at a time, the owned parts for the update, nvme's write-behind staging).
        expectPlanExact(r);
        const json* mem = r.first("memory");
        const size_t eb = pol == "fp32" ? 4 : 2;
        for (const auto& rk : mem->at("ranks")) {
          EXPECT_EQ(memCurrent(rk, "device", "parameters"), 0);
          const int64_t there = memCurrent(rk, params == "cpu" ? "host" : "nvme", "parameters");
          EXPECT_GT(there, 0);
          EXPECT_EQ(there % int64_t(eb), 0);
        }
        // nvme: the shard's file is read every step (ahead of use) and the bytes are in the
        // step events: the same in every step that follows no evaluation (an evaluation
        // gathers every block for each of its forwards, counted in the next step).
        if (params == "nvme") {
          std::set<int64_t> reads;
          bool afterEval = false;
          for (const auto& e : r.events) {
            const std::string type = e.value("type", "");
            if (type == "eval") afterEval = true;
            if (type != "step") continue;
            EXPECT_EQ(e.value("offload_params", ""), "nvme");
            EXPECT_TRUE(e.contains("offload_param_wait_ms"));
            if (!afterEval) reads.insert(e.value("offload_param_read_bytes", int64_t(0)));
            afterEval = false;
          }
          ASSERT_EQ(reads.size(), 1u);
          EXPECT_GT(*reads.begin(), 0);
        }
      }
    }
  }
  EXPECT_TRUE(fs::is_empty(nvme));
}

// The real binary on the guarded CPU backend (TRAINSCOPE_TEST_BACKEND, docs/testing.md): its
// memory faults on host access outside backend calls, and pages ZeRO gave back stay closed
// until committed, as unmapped granules of a CUDA buffer would. ZeRO 2 and 3 (sharded
// gradients and weights, per-block fp8 copies, parameters fetched from nvme, bf16 compute
// copies) then reach memory only as a GPU run must, and train the plain CPU run's weights bit
// for bit (the same kernels; MPI stages through host buffers on it). Loading (a resume, a LoRA
// base) writes only each rank's shard: before, it read and wrote the whole weights.
TEST_F(Distributed, ZeroOnTheGuardedBackendCommitsEveryPageItTouches) {
  const fs::path nvme = root_ / "nvme";
  fs::create_directories(nvme);
  const std::vector<std::vector<std::string>> cases = {
      {"parallel.zero_stage=2", "precision.policy=bf16"},
      {"parallel.zero_stage=3", "precision.policy=fp8"},
      {"parallel.zero_stage=3", "parallel.offload_params=nvme", "parallel.offload_optimizer=nvme",
       "parallel.nvme_path=" + nvme.string()},
      {"parallel.zero_stage=1", "optimizer.state_bits=8", "parallel.offload_optimizer=cpu"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    auto sets = cases[i];
    sets.push_back("train.micro_batch=8");
    const RunOutput plain = train("plain" + std::to_string(i), 2, sets);
    ASSERT_EQ(plain.exitCode, 0) << describe(plain);
    ::setenv("TRAINSCOPE_TEST_BACKEND", "cpu-guarded", 1);
    const RunOutput guarded = train("guarded" + std::to_string(i), 2, sets);
    ::unsetenv("TRAINSCOPE_TEST_BACKEND");
    ASSERT_EQ(guarded.exitCode, 0) << describe(guarded);
    bool onGuarded = false;  // the event naming the run directory names the backend too
    for (const auto& e : guarded.events)
      onGuarded = onGuarded || (e.contains("run_dir") && e.value("backend", "") == "cpu-guarded");
    EXPECT_TRUE(onGuarded) << "the run did not report the guarded backend";
    EXPECT_EQ(maxDiff(weightsAt(finalCheckpoint(plain, 4)), weightsAt(finalCheckpoint(guarded, 4))),
              0.0);
  }
  // Loads under ZeRO-3 write only the shard too: a resume, and LoRA on a base checkpoint.
  auto guardedRun = [&](const std::string& name, const std::vector<std::string>& sets,
                        const std::string& resume) {
    ::setenv("TRAINSCOPE_TEST_BACKEND", "cpu-guarded", 1);
    RunOutput r = train(name, 2, sets, resume);
    ::unsetenv("TRAINSCOPE_TEST_BACKEND");
    return r;
  };
  const std::vector<std::string> z3 = {"parallel.zero_stage=3", "precision.policy=bf16",
                                       "train.micro_batch=8"};
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(), z3.begin(), z3.end());
    return s;
  };
  const RunOutput whole = train("whole", 2, with({"train.checkpoint_every=2"}));
  ASSERT_EQ(whole.exitCode, 0) << describe(whole);
  const RunOutput resumed = guardedRun("resumed", z3, finalCheckpoint(whole, 2).string());
  ASSERT_EQ(resumed.exitCode, 0) << describe(resumed);
  EXPECT_EQ(maxDiff(weightsAt(finalCheckpoint(whole, 4)), weightsAt(finalCheckpoint(resumed, 4))),
            0.0);
  const std::vector<std::string> lora =
      with({"finetune.lora.r=4", "finetune.lora.targets=[\"q\",\"v\",\"fc\"]",
            "finetune.base_checkpoint=" + finalCheckpoint(whole, 4).string()});
  const RunOutput plainLora = train("plain-lora", 2, lora);
  ASSERT_EQ(plainLora.exitCode, 0) << describe(plainLora);
  const RunOutput guardedLora = guardedRun("guarded-lora", lora, "");
  ASSERT_EQ(guardedLora.exitCode, 0) << describe(guardedLora);
  EXPECT_EQ(
      maxDiff(weightsAt(finalCheckpoint(plainLora, 4)), weightsAt(finalCheckpoint(guardedLora, 4))),
      0.0);
}

TEST_F(Distributed, RanksDifferentFromTheConfigAreABadInput) {
  // mpirun -np 2 but parallel.ranks 3: refused before training, naming the key and what to do.
  std::vector<std::string> args = mpirun(2);
  args.insert(args.end(), {kEngine, "run", kPreset, "--db", (root_ / "runs.db").string(),
                           "--run-dir", (root_ / "mismatch").string(), "--set", "parallel.ranks=3",
                           "--set", "device.threads=1"});
  Proc p = start(args, root_ / "mismatch.out", root_ / "mismatch.err");
  EXPECT_EQ(p.wait(testsupport::kWaitCapMs / 1000.0), 2);
  const std::string out = readText(root_ / "mismatch.out");
  EXPECT_NE(out.find("parallel.ranks is 3 but the engine was started on 2 rank(s)"),
            std::string::npos)
      << out.substr(0, 2000);
  EXPECT_NE(out.find("mpirun -np 3"), std::string::npos);
  EXPECT_EQ(out.find("\"type\":\"step\""), std::string::npos);
}

TEST_F(Distributed, AMissingOffloadDirectoryFailsBeforeTraining) {
  const std::string missing = (root_ / "no" / "such").string();
  const RunOutput r = train("missing", 2,
                            {"train.micro_batch=8", "parallel.zero_stage=1",
                             "parallel.offload_optimizer=nvme", "parallel.nvme_path=" + missing});
  EXPECT_EQ(r.exitCode, 2) << describe(r);  // bad input
  EXPECT_EQ(r.first("step"), nullptr);
  const json* err = r.first("error");
  ASSERT_TRUE(err);
  const std::string msg = err->value("message", "");
  EXPECT_NE(msg.find("parallel.nvme_path"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST_F(Distributed, PerRankMemoryEqualsTheZeroFormulaAndThePlan) {
  // fp32 AdamW: parameters 4, gradients 4, optimizer state 8 bytes per (padded) parameter;
  // stage 1 divides the optimizer state by N, stage 2 also the gradients, stage 3 also the
  // parameters (ZeRO paper, Fig. 1, with K = 8 for fp32 Adam state and 4-byte weights/grads).
  for (int n : {2, 4}) {
    int64_t psi0 = 0;
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE("ranks " + std::to_string(n) + ", stage " + std::to_string(stage));
      const RunOutput r = train("m" + std::to_string(n) + std::to_string(stage), n,
                                {"train.micro_batch=8", "train.steps=2", "model.layers=3",
                                 "parallel.zero_stage=" + std::to_string(stage)});
      ASSERT_EQ(r.exitCode, 0) << describe(r);
      const json* mem = r.first("memory");
      const json* plan = r.first("memory_plan");
      ASSERT_TRUE(mem && plan);
      ASSERT_EQ(mem->at("ranks").size(), size_t(n));
      const json& planRanks =
          plan->contains("report") ? plan->at("report").at("ranks") : plan->at("ranks");
      int64_t psi = 0;  // this layout's (padded) parameter count, from rank 0's optimizer state
      for (const auto& rk : mem->at("ranks")) {
        const int rank = rk.at("rank").get<int>();
        const json& d = rk.at("tiers").at("device");
        auto cur = [&](const char* c) { return d.at(c).at("current").get<int64_t>(); };
        const int64_t opt = cur("optimizer_state");
        if (rank == 0) psi = opt / 8 * (stage >= 1 ? n : 1);
        EXPECT_EQ(opt, 8 * psi / (stage >= 1 ? n : 1));
        EXPECT_EQ(cur("gradients"), 4 * psi / (stage >= 2 ? n : 1));
        EXPECT_EQ(cur("parameters"), 4 * psi / (stage >= 3 ? n : 1));
        // The estimator predicted every category of this rank, current and peak.
        const json& p = planRanks.at(size_t(rank)).at("tiers").at("device");
        for (const char* c : {"parameters", "gradients", "optimizer_state", "workspace"}) {
          EXPECT_EQ(d.at(c).at("current"), p.at(c).at("current")) << "rank " << rank << " " << c;
          EXPECT_EQ(d.at(c).at("peak"), p.at(c).at("peak")) << "rank " << rank << " " << c;
        }
      }
      if (stage == 0) psi0 = psi;
      // The ZeRO layout pads each group to whole pages and the total to N shards: a little more
      // than the model's parameters, never less.
      EXPECT_GE(psi, psi0);
      EXPECT_LT(psi, psi0 + int64_t(n + 8) * 2048);
      // Bytes sent per step (ZeRO paper §7: 2Ψ for stages 0-2, 3Ψ for stage 3), as a ring sends
      // them ((N-1)/N of each collective's buffer), in fp32: stage 0 all-reduces the gradients,
      // 1 and 2 reduce-scatter them and all-gather the weights, 3 also gathers the weights in
      // forward and backward (the embeddings and head once per step, hence a little under 3Ψ).
      const json* step = r.first("step");
      ASSERT_TRUE(step);
      const double sent = step->value("comm_bytes", 0.0);
      const double unit = 4.0 * double(psi) * (n - 1) / n;
      if (stage <= 2)
        EXPECT_EQ(sent, 2 * unit);
      else
        EXPECT_TRUE(sent > 2.8 * unit && sent <= 3 * unit) << sent / unit;
    }
  }
}

TEST_F(Distributed, CheckpointFromTwoRanksResumesOnFourAndOnOne) {
  const RunOutput ref = train("ref", 1, {"train.micro_batch=16", "train.steps=6"});
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 6));
  const RunOutput first =
      train("first", 2, {"train.micro_batch=8", "train.steps=3", "parallel.zero_stage=2"});
  ASSERT_EQ(first.exitCode, 0) << describe(first);
  const fs::path ckpt = finalCheckpoint(first, 3);
  const auto state = json::parse(readText(ckpt / "state.json"));
  EXPECT_EQ(state.at("extra").at("zero_layout").at("ranks"), 2);
  // On 4 ranks with ZeRO-3 (another layout), and on 1 rank: the uninterrupted run's weights.
  const RunOutput on4 = train(
      "on4", 4, {"train.micro_batch=4", "train.steps=6", "parallel.zero_stage=3"}, ckpt.string());
  ASSERT_EQ(on4.exitCode, 0) << describe(on4);
  EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(on4, 6))), kWeightTol);
  const RunOutput on1 = train("on1", 1, {"train.micro_batch=16", "train.steps=6"}, ckpt.string());
  ASSERT_EQ(on1.exitCode, 0) << describe(on1);
  EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(on1, 6))), kWeightTol);
}

namespace {
// The bytes of one optimizer state tensor of a checkpoint.
std::string stateBytes(const fs::path& ckpt, const std::string& name) {
  const std::string file = readText(ckpt / "optimizer.safetensors");
  const auto f =
      ts::engine::SafetensorsFile::parse(file, (ckpt / "optimizer.safetensors").string());
  return std::string(f.bytes(name));
}
}  // namespace

// 8-bit AdamW under ZeRO 1-3: each rank keeps the blockwise state of its piece of every tensor
// (the ZeRO layout starts each tensor on a 256-element block, so no block is cut). Equality with
// one rank is to fp32 summation order, as for 32-bit state, except that a summation difference
// can move m or v across a code boundary: that element's update then differs by one step of the
// dynamic map (at most lr x a few % per step), so a handful of elements may differ by more.
TEST_F(Distributed, EightBitAdamWShardsItsBlockwiseState) {
  const std::vector<std::string> eight = {"optimizer.state_bits=8", "train.steps=4"};
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.end(), eight.begin(), eight.end());
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=16"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const fs::path refCkpt = finalCheckpoint(ref, 4);
  const Weights w1 = weightsAt(refCkpt);
  const int64_t total = countElements(w1);
  // The 8-bit state is in use: 32-bit AdamW moves most elements elsewhere.
  const RunOutput ref32 = train("ref32", 1, {"train.micro_batch=16", "train.steps=4"});
  ASSERT_EQ(ref32.exitCode, 0) << describe(ref32);
  EXPECT_GT(countBeyond(w1, weightsAt(finalCheckpoint(ref32, 4)), kWeightTol), total / 10);
  const json* refMem = ref.first("memory");
  ASSERT_TRUE(refMem);
  const int64_t refState = memCurrent(refMem->at("ranks").at(0), "device", "optimizer_state");
  const std::string refCodes = stateBytes(refCkpt, "exp_avg.codes");
  for (const auto& [n, stage] : std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {2, 3}, {4, 3}}) {
    SCOPED_TRACE("ranks " + std::to_string(n) + ", stage " + std::to_string(stage));
    const RunOutput r = train("n" + std::to_string(n) + "z" + std::to_string(stage), n,
                              with({"train.micro_batch=" + std::to_string(16 / n),
                                    "parallel.zero_stage=" + std::to_string(stage)}));
    ASSERT_EQ(r.exitCode, 0) << describe(r);
    const fs::path ckpt = finalCheckpoint(r, 4);
    const Weights wn = weightsAt(ckpt);
    EXPECT_LE(maxDiff(w1, wn), 1e-4);
    EXPECT_LE(countBeyond(w1, wn, kWeightTol), total / 1000);
    // Rank 0 wrote the ranks' gathered state in the one-rank layout: the same codes but for
    // such boundary cases.
    const std::string codes = stateBytes(ckpt, "exp_avg.codes");
    ASSERT_EQ(codes.size(), refCodes.size());
    int64_t differ = 0;
    for (size_t i = 0; i < codes.size(); ++i) differ += codes[i] != refCodes[i];
    EXPECT_LE(differ, int64_t(codes.size()) / 1000);
    // Memory: the ranks' states add up to one rank's (nothing duplicated, no block split in
    // two), each holds its share, and the estimator predicted every rank's to the byte.
    expectPlanExact(r);
    int64_t sum = 0;
    for (const auto& rk : r.first("memory")->at("ranks")) {
      const int64_t opt = memCurrent(rk, "device", "optimizer_state");
      sum += opt;
      EXPECT_LE(double(opt), 1.5 * double(refState) / n) << rk.at("rank");  // padding: not 1/N
    }
    EXPECT_EQ(sum, refState);
  }
  // Mixed precision: the shard's fp32 master next to its 8-bit state.
  const RunOutput b1 = train("bf16ref", 1, with({"train.micro_batch=16", "precision.policy=bf16"}));
  ASSERT_EQ(b1.exitCode, 0) << describe(b1);
  const RunOutput b2 = train(
      "bf16z2", 2, with({"train.micro_batch=8", "precision.policy=bf16", "parallel.zero_stage=2"}));
  ASSERT_EQ(b2.exitCode, 0) << describe(b2);
  // One bf16 ulp of a 0.1-sized weight is 2^-11 ~ 5e-4 (a summation difference can flip it).
  EXPECT_LE(maxDiff(weightsAt(finalCheckpoint(b1, 4)), weightsAt(finalCheckpoint(b2, 4))), 1e-3);
}

// A checkpoint of 8-bit state written by 2 ranks (ZeRO-2) resumes on 4 ranks (ZeRO-3, the
// state cut elsewhere) and on 1 rank, where the uninterrupted run ends.
TEST_F(Distributed, EightBitStateCheckpointMovesBetweenRankCounts) {
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(), {"optimizer.state_bits=8", "train.steps=6"});  // a later steps= wins
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=16"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 6));
  const RunOutput first =
      train("first", 2, with({"train.micro_batch=8", "train.steps=3", "parallel.zero_stage=2"}));
  ASSERT_EQ(first.exitCode, 0) << describe(first);
  const fs::path ckpt = finalCheckpoint(first, 3);
  const RunOutput on4 =
      train("on4", 4, with({"train.micro_batch=4", "parallel.zero_stage=3"}), ckpt.string());
  ASSERT_EQ(on4.exitCode, 0) << describe(on4);
  const RunOutput on1 = train("on1", 1, with({"train.micro_batch=16"}), ckpt.string());
  ASSERT_EQ(on1.exitCode, 0) << describe(on1);
  for (const RunOutput* r : {&on4, &on1}) {
    const Weights w = weightsAt(finalCheckpoint(*r, 6));
    EXPECT_LE(maxDiff(w1, w), 1e-4);
    EXPECT_LE(countBeyond(w1, w, kWeightTol), countElements(w1) / 1000);
  }
}

namespace {
// Every fp8 amax history of a checkpoint (state.json extra.fp8), as floats, by site and tensor.
std::map<std::string, std::vector<float>> amaxHistories(const fs::path& ckpt) {
  const auto fp8 = json::parse(readText(ckpt / "state.json")).at("extra").at("fp8");
  std::map<std::string, std::vector<float>> out;
  for (const auto& site : fp8.at("sites"))
    for (const char* k : {"x", "w", "g"}) {
      auto& h = out[site.at("weight").get<std::string>() + "." + k];
      for (const auto& bits : site.at(k).at("history")) {
        const uint32_t u = bits.get<uint32_t>();
        float f;
        std::memcpy(&f, &u, sizeof f);
        h.push_back(f);
      }
    }
  return out;
}
}  // namespace

// fp8 (delayed scaling) on several ranks: each micro-batch's amaxes are max-reduced over the
// ranks, so every rank quantizes with the scales one rank has over the whole batch; under ZeRO-3
// a block's fp8 weights are made when it is gathered after an update. The amax histories equal
// one rank's (without the reduction each rank's inputs are half the batch and their amaxes
// differ by percents), the fp32 master weights to summation order, and a ZeRO-3 checkpoint
// resumes on 1 and on 4 ranks where the uninterrupted run ends.
TEST_F(Distributed, Fp8RanksKeepOneRanksScalesAtEveryStage) {
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(), {"precision.policy=fp8", "train.steps=4", "train.eval_every=2"});
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=32"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const Weights w1 = weightsAt(finalCheckpoint(ref, 4));
  const auto h1 = amaxHistories(finalCheckpoint(ref, 4));
  ASSERT_FALSE(h1.empty());
  for (const auto& [n, stage] : std::vector<std::pair<int, int>>{{2, 0}, {2, 2}, {2, 3}, {4, 3}}) {
    SCOPED_TRACE("ranks " + std::to_string(n) + ", stage " + std::to_string(stage));
    const RunOutput r = train("n" + std::to_string(n) + "z" + std::to_string(stage), n,
                              with({"train.micro_batch=" + std::to_string(32 / n),
                                    "parallel.zero_stage=" + std::to_string(stage)}));
    ASSERT_EQ(r.exitCode, 0) << describe(r);
    EXPECT_LE(maxDiff(w1, weightsAt(finalCheckpoint(r, 4))), 1e-5);
    const auto hn = amaxHistories(finalCheckpoint(r, 4));
    ASSERT_EQ(hn.size(), h1.size());
    for (const auto& [name, h] : h1) {
      ASSERT_EQ(hn.at(name).size(), h.size()) << name;
      for (size_t i = 0; i < h.size(); ++i)
        EXPECT_NEAR(hn.at(name)[i], h[i], 1e-5 * std::fabs(h[i])) << name << " entry " << i;
    }
  }
  // ZeRO-3 checkpoint (fp8 state and weights gathered) -> 1 rank and 4 ranks.
  auto steps = [&](int k, std::vector<std::string> s) {
    s.push_back("train.steps=" + std::to_string(k));
    return with(s);
  };
  const RunOutput six = train("six", 1, steps(6, {"train.micro_batch=32"}));
  ASSERT_EQ(six.exitCode, 0) << describe(six);
  const RunOutput first =
      train("first", 2, steps(3, {"train.micro_batch=16", "parallel.zero_stage=3"}));
  ASSERT_EQ(first.exitCode, 0) << describe(first);
  const fs::path ckpt = finalCheckpoint(first, 3);
  const RunOutput on1 = train("on1", 1, steps(6, {"train.micro_batch=32"}), ckpt.string());
  const RunOutput on4 =
      train("on4", 4, steps(6, {"train.micro_batch=8", "parallel.zero_stage=3"}), ckpt.string());
  for (const RunOutput* r : {&on1, &on4}) {
    ASSERT_EQ(r->exitCode, 0) << describe(*r);
    EXPECT_LE(maxDiff(weightsAt(finalCheckpoint(six, 6)), weightsAt(finalCheckpoint(*r, 6))), 1e-5);
  }
}

// The workstation and cluster presets train as written on CPU ranks, scaled down with --set
// only in size (layers, width, sequence, batch, steps, profiler window) and in where the files
// go: every technique they switch on stays on. The cluster preset (fp8, ZeRO-3, optimizer and
// parameter offload to NVMe, 8-bit AdamW, LoRA, distillation, int8 activations, flash attention,
// selective checkpointing, a length curriculum, the profiler) needs a teacher: a short run of the
// same shape makes one.
TEST_F(Distributed, WorkstationAndClusterPresetsTrainScaledDown) {
  const std::string presets = std::string(TRAINSCOPE_SOURCE_DIR) + "/resources/presets/";
  const fs::path nvme = root_ / "nvme";
  fs::create_directories(nvme);
  const std::vector<std::string> small = {"model.layers=4",
                                          "model.d_model=64",
                                          "model.heads=4",
                                          "model.seq_len=64",
                                          "train.micro_batch=2",
                                          "train.grad_accum=2",
                                          "train.steps=8",
                                          "train.eval_every=4",
                                          "train.checkpoint_every=4",
                                          "profile.wait=2",
                                          "profile.warmup=1",
                                          "profile.active=2",
                                          "profile.repeat=1",
                                          "parallel.nvme_path=" + nvme.string()};
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(), small.begin(), small.end());
    return s;
  };
  auto expectTrained = [&](const RunOutput& r, int ranks) {
    ASSERT_EQ(r.exitCode, 0) << describe(r);
    int steps = 0;
    for (const auto& e : r.events)
      if (e.value("type", "") == "step") {
        ++steps;
        EXPECT_TRUE(std::isfinite(e.at("loss").get<double>()));
        EXPECT_EQ(e.value("ranks", 0), ranks);
      }
    EXPECT_EQ(steps, 8);
    const json* mem = r.first("memory");
    ASSERT_TRUE(mem);
    EXPECT_EQ(mem->at("ranks").size(), size_t(ranks));
    std::set<int> timelineRanks;  // the profiler's window, one lane group per rank
    for (const auto& e : r.events)
      if (e.value("type", "") == "kernels") timelineRanks.insert(e.value("rank", -1));
    EXPECT_EQ(timelineRanks.size(), size_t(ranks));
    EXPECT_TRUE(fs::exists(finalCheckpoint(r, 8) / "state.json"));
  };
  preset_ = presets + "workstation.json";
  const RunOutput ws = train("workstation", 2, with({}));
  expectTrained(ws, 2);
  expectPlanExact(ws);

  preset_ = kPreset;  // the teacher: a plain run of the same shape
  const RunOutput teacher =
      train("teacher", 1,
            {"model.layers=4", "model.d_model=64", "model.heads=4", "model.seq_len=64",
             "data.task=grammar", "train.micro_batch=2", "train.steps=2"});
  ASSERT_EQ(teacher.exitCode, 0) << describe(teacher);
  preset_ = presets + "cluster.json";
  for (int ranks : {2, 4}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const RunOutput cl =
        train("cluster" + std::to_string(ranks), ranks,
              with({"distill.teacher_checkpoint=" + finalCheckpoint(teacher, 2).string()}));
    expectTrained(cl, ranks);
    expectPlanExact(cl);  // every technique at once, predicted to the byte
    // What the preset asks for is what ran: the optimizer state and the parameter shards on
    // NVMe (none on the device), fp8 scaling state in the checkpoint, distillation's two terms.
    for (const auto& rk : cl.first("memory")->at("ranks")) {
      const json& t = rk.at("tiers");
      EXPECT_EQ(t.at("device").at("optimizer_state").at("current"), 0);
      EXPECT_GT(t.at("nvme").at("optimizer_state").at("current").get<int64_t>(), 0);
      EXPECT_GT(t.at("nvme").at("parameters").at("current").get<int64_t>(), 0);
    }
    const json* step = cl.first("step");
    ASSERT_TRUE(step);
    EXPECT_EQ(step->value("offload", ""), "nvme");
    EXPECT_TRUE(step->contains("distill_kl"));
    const auto state = json::parse(readText(finalCheckpoint(cl, 8) / "state.json"));
    EXPECT_EQ(state.at("optimizer").at("type"), "adamw8bit");
    EXPECT_TRUE(state.at("extra").contains("fp8"));
    EXPECT_EQ(state.at("extra").at("zero_layout").at("stage"), 3);
  }
  EXPECT_TRUE(fs::is_empty(nvme));  // the offload files are scratch
}

// ZeRO-3 with checkpointing in segments of 3 blocks: a segment's forward is recomputed with all
// its blocks gathered until their backward, and under fp8 each gathered block's fp8 weights
// exist only while it is gathered. The plan predicts every rank's memory exactly, and between
// steps an fp8 run holds no fp8 weight copy: its device parameters are the bf16 run's plus the
// fp8 scales (one fp32 per linear, delayed scaling).
TEST_F(Distributed, ZeroThreeSegmentsAndFp8CopiesArePredictedExactly) {
  const fs::path nvme = root_ / "nvme";
  fs::create_directories(nvme);
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(),
             {"model.layers=6", "memory.checkpointing=every_k", "memory.checkpoint_every=3",
              "parallel.zero_stage=3", "train.micro_batch=16", "train.steps=2",
              "parallel.nvme_path=" + nvme.string()});
    return s;
  };
  std::map<std::string, int64_t> params;
  for (const std::string pol : {"fp32", "bf16", "fp8"}) {
    SCOPED_TRACE(pol);
    const RunOutput r = train(pol, 2, with({"precision.policy=" + pol}));
    ASSERT_EQ(r.exitCode, 0) << describe(r);
    expectPlanExact(r);
    params[pol] = memCurrent(r.first("memory")->at("ranks").at(0), "device", "parameters");
  }
  EXPECT_EQ(params["fp8"], params["bf16"] + 4 * 4 * 6);
  const RunOutput off =
      train("offload", 2, with({"precision.policy=bf16", "parallel.offload_params=nvme"}));
  ASSERT_EQ(off.exitCode, 0) << describe(off);
  expectPlanExact(off);
}

// Partitioned initialization: under ZeRO-3 each rank's weights and gradients are its shard from
// construction (the rest of the buffers holds no page), each tensor drawn whole from one rank's
// random stream with only the owned part written. So setting up never holds the whole model:
// the setup peak stays under the training step's (on 4 ranks the whole fp32 model's weights and
// gradients alone would exceed it), and the weights are one rank's.
TEST_F(Distributed, ZeroThreeInitializesOnlyItsShard) {
  const std::vector<std::string> shape = {"model.layers=8", "model.d_model=256", "model.heads=4",
                                          "train.steps=2"};
  auto with = [&](std::vector<std::string> s) {
    s.insert(s.begin(), shape.begin(), shape.end());
    return s;
  };
  const RunOutput ref = train("ref", 1, with({"train.micro_batch=8"}));
  ASSERT_EQ(ref.exitCode, 0) << describe(ref);
  const RunOutput r = train("z3", 4, with({"train.micro_batch=2", "parallel.zero_stage=3"}));
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  EXPECT_LE(maxDiff(weightsAt(finalCheckpoint(ref, 2)), weightsAt(finalCheckpoint(r, 2))),
            kWeightTol);
  const json* mem = r.first("memory");
  ASSERT_TRUE(mem);
  const int64_t setup = mem->at("process").at("setup_peak").get<int64_t>();
  int64_t stepPeak = 0;
  for (const auto& [tier, cats] : mem->at("ranks").at(0).at("tiers").items())
    for (const auto& [cat, e] : cats.items()) stepPeak += e.at("peak").get<int64_t>();
  EXPECT_LE(setup, stepPeak);
  // The whole model's fp32 weights and gradients (8 bytes per parameter of one rank's model).
  const json* refMem = ref.first("memory");
  ASSERT_TRUE(refMem);
  const json& r0 = refMem->at("ranks").at(0);
  const int64_t whole =
      memCurrent(r0, "device", "parameters") + memCurrent(r0, "device", "gradients");
  EXPECT_GT(whole, stepPeak);
}

TEST_F(Distributed, RankZeroAloneRecordsAndTheEngineStartsMpirunItself) {
  // parallel.ranks 2 without mpirun: the engine relaunches itself under it.
  const RunOutput r =
      train("self", 2,
            {"train.micro_batch=8", "parallel.zero_stage=1", "train.steps=6",
             "profile.enabled=true", "profile.wait=2", "profile.warmup=1", "profile.active=2"},
            "", false);
  ASSERT_EQ(r.exitCode, 0) << describe(r);
  int hellos = 0, finished = 0;
  for (const auto& e : r.events) {
    hellos += e.value("type", "") == "hello";
    finished += e.value("type", "") == "finished";
  }
  EXPECT_EQ(hellos, 1);  // one event stream: rank 0's
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(r.first("hello")->at("ranks"), 2);
  // The profiled window's timeline of every rank, communication as its own category.
  std::map<int, int> commSpans;
  for (const auto& e : r.events) {
    if (e.value("type", "") != "kernels") continue;
    const int rank = e.value("rank", -1);
    commSpans[rank] += 0;
    for (const auto& sp : e.at("spans"))
      if (sp.value("cat", "") == "communication") ++commSpans[rank];
  }
  ASSERT_EQ(commSpans.size(), 2u);
  EXPECT_GT(commSpans[0], 0);
  EXPECT_GT(commSpans[1], 0);
  auto store = ts::core::RunStore::open((root_ / "runs.db").string());
  const auto runs = store.listRuns({});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].ranks, 2);
  EXPECT_EQ(runs[0].status, "completed");
}

TEST_F(Distributed, AKilledRankEndsTheRunFailedWithItsLastCheckpoint) {
  std::vector<std::string> args = mpirun(2);
  const fs::path dir = root_ / "killed";
  args.insert(args.end(),
              {kEngine, "run", kPreset, "--db", (root_ / "runs.db").string(), "--run-dir",
               dir.string(), "--set", "parallel.ranks=2", "--set", "device.threads=1", "--set",
               "train.micro_batch=8", "--set", "train.steps=1000000", "--set",
               "train.checkpoint_every=5", "--set", "train.eval_every=0"});
  Proc p = start(args, root_ / "killed.out", root_ / "killed.err");
  // Wait for the first checkpoint, then SIGKILL rank 1.
  pid_t victim = -1;
  testsupport::waitUntil([&] {
    if (!fs::exists(dir / "checkpoints" / "step_00000005" / "state.json")) return false;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string env = readText(e.path() / "environ");
      const std::string cmd = readText(e.path() / "cmdline");
      if (cmd.find(kEngine) == 0 && cmd.find(dir.string()) != std::string::npos &&
          env.find(std::string("OMPI_COMM_WORLD_RANK=1") + '\0') != std::string::npos)
        victim = std::stoi(e.path().filename().string());
    }
    return victim > 0;
  });
  ASSERT_GT(victim, 0) << readText(root_ / "killed.err");
  ::kill(victim, SIGKILL);
  // The survivor's collective deadline (30 s) ends it; the cap only catches a hang.
  bool timedOut = false;
  const int code = p.wait(testsupport::kWaitCapMs / 1000.0, &timedOut);
  EXPECT_FALSE(timedOut) << "the surviving rank never exited";
  EXPECT_NE(code, 0);
  auto store = ts::core::RunStore::open((root_ / "runs.db").string());
  const auto runs = store.listRuns({});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].status, "failed");
  EXPECT_NE(runs[0].reason.find("last checkpoint"), std::string::npos) << runs[0].reason;
}

TEST_F(Distributed, CommandsToRankZeroReachEveryRank) {
  // The app's commands arrive on rank 0's stdin only; pause, a profile request, a checkpoint and
  // stop must be taken by every rank at the same step, or the ranks' collectives would differ.
  std::vector<std::string> args = mpirun(2);
  const fs::path dir = root_ / "cmd";
  args.insert(args.end(),
              {kEngine, "run", kPreset, "--db", (root_ / "runs.db").string(), "--run-dir",
               dir.string(), "--set", "parallel.ranks=2", "--set", "parallel.zero_stage=3", "--set",
               "device.threads=1", "--set", "train.micro_batch=8", "--set", "train.steps=1000000",
               "--set", "train.eval_every=0"});
  int in = -1;
  Proc p = startWithInput(args, root_ / "cmd.out", root_ / "cmd.err", &in);
  ASSERT_GT(in, 0);
  auto stepsSoFar = [&] {
    int n = 0;
    std::ifstream f(root_ / "cmd.out");
    for (std::string line; std::getline(f, line);)
      n += line.find("\"type\":\"step\"") != std::string::npos;
    return n;
  };
  auto send = [&](const std::string& line) {
    const std::string l = line + "\n";
    ASSERT_EQ(::write(in, l.data(), l.size()), ssize_t(l.size()));
  };
  auto waitSteps = [&](int n) { testsupport::waitUntil([&] { return stepsSoFar() >= n; }); };
  auto saysPaused = [&] {
    std::ifstream f(root_ / "cmd.out");
    for (std::string line; std::getline(f, line);)
      if (line.find("paused at step") != std::string::npos) return true;
    return false;
  };
  waitSteps(3);
  send(R"({"cmd":"pause"})");
  ASSERT_TRUE(testsupport::waitUntil(saysPaused)) << "no \"paused at step\" log";
  const int paused = stepsSoFar();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(stepsSoFar(), paused + 1);  // at most the step in flight
  send(R"({"cmd":"resume"})");
  send(R"({"cmd":"profile","steps":2})");
  send(R"({"cmd":"checkpoint"})");
  waitSteps(paused + 6);
  send(R"({"cmd":"stop"})");
  bool timedOut = false;
  const int code = p.wait(testsupport::kWaitCapMs / 1000.0, &timedOut);
  ::close(in);
  ASSERT_FALSE(timedOut) << readText(root_ / "cmd.err");
  EXPECT_EQ(code, 0) << readText(root_ / "cmd.err");
  RunOutput r;
  std::ifstream f(root_ / "cmd.out");
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) r.events.push_back(json::parse(line, nullptr, false));
  std::set<int> profiledRanks;
  std::vector<std::string> reasons;
  for (const auto& e : r.events) {
    if (e.value("type", "") == "kernels") profiledRanks.insert(e.value("rank", -1));
    if (e.value("type", "") == "checkpoint") reasons.push_back(e.value("reason", ""));
  }
  EXPECT_EQ(profiledRanks, (std::set<int>{0, 1}));
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "requested"), reasons.end());
  ASSERT_FALSE(reasons.empty());
  EXPECT_EQ(reasons.back(), "stopped");
  const json* fin = nullptr;
  for (const auto& e : r.events)
    if (e.value("type", "") == "finished") fin = &e;
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->value("status", ""), "stopped");
}
