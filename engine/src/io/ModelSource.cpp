#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"

namespace ts::engine {

namespace fs = std::filesystem;

namespace {

nlohmann::json readJson(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw CheckpointError("cannot open " + p.string());
  try {
    return core::parseBoundedJson(in);
  } catch (const std::exception& e) {
    throw CheckpointError(p.string() + " is not valid JSON: " + e.what());
  }
}

// The vocabulary of the checkpoint's model: the config's, else the embedding's rows (in the
// checkpoint, or in its base).
int64_t vocabOf(const core::RunConfig& c, const fs::path& dir, const std::string& base) {
  if (c.model.vocab > 0) return c.model.vocab;
  std::string emb;  // the token embedding's name in the family's description
  for (const auto& t : core::modelTensors(core::archSpecOf(c.model, 1)))
    if (t.role == core::TensorRole::TokenEmbedding) emb = t.name;
  auto fromFile = [&](const fs::path& f) -> int64_t {
    const auto st = SafetensorsFile::load(f.string());
    return st.has(emb) ? st.entry(emb).shape.at(0) : 0;
  };
  if (int64_t v = fromFile(dir / "model.safetensors")) return v;
  if (base.empty()) throw CheckpointError(dir.string() + ": cannot tell the vocabulary size");
  if (isHfModelFolder(base)) return openHfModel(base).model.vocab;
  return fromFile(fs::path(base) / "model.safetensors");
}

// fp32 on any backend: what inference and export need of a training config.
GptConfig inferenceConfig(const core::RunConfig& rc, int64_t vocab) {
  GptConfig g = gptConfigFrom(rc, static_cast<int>(vocab), nullptr);
  g.working = DType::F32;
  g.saved = DType::F32;
  g.masterWeights = true;
  g.fp8 = GptConfig::Fp8Recipe::None;
  g.bf16Gemm = false;
  g.compression = GptConfig::Compression::None;
  // A 16-bit inference model (a bf16 teacher) keeps its whole fp32 compute copy, as the
  // estimator counts it: the windows are the training model's.
  g.gradWindow = false;
  g.valueWindow = false;
  g.checkpointEvery = 0;
  g.dropout = 0.f;
  g.lora.dropout = 0.0;
  return g;
}

// A checkpoint directory (or its state.json): the directory, its state and its run config.
struct CheckpointConfig {
  fs::path dir;
  nlohmann::json state;
  core::RunConfig config;
};
CheckpointConfig readCheckpointConfig(const std::string& path) {
  CheckpointConfig c{fs::path(path), {}, {}};
  std::error_code ec;
  if (fs::is_regular_file(c.dir, ec)) c.dir = c.dir.parent_path();
  c.state = readJson(c.dir / "state.json");
  const auto parsed = core::parseConfigJson(c.state.value("config", nlohmann::json::object()));
  if (!parsed.ok() || !parsed.config)
    throw CheckpointError((c.dir / "state.json").string() + ": its run config does not parse");
  c.config = *parsed.config;
  return c;
}

}  // namespace

BaseWeights loadBase(const std::string& path, ParamArena& arena, const core::ModelConfig* run,
                     int64_t vocab) {
  BaseWeights b;
  if (isHfModelFolder(path)) {
    const HfModel hf = openHfModel(path);
    if (run) {
      const auto mismatch = hfShapeMismatches(hf, *run, vocab);
      if (!mismatch.empty()) {
        std::string all;
        for (const auto& m : mismatch) all += (all.empty() ? "" : "; ") + m;
        throw std::invalid_argument(path + " (" + hf.architecture +
                                    ") does not fit the run's model: " + all);
      }
    }
    b.tensors = loadHfWeights(hf, arena).size();
    b.checksum = hfFingerprint(hf);
    b.what = hf.architecture + " folder";
  } else {
    const auto base = loadBaseWeights(path, arena);
    b.tensors = base.tensors.size();
    b.checksum = base.checksum;
    b.what = "checkpoint";
  }
  return b;
}

core::ModelConfig modelConfigAt(const std::string& path) {
  if (isHfModelFolder(path)) return openHfModel(path).model;
  const CheckpointConfig c = readCheckpointConfig(path);
  core::ModelConfig m = c.config.model;
  const bool adapters = c.state.value("weights", "all") == "trainable";
  m.vocab = static_cast<int>(
      vocabOf(c.config, c.dir, adapters ? c.config.finetune.base_checkpoint : std::string()));
  return m;
}

std::string modelTokenizer(const std::string& path) {
  std::error_code ec;
  const fs::path dir =
      fs::is_regular_file(path, ec) ? fs::path(path).parent_path() : fs::path(path);
  if (std::string own = HfTokenizer::findIn(dir.string()); !own.empty()) return own;
  if (isHfModelFolder(dir.string())) return "";
  return HfTokenizer::findIn(readCheckpointConfig(dir.string()).config.finetune.base_checkpoint);
}

LoadedModel loadModelFrom(const std::string& path, kernels::Backend* backend,
                          MemoryTracker* tracker, int seqLen,
                          const std::function<void(GptConfig&)>& adjust) {
  LoadedModel out;
  auto build = [&](int64_t vocab) {
    GptConfig g = inferenceConfig(out.config, vocab);
    if (adjust) adjust(g);
    out.model = std::make_unique<Gpt>(g, backend, tracker);
  };
  if (isHfModelFolder(path)) {
    const HfModel hf = openHfModel(path);
    out.hfFolder = true;
    out.config.model = hf.model;
    if (seqLen > 0) {
      if (core::archSpecOf(hf.model, 1).learnedPos && seqLen > hf.model.seq_len)
        throw FormatError(path + ": windows of " + std::to_string(seqLen) +
                          " tokens exceed the model's " + std::to_string(hf.model.seq_len) +
                          " positions (n_positions)");
      out.config.model.seq_len = seqLen;
    }
    build(hf.model.vocab);
    loadHfWeights(hf, out.model->arena());
    if (out.model->mixed()) out.model->roundWeights();
    return out;
  }
  const CheckpointConfig cc = readCheckpointConfig(path);
  const fs::path& dir = cc.dir;
  const nlohmann::json& state = cc.state;
  out.config = cc.config;
  out.adapterOnly = state.value("weights", "all") == "trainable";
  if (out.adapterOnly) {
    const auto extra = state.value("extra", nlohmann::json::object());
    out.base = extra.contains("base_checkpoint") ? extra["base_checkpoint"].value("path", "")
                                                 : out.config.finetune.base_checkpoint;
    if (out.base.empty())
      throw CheckpointError(dir.string() +
                            " holds LoRA adapters trained on a randomly initialised base (no "
                            "finetune.base_checkpoint): there is no base to apply them to");
  }
  if (seqLen > 0) {
    const bool positions = core::archSpecOf(out.config.model, 1).learnedPos;
    if (positions && seqLen > out.config.model.seq_len)
      throw CheckpointError(dir.string() + ": windows of " + std::to_string(seqLen) +
                            " tokens exceed the model's " +
                            std::to_string(out.config.model.seq_len) + " positions");
    if (!positions) out.config.model.seq_len = seqLen;
  }
  const int64_t vocab = vocabOf(out.config, dir, out.base);
  build(vocab);
  if (out.adapterOnly) loadBase(out.base, out.model->arena());
  loadCheckpoint(dir.string(), out.model->arena(), nullptr);
  if (out.model->mixed()) out.model->roundWeights();
  return out;
}

}  // namespace ts::engine
