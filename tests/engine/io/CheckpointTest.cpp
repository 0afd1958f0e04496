// Safetensors round trip; checkpoints: round trip, truncation and a flipped byte are detected
// (and the model is left untouched), a write that fails (file size limit: the OS refuses like a
// full disk) keeps the previous checkpoint. The checkpoint tests run on the CPU backend and on
// the guarded CPU backend (TestBackends.h): saving and loading touch tensor memory only through
// the backend, as they must for a model on a GPU.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../../support/TestBackends.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;
using ts::testsupport::hostCopy;
namespace fs = std::filesystem;

namespace {
fs::path tempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() /
               ("trainscope_engine_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}
GptConfig tiny() {
  GptConfig c;
  c.layers = 2;
  c.heads = 2;
  c.d_model = 16;
  c.seq_len = 8;
  c.vocab = 13;
  return c;
}
// A tiny model after one AdamW step (gradients set through the backend) on `backend`.
struct Fixture {
  std::unique_ptr<ts::kernels::Backend> backend;
  MemoryTracker tracker;
  Gpt model;
  std::unique_ptr<Optimizer> opt;
  Fixture(uint64_t seed, const std::string& backendName)
      : backend(ts::testsupport::makeTestBackend(backendName)),
        model(tiny(), backend.get(), &tracker) {
    model.initWeights(seed);
    opt = makeOptimizer(ts::core::OptimizerConfig{}, model.arena(), backend.get(), &tracker);
    std::vector<float> g(static_cast<size_t>(model.numParams()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * float(i % 17);
    model.gradBuffer().copyFromHost(g.data());
    opt->step(1e-3f);
  }
};
// Checkpoint tests, on each test backend (GetParam()).
class CheckpointOn : public ::testing::TestWithParam<std::string> {
 protected:
  fs::path dirFor(const std::string& name) const {
    return tempDir(name + "_" + ts::testsupport::backendTestName(GetParam()));
  }
};
void flipByte(const fs::path& p, size_t pos) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(pos);
  char c;
  f.get(c);
  f.seekp(pos);
  f.put(static_cast<char>(c ^ 0x10));
}
}  // namespace

TEST(Safetensors, RoundTripAndValidation) {
  SafetensorsWriter w;
  std::vector<float> a = {1.f, -2.f, 3.5f, 0.25f, 9.f, 10.f};
  std::vector<int32_t> b = {7, -1, 3};
  w.add("a", "F32", {2, 3}, a.data(), a.size() * 4);
  w.add("b", "I32", {3}, b.data(), b.size() * 4);
  w.setMetadata("format", "pt");
  const std::string bytes = w.serialize();
  // Header length is little-endian and the data section is 8-byte aligned.
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 36);
  auto f = SafetensorsFile::parse(bytes, "mem");
  EXPECT_EQ(f.f32("a"), a);
  EXPECT_EQ(f.i32("b"), b);
  EXPECT_EQ(f.entry("a").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_THROW(SafetensorsFile::parse(bytes.substr(0, bytes.size() - 4), "cut"), FormatError);
  EXPECT_THROW(SafetensorsFile::parse(bytes.substr(0, 5), "tiny"), FormatError);
  EXPECT_THROW(SafetensorsFile::parse(std::string(8, '\xff') + "{}", "huge"), FormatError);
  EXPECT_THROW(f.f32("b"), FormatError);  // wrong dtype
  EXPECT_THROW(f.f32("missing"), FormatError);
}

TEST_P(CheckpointOn, RoundTripRestoresWeightsAndOptimizerState) {
  const fs::path dir = dirFor("roundtrip");
  Fixture a(1, GetParam()), b(2, GetParam());
  TrainingState st;
  st.step = 12;
  st.tokens = 3456;
  st.data = {{"pos", 99}};
  auto info = saveCheckpoint(dir.string(), a.model.arena(), *a.opt, {{"name", "x"}}, st);
  EXPECT_EQ(info.step, 12);
  EXPECT_TRUE(fs::exists(fs::path(info.path) / "model.safetensors"));
  auto loaded = loadCheckpoint(info.path + "/state.json", b.model.arena(), b.opt.get());
  EXPECT_EQ(loaded.state.step, 12);
  EXPECT_EQ(loaded.state.tokens, 3456);
  EXPECT_EQ(loaded.state.data["pos"], 99);
  EXPECT_EQ(loaded.config["name"], "x");
  EXPECT_EQ(hostCopy<uint32_t>(a.model.paramBuffer()), hostCopy<uint32_t>(b.model.paramBuffer()));
  auto sa = a.opt->state(), sb = b.opt->state();
  ASSERT_EQ(sa.size(), 2u);  // exp_avg, exp_avg_sq
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_EQ(hostCopy<uint8_t>(*sa[i].second), hostCopy<uint8_t>(*sb[i].second)) << sa[i].first;
  EXPECT_EQ(b.opt->stepCount(), 1);
  // The weights file is standard safetensors with the GPT-2 names.
  auto f = SafetensorsFile::load(info.path + "/model.safetensors");
  EXPECT_EQ(f.entry("h.1.attn.c_attn.weight").shape, (std::vector<int64_t>{48, 16}));
  fs::remove_all(dir);
}

TEST_P(CheckpointOn, TruncatedOrCorruptedIsDetectedAndNotLoaded) {
  const fs::path dir = dirFor("corrupt");
  Fixture a(1, GetParam());
  auto info = saveCheckpoint(dir.string(), a.model.arena(), *a.opt, {}, TrainingState{});
  const fs::path ck(info.path);
  auto expectRejected = [&](const char* what, const std::string& needle) {
    Fixture b(2, GetParam());
    const auto before = hostCopy<uint32_t>(b.model.paramBuffer());
    try {
      loadCheckpoint(info.path, b.model.arena(), b.opt.get());
      ADD_FAILURE() << what << ": loaded a damaged checkpoint";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
    EXPECT_EQ(before, hostCopy<uint32_t>(b.model.paramBuffer())) << what << ": model modified";
  };
  const fs::path model = ck / "model.safetensors";
  const std::string original = [&] {
    std::ifstream in(model, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  fs::resize_file(model, original.size() / 2);
  expectRejected("truncated weights", "truncated");
  { std::ofstream(model, std::ios::binary) << original; }
  flipByte(model, original.size() - 10);
  expectRejected("flipped byte in weights", "checksum");
  { std::ofstream(model, std::ios::binary) << original; }
  flipByte(ck / "optimizer.safetensors", 100);
  expectRejected("flipped byte in optimizer state", "checksum");
  Fixture ok(3, GetParam());
  EXPECT_THROW(loadCheckpoint(info.path, ok.model.arena(), ok.opt.get()), CheckpointError);
  fs::remove_all(dir);
}

TEST_P(CheckpointOn, TamperedSidecarAndMissingCheckpoint) {
  const fs::path dir = dirFor("sidecar");
  Fixture a(1, GetParam());
  TrainingState st;
  st.step = 5;
  auto info = saveCheckpoint(dir.string(), a.model.arena(), *a.opt, {}, st);
  const fs::path side = fs::path(info.path) / "state.json";
  std::string text;
  {
    std::ifstream in(side);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto pos = text.find("\"step\": 5");
  ASSERT_NE(pos, std::string::npos) << text;
  text[pos + 8] = '6';  // still valid JSON, different step
  { std::ofstream(side) << text; }
  Fixture b(2, GetParam());
  EXPECT_THROW(loadCheckpoint(info.path, b.model.arena(), b.opt.get()), CheckpointError);
  { std::ofstream(side) << text.substr(0, text.size() / 2); }
  EXPECT_THROW(loadCheckpoint(info.path, b.model.arena(), b.opt.get()), CheckpointError);
  EXPECT_THROW(loadCheckpoint((dir / "nope").string(), b.model.arena(), b.opt.get()),
               CheckpointError);
  fs::remove_all(dir);
}

TEST_P(CheckpointOn, FailedWriteKeepsPreviousCheckpoint) {
  const fs::path dir = dirFor("diskfull");
  Fixture a(1, GetParam());
  TrainingState st;
  st.step = 1;
  auto first = saveCheckpoint(dir.string(), a.model.arena(), *a.opt, {}, st);
  // Make the OS refuse writes past 4 KiB (EFBIG), as a full disk would refuse with ENOSPC.
  struct rlimit old {};
  ASSERT_EQ(0, getrlimit(RLIMIT_FSIZE, &old));
  auto oldHandler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &lim));
  st.step = 2;
  bool threw = false;
  try {
    saveCheckpoint(dir.string(), a.model.arena(), *a.opt, {}, st);
  } catch (const CheckpointError& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("cannot write"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, oldHandler);
  EXPECT_TRUE(threw);
  // No partial directory left behind, and the first checkpoint still loads.
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(dir)) ++dirs, (void)e;
  EXPECT_EQ(dirs, 1);
  Fixture b(2, GetParam());
  EXPECT_NO_THROW(loadCheckpoint(first.path, b.model.arena(), b.opt.get()));
  fs::remove_all(dir);
}

TEST(Checkpoint, PruneKeepsNewest) {
  const fs::path dir = tempDir("prune");
  Fixture a(1, "cpu");
  for (int s = 1; s <= 4; ++s) {
    TrainingState st;
    st.step = s;
    saveCheckpoint(dir.string(), a.model.arena(), *a.opt, {}, st);
  }
  pruneCheckpoints(dir.string(), 2);
  EXPECT_FALSE(fs::exists(dir / "step_00000002"));
  EXPECT_TRUE(fs::exists(dir / "step_00000003"));
  EXPECT_TRUE(fs::exists(dir / "step_00000004"));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, CheckpointOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         ts::testsupport::backendParamName);
