// End-to-end: the real trainscope-engine binary on a tiny config. Checks the event stream
// (hello first, finished last, seq monotonic, step fields, nothing but JSON on stdout), exit
// codes, SIGTERM mid-run (finished stopped + checkpoint, exit 130), stdin stop and --human.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../../support/WaitUntil.h"
#include "trainscope/core/config/Config.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Child {
  pid_t pid = -1;
  int out = -1;  // child's stdout
  int in = -1;   // child's stdin
  std::string buffer;
  std::vector<std::string> lines;

  // Reads until a line satisfies `pred` (true) or EOF/timeout (false).
  bool readUntil(const std::function<bool(const std::string&)>& pred,
                 double seconds = testsupport::kWaitCapMs / 1000.0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      size_t nl;
      while ((nl = buffer.find('\n')) != std::string::npos) {
        lines.push_back(buffer.substr(0, nl));
        buffer.erase(0, nl + 1);
        if (pred && pred(lines.back())) return true;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char chunk[4096];
      ssize_t n = ::read(out, chunk, sizeof chunk);
      if (n <= 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
    }
  }
  int wait() {
    readUntil(nullptr);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (in >= 0) ::close(in);
    ::close(out);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
};

Child spawn(const std::vector<std::string>& args) {
  int outPipe[2], inPipe[2];
  EXPECT_EQ(0, ::pipe(outPipe));
  EXPECT_EQ(0, ::pipe(inPipe));
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    ::dup2(inPipe[0], 0);
    ::dup2(outPipe[1], 1);
    ::close(outPipe[0]);
    ::close(inPipe[1]);
    std::vector<char*> argv;
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(outPipe[1]);
  ::close(inPipe[0]);
  c.out = outPipe[0];
  c.in = inPipe[1];
  return c;
}

fs::path tempDir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("trainscope_e2e_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::string writeConfig(const fs::path& dir, int64_t steps) {
  ts::core::RunConfig c;
  c.name = "e2e";
  c.model.layers = 1;
  c.model.heads = 2;
  c.model.d_model = 16;
  c.model.seq_len = 16;
  c.data.digits = 2;
  c.train.steps = steps;
  c.train.micro_batch = 4;
  c.train.eval_every = 5;
  c.device.threads = 1;
  const fs::path p = dir / "run.json";
  std::ofstream(p) << ts::core::toJson(c).dump(2);
  return p.string();
}

std::vector<json> parseAll(const std::vector<std::string>& lines) {
  std::vector<json> out;
  for (const auto& l : lines) {
    auto j = json::parse(l, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout line is not JSON: " << l;
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

}  // namespace

TEST(E2e, RunStreamsEventsFromHelloToFinished) {
  const fs::path dir = tempDir("run");
  Child c =
      spawn({TRAINSCOPE_ENGINE_BIN, "run", writeConfig(dir, 10), "--db", (dir / "runs.db").string(),
             "--run-dir", (dir / "run").string(), "--set", "train.seed=7"});
  ::close(c.in);  // EOF on stdin must not stop the run
  c.in = -1;
  const int code = c.wait();
  EXPECT_EQ(code, 0);
  auto events = parseAll(c.lines);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["type"], "hello");
  EXPECT_EQ(events.front()["protocol_version"], 1);
  EXPECT_TRUE(events.front().contains("capabilities"));
  // What precision.gemm auto means here, as capabilities says it.
  EXPECT_EQ(events.front()["gemm_auto"]["choice"],
            events.front()["capabilities"]["precisions"]["bf16"]["auto_gemm"]);
  EXPECT_EQ(events.back()["type"], "finished");
  EXPECT_EQ(events.back()["status"], "completed");
  int64_t seq = -1, steps = 0, lastStep = 0;
  bool sawConfig = false, sawMemory = false, sawEval = false, sawCheckpoint = false;
  for (const auto& e : events) {
    EXPECT_EQ(e["seq"].get<int64_t>(), seq + 1);
    seq = e["seq"].get<int64_t>();
    EXPECT_TRUE(e["time"].is_number());
    const std::string t = e["type"];
    if (t == "config") {
      sawConfig = true;
      EXPECT_EQ(e["config"]["train"]["seed"], 7);
    }
    if (t == "step") {
      ++steps;
      EXPECT_EQ(e["step"].get<int64_t>(), lastStep + 1);
      lastStep = e["step"];
      for (const char* k : {"loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms",
                            "loss_scale", "skipped"})
        EXPECT_TRUE(e.contains(k)) << k;
    }
    sawMemory |= t == "memory";
    sawEval |= t == "eval";
    sawCheckpoint |= t == "checkpoint";
    EXPECT_NE(t, "error") << e.dump();
  }
  EXPECT_TRUE(sawConfig);
  EXPECT_TRUE(sawMemory);
  EXPECT_TRUE(sawEval);
  EXPECT_TRUE(sawCheckpoint);
  EXPECT_EQ(steps, 10);
  EXPECT_TRUE(fs::exists(dir / "run" / "events.ndjson"));
  fs::remove_all(dir);
}

TEST(E2e, SigtermStopsAfterCurrentStepWithCheckpoint) {
  const fs::path dir = tempDir("sigterm");
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", writeConfig(dir, 100000), "--db",
                   (dir / "runs.db").string(), "--run-dir", (dir / "run").string()});
  ASSERT_TRUE(c.readUntil([](const std::string& l) {
    return l.find("\"step\"") != std::string::npos &&
           l.find("\"type\":\"step\"") != std::string::npos;
  })) << "no step event";
  ::kill(c.pid, SIGTERM);
  const int code = c.wait();
  EXPECT_EQ(code, 130);
  auto events = parseAll(c.lines);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "finished");
  EXPECT_EQ(events.back()["status"], "stopped");
  bool ck = false;
  for (const auto& e : events)
    if (e["type"] == "checkpoint") {
      ck = true;
      EXPECT_TRUE(fs::exists(fs::path(e["path"].get<std::string>()) / "model.safetensors"));
    }
  EXPECT_TRUE(ck);
  fs::remove_all(dir);
}

TEST(E2e, StdinStopAndHumanOutput) {
  const fs::path dir = tempDir("stdin");
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", writeConfig(dir, 100000), "--db",
                   (dir / "runs.db").string(), "--run-dir", (dir / "run").string()});
  ASSERT_TRUE(c.readUntil(
      [](const std::string& l) { return l.find("\"type\":\"step\"") != std::string::npos; }));
  const std::string cmd = "{\"cmd\":\"stop\"}\n";
  ASSERT_EQ(::write(c.in, cmd.data(), cmd.size()), ssize_t(cmd.size()));
  EXPECT_EQ(c.wait(), 0);
  auto events = parseAll(c.lines);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["status"], "stopped");

  Child h = spawn({TRAINSCOPE_ENGINE_BIN, "run", writeConfig(dir, 6), "--human", "--db",
                   (dir / "runs.db").string(), "--run-dir", (dir / "run2").string()});
  EXPECT_EQ(h.wait(), 0);
  std::string all;
  for (const auto& l : h.lines) all += l + "\n";
  EXPECT_NE(all.find("step      6/6"), std::string::npos) << all;
  EXPECT_NE(all.find("summary: completed"), std::string::npos) << all;
  EXPECT_NE(all.find("tokens/s"), std::string::npos) << all;
  fs::remove_all(dir);
}

TEST(E2e, InvalidConfigExitsTwoWithErrorEvent) {
  const fs::path dir = tempDir("invalid");
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", writeConfig(dir, 5), "--db",
                   (dir / "runs.db").string(), "--set", "model.layers=-3"});
  EXPECT_EQ(c.wait(), 2);
  auto events = parseAll(c.lines);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["type"], "hello");
  EXPECT_EQ(events[1]["type"], "error");
  EXPECT_NE(events[1]["message"].get<std::string>().find("layers"), std::string::npos);
  EXPECT_EQ(events.back()["status"], "failed");
  fs::remove_all(dir);
}

TEST(E2e, CapabilitiesJson) {
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "capabilities", "--json"});
  EXPECT_EQ(c.wait(), 0);
  std::string all;
  for (const auto& l : c.lines) all += l + "\n";
  auto j = json::parse(all, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << all;
  EXPECT_TRUE(j["cpu"].contains("avx2"));
  EXPECT_TRUE(j["cpu"].contains("avx512f"));
  EXPECT_TRUE(j["cpu"].contains("amx"));
  EXPECT_TRUE(j["precisions"]["fp32"]["supported"].get<bool>());
  EXPECT_EQ(j["backends"][0]["name"], "cpu");
  // The CPU's AVX2 flag agrees with /proc/cpuinfo (independent source).
  std::ifstream in("/proc/cpuinfo");
  std::string info((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(j["cpu"]["avx2"].get<bool>(), info.find(" avx2") != std::string::npos);
  EXPECT_EQ(j["cpu"]["avx512f"].get<bool>(), info.find(" avx512f") != std::string::npos);
  // bf16 GEMMs: "auto" picks them only with a native kernel, and then as its calibration
  // measured (GemmCalibrationTest); a native oneDNN bf16 kernel needs AVX512-BF16 or AMX.
  const auto& bf16 = j["precisions"]["bf16"];
  const bool native = bf16["native_gemm"].get<bool>();
  if (!native) EXPECT_EQ(bf16["auto_gemm"], "fp32");
  EXPECT_EQ(bf16["auto_gemm"], bf16["gemm_calibration"]["choice"]);
  if (info.find(" avx512f") == std::string::npos) EXPECT_FALSE(native);
  EXPECT_TRUE(bf16.contains(native ? "gemm_impl" : "gemm_why")) << bf16.dump();
}

// import-hf through the binary: a folder becomes a checkpoint (exit 0), a folder of an
// architecture the engine does not have is bad input (exit 2) and nothing is written.
TEST(E2e, ImportHfWritesACheckpointOrRefuses) {
  const fs::path dir = fs::temp_directory_path() / ("ts_e2e_import_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Child ok =
      spawn({TRAINSCOPE_ENGINE_BIN, "import-hf", std::string(TRAINSCOPE_TEST_DATA) + "/llama_tiny",
             "--out", (dir / "ckpt").string()});
  EXPECT_EQ(ok.wait(), 0);
  ASSERT_FALSE(ok.lines.empty());
  EXPECT_NE(ok.lines[0].find("imported 21 tensors"), std::string::npos) << ok.lines[0];
  EXPECT_TRUE(fs::exists(dir / "ckpt" / "model.safetensors"));
  fs::create_directories(dir / "bert");
  std::ofstream(dir / "bert" / "config.json") << R"({"architectures": ["BertModel"]})";
  Child bad = spawn({TRAINSCOPE_ENGINE_BIN, "import-hf", (dir / "bert").string(), "--out",
                     (dir / "ckpt2").string()});
  EXPECT_EQ(bad.wait(), 2);
  EXPECT_FALSE(fs::exists(dir / "ckpt2"));
  fs::remove_all(dir);
}

// evaluate through the binary: --json prints one line with loss, tokens and perplexity.
TEST(E2e, EvaluateJsonIsOneObjectLine) {
  const std::string data = TRAINSCOPE_TEST_DATA;
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "evaluate", data + "/llama_tiny", "--tokens",
                   data + "/eval/tokens_llama.bin", "--seq", "16", "--json"});
  EXPECT_EQ(c.wait(), 0);
  ASSERT_EQ(c.lines.size(), 1u);
  const auto j = json::parse(c.lines[0]);
  EXPECT_EQ(j["tokens"], 288);
  EXPECT_TRUE(j.contains("loss"));
  EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(j["loss"].get<double>()), 1e-9);
  Child both = spawn({TRAINSCOPE_ENGINE_BIN, "evaluate", data + "/llama_tiny", "--json"});
  EXPECT_EQ(both.wait(), 2);
}

// The consumer-gpu preset (QLoRA: LoRA on an NF4 base, 8-bit AdamW, bf16, full checkpointing,
// profiling) trains, here on the CPU and scaled down with --set as the preset's users on a
// smaller machine would; its memory plan predicts what the tracker measures.
TEST(E2e, ConsumerGpuPresetTrainsScaledDown) {
  const fs::path dir = tempDir("consumer");
  const std::string preset =
      std::string(TRAINSCOPE_SOURCE_DIR) + "/resources/presets/consumer-gpu.json";
  Child c = spawn({TRAINSCOPE_ENGINE_BIN,
                   "run",
                   preset,
                   "--db",
                   (dir / "runs.db").string(),
                   "--run-dir",
                   (dir / "run").string(),
                   "--set",
                   "model.layers=2",
                   "--set",
                   "model.d_model=64",
                   "--set",
                   "model.heads=4",
                   "--set",
                   "model.seq_len=32",
                   "--set",
                   "train.steps=6",
                   "--set",
                   "train.micro_batch=2",
                   "--set",
                   "train.grad_accum=2",
                   "--set",
                   "train.eval_every=3",
                   "--set",
                   "train.checkpoint_every=3",
                   "--set",
                   "device.threads=1",
                   "--set",
                   "device.backend=cpu",
                   "--set",
                   "profile.wait=1"});
  ::close(c.in);
  c.in = -1;
  EXPECT_EQ(c.wait(), 0);
  auto events = parseAll(c.lines);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["type"], "finished");
  EXPECT_EQ(events.back()["status"], "completed") << events.back().dump();
  int steps = 0;
  bool nf4 = false;
  json plan, memory;
  for (const auto& e : events) {
    const std::string t = e["type"];
    steps += t == "step";
    if (t == "log")
      nf4 |= e["message"].get<std::string>().find("stored as NF4") != std::string::npos;
    if (t == "memory_plan") plan = e;
    if (t == "memory") memory = e;
    EXPECT_NE(t, "error") << e.dump();
  }
  EXPECT_EQ(steps, 6);
  EXPECT_TRUE(nf4);
  ASSERT_TRUE(plan.contains("ranks") && memory.contains("ranks"));
  for (const char* cat : {"parameters", "gradients", "optimizer_state", "activations", "workspace"})
    EXPECT_EQ(plan["ranks"][0]["tiers"]["device"][cat]["peak"],
              memory["ranks"][0]["tiers"]["device"][cat]["peak"])
        << cat;
  fs::remove_all(dir);
}
