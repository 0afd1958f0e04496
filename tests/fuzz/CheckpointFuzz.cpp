// Checkpoint directories (engine/Checkpoint.h): state.json (the sidecar) with the files it
// lists, read by loadCheckpoint (resume), loadBaseWeights (a fine-tuning base) and
// checkpointAttachments. Input: one flag byte, the state.json text, and optionally a NUL byte
// followed by a model.safetensors that replaces the valid one. The other files come from a real
// checkpoint of a tiny model (AdamW state) written once per process. Flags: bit 0 re-stamps the
// sidecar's checksum (and the replaced model file's size and checksum) so inputs get past
// verification into the tensor and layout checks; bit 1 loads into a ZeRO shard of the
// optimizer; bit 2 also reads it as a base; bit 3 lists the attachments. Documented error:
// CheckpointError.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "FuzzSupport.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;
namespace fs = std::filesystem;

namespace {

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct World {
  std::unique_ptr<ts::kernels::Backend> backend = ts::kernels::makeCpuBackend();
  MemoryTracker tracker;
  std::unique_ptr<Gpt> model;
  std::unique_ptr<Optimizer> opt, shardOpt;
  fs::path dir;
  std::string modelBytes, optBytes;

  World() {
    GptConfig c;
    c.layers = 1;
    c.heads = 2;
    c.d_model = 8;
    c.seq_len = 4;
    c.vocab = 11;
    model = std::make_unique<Gpt>(c, backend.get(), &tracker);
    model->initWeights(7);
    opt = makeOptimizer(ts::core::OptimizerConfig{}, model->arena(), backend.get(), &tracker);
    const int64_t g = model->arena().gradSize();
    shardOpt = makeOptimizer(ts::core::OptimizerConfig{}, model->arena(), backend.get(), &tracker,
                             OptimizerShard{g / 3, g / 3 + g / 2});
    const fs::path root = ts::fuzz::scratchDir("checkpoint");
    TrainingState st;
    st.step = 3;
    st.tokens = 96;
    const auto info = saveCheckpoint(root.string(), model->arena(), *opt, {{"name", "fuzz"}}, st);
    dir = info.path;
    // The valid sidecar, kept beside the checkpoint (the seed corpus is made from it).
    fs::copy_file(dir / "state.json", root / "valid-state.json");
    modelBytes = readAll(dir / "model.safetensors");
    optBytes = readAll(dir / "optimizer.safetensors");
  }
};

World& world() {
  static World w;
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  World& w = world();
  ts::fuzz::Bytes in(data, size);
  const uint8_t flags = in.byte();
  std::string_view rest = in.rest();
  std::string state(rest), model = w.modelBytes;
  if (const size_t nul = rest.find('\0'); nul != std::string_view::npos) {
    state = std::string(rest.substr(0, nul));
    model = std::string(rest.substr(nul + 1));
  }
  if (flags & 1) {
    nlohmann::json s = nlohmann::json::parse(state, nullptr, false);
    if (s.is_object()) {
      if (model != w.modelBytes && s.contains("files") && s["files"].is_object())
        s["files"]["model.safetensors"] = {{"bytes", model.size()},
                                           {"fnv1a64", hex64(fnv1a64(model))}};
      s.erase("checksum");
      s["checksum"] = hex64(fnv1a64(s.dump()));
      state = s.dump();
    }
  }
  ts::fuzz::writeFile(w.dir / "state.json", state);
  ts::fuzz::writeFile(w.dir / "model.safetensors", model);
  ts::fuzz::writeFile(w.dir / "optimizer.safetensors", w.optBytes);

  ParamArena& arena = w.model->arena();
  try {
    if (flags & 2) {
      const int64_t g = arena.gradSize();
      (void)loadCheckpoint(w.dir.string(), arena, w.shardOpt.get(),
                           OptimizerShard{g / 3, g / 3 + g / 2});
    } else {
      (void)loadCheckpoint(w.dir.string(), arena, w.opt.get());
    }
  } catch (const CheckpointError&) {
  }
  if (flags & 4) {
    try {
      (void)loadBaseWeights(w.dir.string(), arena);
    } catch (const CheckpointError&) {
    }
  }
  if (flags & 8) {
    try {
      (void)checkpointAttachments(w.dir.string());
    } catch (const CheckpointError&) {
    }
  }
  return 0;
}
