#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "trainscope-checkpoint";
constexpr int kVersion = 1;

// A file written in pieces, its size and checksum counted on the way, made durable by
// finish(); created with 0666 so the user's umask decides who may read it.
class DurableFile {
 public:
  explicit DurableFile(fs::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0)
      throw CheckpointError("cannot create " + path_.string() + ": " + std::strerror(errno));
  }
  ~DurableFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const char* data, size_t n) {
    hash_ = fnv1a64(std::string_view(data, n), hash_);
    bytes_ += n;
    for (size_t done = 0; done < n;) {
      const ssize_t k = ::write(fd_, data + done, n - done);
      if (k < 0) {
        if (errno == EINTR) continue;
        fail("write");
      }
      done += static_cast<size_t>(k);
    }
  }
  void finish() {
    if (::fsync(fd_) != 0) fail("sync");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      throw CheckpointError("cannot close " + path_.string() + ": " + std::strerror(errno));
  }
  uint64_t bytes() const { return bytes_; }
  std::string checksum() const { return hex64(hash_); }
  // The sidecar's entry for this file.
  nlohmann::json listing() const { return {{"bytes", bytes_}, {"fnv1a64", checksum()}}; }

 private:
  [[noreturn]] void fail(const char* what) {
    const int err = errno;
    throw CheckpointError(std::string("cannot ") + what + " " + path_.string() + ": " +
                          std::strerror(err));
  }
  fs::path path_;
  int fd_ = -1;
  uint64_t hash_ = fnv1a64({});
  uint64_t bytes_ = 0;
};

nlohmann::json writeFileDurable(const fs::path& path, std::string_view bytes) {
  DurableFile f(path);
  f.write(bytes.data(), bytes.size());
  f.finish();
  return f.listing();
}

nlohmann::json writeDurable(const fs::path& path, const SafetensorsWriter& w) {
  DurableFile f(path);
  w.writeTo([&](const char* d, size_t n) { f.write(d, n); });
  f.finish();
  return f.listing();
}

void syncDir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot open " + path.string() + ": " + std::strerror(errno));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string stateChecksum(nlohmann::json state) {
  state.erase("checksum");
  return hex64(fnv1a64(state.dump()));
}

std::string stepDirName(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

}  // namespace

namespace {
// Safetensors dtype names of the optimizer state tensors (fp32, or bf16 under pure_bf16).
std::string stateDtype(kernels::DType d) {
  switch (d) {
    case kernels::DType::F32:
      return "F32";
    case kernels::DType::BF16:
      return "BF16";
    case kernels::DType::F16:
      return "F16";
    case kernels::DType::I8:
      return "U8";  // 8-bit optimizer codes
    default:
      return kernels::dtypeName(d);
  }
}
}  // namespace

namespace {
// Weights only (import-hf): no state, optimizer "none".
class NoOptimizer final : public Optimizer {
 public:
  void step(float) override {}
  int64_t stepCount() const override { return 0; }
  void setStepCount(int64_t) override {}
  std::vector<std::pair<std::string, Tensor*>> state() override { return {}; }
  std::string name() const override { return "none"; }
};

CheckpointInfo saveTo(const fs::path& final, ParamArena& model, Optimizer& optimizer,
                      const nlohmann::json& config, const TrainingState& state);
}  // namespace

CheckpointInfo saveCheckpoint(const std::string& parentDir, ParamArena& model, Optimizer& optimizer,
                              const nlohmann::json& config, const TrainingState& state) {
  return saveTo(fs::path(parentDir) / stepDirName(state.step), model, optimizer, config, state);
}

CheckpointInfo saveWeightsCheckpoint(const std::string& dir, ParamArena& arena,
                                     const nlohmann::json& config, const nlohmann::json& extra,
                                     const std::vector<std::string>& attachments) {
  NoOptimizer none;
  TrainingState st;
  st.extra = extra;
  st.attachments = attachments;
  return saveTo(fs::path(dir), arena, none, config, st);
}

namespace {
CheckpointInfo saveTo(const fs::path& final, ParamArena& model, Optimizer& optimizer,
                      const nlohmann::json& config, const TrainingState& state) {
  profiler::ScopedRange range("checkpoint_save", profiler::SpanCategory::IO);
  const fs::path parent = final.has_parent_path() ? final.parent_path() : fs::path(".");
  const fs::path tmp = parent / (final.filename().string() + ".tmp." + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw CheckpointError("cannot create " + parent.string() + ": " + ec.message());
  fs::remove_all(tmp, ec);
  try {
    fs::create_directories(tmp, ec);
    if (ec) throw CheckpointError("cannot create " + tmp.string() + ": " + ec.message());

    // Weights and optimizer state stream to the files a chunk at a time, through the backend
    // (they may live on a device): no whole host copy of either is ever made.
    SafetensorsWriter mw;
    mw.setMetadata("format", "pt");
    // With frozen tensors (a LoRA run's base) only the trainable ones are written: the base is
    // rebuilt from where it came from (finetune.base_checkpoint, or the seed), so a checkpoint
    // is the adapters' size.
    const bool trainableOnly = !model.allTrainable();
    for (const auto& p : model.params()) {
      if (trainableOnly && !p.trainable()) continue;
      mw.addStreamed(p.name, "F32", p.shape, sizeof(float) * size_t(p.numel),
                     [&model, &p](char* dst, size_t off, size_t n) {
                       model.valueBytesToHost(p, dst, int64_t(off), int64_t(n));
                     });
    }
    SafetensorsWriter ow;
    auto optState = optimizer.state();
    for (auto& [name, t] : optState) {
      const Tensor* tensor = t;
      ow.addStreamed(name, stateDtype(t->dtype()), t->shape(), size_t(t->bytes()),
                     [tensor](char* dst, size_t off, size_t n) {
                       tensor->copyRangeToHost(dst, int64_t(off), int64_t(n));
                     });
    }
    const nlohmann::json modelFile = writeDurable(tmp / "model.safetensors", mw);
    const nlohmann::json optFile = writeDurable(tmp / "optimizer.safetensors", ow);

    nlohmann::json s;
    s["format"] = kFormat;
    s["version"] = kVersion;
    s["step"] = state.step;
    s["tokens"] = state.tokens;
    s["optimizer"] = {{"type", optimizer.name()}, {"step_count", optimizer.stepCount()}};
    s["weights"] = trainableOnly ? "trainable" : "all";
    s["data"] = state.data;
    s["extra"] = state.extra;
    s["config"] = config;
    s["files"] = {{"model.safetensors", modelFile}, {"optimizer.safetensors", optFile}};
    for (const std::string& src : state.attachments) {
      const std::string name = fs::path(src).filename().string();
      if (s["files"].contains(name) || name == "state.json")
        throw CheckpointError("cannot attach " + src + ": the checkpoint has its own " + name);
      s["files"][name] = writeFileDurable(tmp / name, readFile(src));
    }
    const std::string checksum = stateChecksum(s);
    s["checksum"] = checksum;
    const std::string stateBytes = s.dump(1);
    writeFileDurable(tmp / "state.json", stateBytes);
    syncDir(tmp);

    // Replace an older checkpoint of the same step (e.g. a periodic one before the final one).
    if (fs::exists(final)) {
      const fs::path old =
          parent / (final.filename().string() + ".old." + std::to_string(::getpid()));
      fs::remove_all(old, ec);
      fs::rename(final, old, ec);
      if (ec) throw CheckpointError("cannot replace " + final.string() + ": " + ec.message());
      fs::rename(tmp, final, ec);
      if (ec) {
        std::error_code ec2;
        fs::rename(old, final, ec2);
        throw CheckpointError("cannot rename into " + final.string() + ": " + ec.message());
      }
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, final, ec);
      if (ec) throw CheckpointError("cannot rename into " + final.string() + ": " + ec.message());
    }
    syncDir(parent);
    CheckpointInfo info;
    info.path = final.string();
    info.checksum = checksum;
    info.step = state.step;
    info.bytes = static_cast<int64_t>(stateBytes.size());
    for (const auto& [name, f] : s["files"].items()) info.bytes += f["bytes"].get<int64_t>();
    return info;
  } catch (const std::filesystem::filesystem_error& e) {
    std::error_code ec2;
    fs::remove_all(tmp, ec2);
    throw CheckpointError(std::string("checkpoint failed: ") + e.what());
  } catch (...) {
    std::error_code ec2;
    fs::remove_all(tmp, ec2);
    throw;
  }
}

}  // namespace

namespace {
// state.json of a checkpoint directory, verified: valid JSON, our format and version, and its
// own checksum. Throws CheckpointError naming the file.
nlohmann::json readVerifiedState(const fs::path& dir) {
  const fs::path statePath = dir / "state.json";
  nlohmann::json s;
  try {
    s = core::parseBoundedJson(readFile(statePath));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(statePath.string() + " is corrupt (not valid JSON): " + e.what());
  }
  // Types checked before values: json::value() throws type_error on a field of another type.
  if (!s.is_object() || !s.contains("format") || !s["format"].is_string() ||
      s["format"].get<std::string>() != kFormat)
    throw CheckpointError(statePath.string() + " is not a trainscope checkpoint (format is " +
                          (s.is_object() && s.contains("format") ? s["format"].dump() : "missing") +
                          ", expected \"" + kFormat + "\")");
  if (!s.contains("version") || !s["version"].is_number_integer() || s["version"] != kVersion)
    throw CheckpointError(statePath.string() + " has unsupported version " +
                          (s.contains("version") ? s["version"].dump() : "(missing)") +
                          " (this build reads version " + std::to_string(kVersion) + ")");
  if (!s.contains("checksum") || !s["checksum"].is_string() || s["checksum"] != stateChecksum(s))
    throw CheckpointError(statePath.string() + " is corrupt (checksum mismatch)");
  if (s.contains("weights") && s["weights"] != "all" && s["weights"] != "trainable")
    throw CheckpointError(statePath.string() + ": weights is " + s["weights"].dump() +
                          ", expected \"all\" or \"trainable\"");
  return s;
}

// One of the files the sidecar lists, its size and checksum verified by reading it in pieces
// (a checkpoint is as big as the model's states: never a whole copy in memory).
void verifyListedFile(const fs::path& dir, const nlohmann::json& s, const std::string& name) {
  const fs::path p = dir / name;
  uint64_t expectBytes = 0;
  std::string expectSum;
  try {
    const auto& f = s.at("files").at(name);
    expectBytes = f.at("bytes").get<uint64_t>();
    expectSum = f.at("fnv1a64").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError((dir / "state.json").string() + " is malformed: " + e.what());
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) throw CheckpointError("cannot open " + p.string() + ": " + std::strerror(errno));
  std::vector<char> chunk(size_t(4) << 20);
  uint64_t h = fnv1a64({}), size = 0;
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    const auto k = static_cast<size_t>(in.gcount());
    h = fnv1a64(std::string_view(chunk.data(), k), h);
    size += k;
  }
  if (in.bad()) throw CheckpointError("cannot read " + p.string() + ": " + std::strerror(errno));
  if (size != expectBytes)
    throw CheckpointError(p.string() + " is truncated or damaged: " + std::to_string(size) +
                          " bytes, expected " + std::to_string(expectBytes));
  if (hex64(h) != expectSum) throw CheckpointError(p.string() + " is corrupt (checksum mismatch)");
}

SafetensorsFile readVerifiedFile(const fs::path& dir, const nlohmann::json& s,
                                 const std::string& name) {
  verifyListedFile(dir, s, name);
  try {
    return SafetensorsFile::load((dir / name).string());  // mapped, not read into memory
  } catch (const FormatError& e) {
    throw CheckpointError(e.what());
  }
}
}  // namespace

namespace {
// Gradient-space offsets of the trainable tensors (-1 frozen) and the buffer length, for the
// arena's tensors laid out with `align` / `padTo` (as ParamArena lays them out): how a
// checkpoint written by another number of ranks (core/ZeroLayout.h) is read back.
std::pair<std::vector<int64_t>, int64_t> gradLayout(const ParamArena& arena, int64_t align,
                                                    int64_t padTo, int64_t tensorAlign) {
  auto up = [](int64_t n, int64_t a) { return a > 1 ? (n + a - 1) / a * a : n; };
  std::vector<int64_t> off;
  int64_t g = 0;
  int block = -2;
  for (const auto& p : arena.params()) {
    if (p.spec.block != block) {
      g = up(g, align);
      block = p.spec.block;
    }
    if (p.trainable()) g = up(g, tensorAlign);
    off.push_back(p.trainable() ? g : -1);
    if (p.trainable()) g += p.numel;
  }
  return {off, up(up(g, align), padTo)};
}
size_t stateElementBytes(const std::string& dtype) {
  return dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 0;
}

// Every model tensor's shape, checked before the model is touched. A checkpoint of the
// trainable tensors only (a LoRA run) must hold exactly this model's trainable ones; the frozen
// base stays as the caller built it.
void checkModelShapes(const SafetensorsFile& mf, const ParamArena& model, bool trainableOnly,
                      const fs::path& dir) {
  for (const auto& p : model.params()) {
    if (trainableOnly && !p.trainable()) {
      if (mf.has(p.name))
        throw CheckpointError((dir / "model.safetensors").string() + " has tensor '" + p.name +
                              "', which this run keeps frozen (different finetune config?)");
      continue;
    }
    if (!mf.has(p.name))
      throw CheckpointError((dir / "model.safetensors").string() + " has no tensor '" + p.name +
                            "' (different model shape?)");
    const auto& e = mf.entry(p.name);
    if (e.dtype != "F32" || e.shape != p.shape)
      throw CheckpointError((dir / "model.safetensors").string() + ": tensor '" + p.name +
                            "' has shape " + nlohmann::json(e.shape).dump() + ", the model needs " +
                            nlohmann::json(p.shape).dump());
  }
}

// Optimizer state in another layout (written by another number of ZeRO ranks), or read into a
// rank's shard, is remapped tensor by tensor from the writer's gradient layout.
struct StateLayout {
  bool remap = false;
  std::pair<std::vector<int64_t>, int64_t> src;  // the writer's offsets and buffer length
};

StateLayout stateLayoutOf(const nlohmann::json& s, const ParamArena& model, OptimizerShard shard) {
  const nlohmann::json extra = s.value("extra", nlohmann::json::object());
  const auto zl = extra.value("zero_layout", nlohmann::json::object());
  const int64_t srcAlign = zl.value("align", int64_t(1)), srcPad = zl.value("pad_to", int64_t(1)),
                srcTensorAlign = zl.value("tensor_align", int64_t(1));
  StateLayout l;
  l.remap = shard.sharded() || (zl.size() > 0 && (srcAlign != model.options().align ||
                                                  srcPad != model.options().padTo ||
                                                  srcTensorAlign != model.options().tensorAlign));
  if (l.remap) l.src = gradLayout(model, srcAlign, srcPad, srcTensorAlign);
  return l;
}

// The optimizer's type and every state tensor's size and dtype against the file.
void checkOptimizerState(const SafetensorsFile& of, const nlohmann::json& s, Optimizer& optimizer,
                         const StateLayout& layout, const fs::path& dir) {
  const std::string type = s.at("optimizer").at("type").get<std::string>();
  if (type != optimizer.name())
    throw CheckpointError((dir / "state.json").string() + ": optimizer is " + type +
                          ", the run uses " + optimizer.name());
  const bool remap = layout.remap;
  for (auto& [name, t] : optimizer.state()) {
    // A master the writer did not keep (fp32 without ZeRO) starts from the weights.
    if (remap && name == "master" && !of.has(name)) continue;
    // Compact state: the whole state, whatever the writer's ranks. Remapped: the whole buffer
    // in the writer's layout; else exactly this run's tensor.
    const auto compact = optimizer.compactSlice(name);
    const size_t eb = of.has(name) ? stateElementBytes(of.entry(name).dtype) : 0;
    const size_t want = compact
                            ? size_t(compact->total) * size_t(kernels::dtypeBits(t->dtype()) / 8)
                        : remap ? size_t(layout.src.second) * eb
                                : static_cast<size_t>(t->bytes());
    if (!of.has(name) || (remap && !compact && eb == 0) ||
        of.entry(name).end - of.entry(name).begin != want)
      throw CheckpointError((dir / "optimizer.safetensors").string() + ": state '" + name +
                            (remap ? "' is missing or does not match the layout in state.json"
                                   : "' is missing or has the wrong size"));
    if (of.entry(name).dtype != stateDtype(t->dtype()))
      throw CheckpointError((dir / "optimizer.safetensors").string() + ": state '" + name +
                            "' is " + of.entry(name).dtype + ", the run keeps it as " +
                            stateDtype(t->dtype()) + " (different precision policy?)");
  }
}

// The model's values, through host copies (the arena may live on a device); read first so
// nothing outside the views (padding) changes. Returns the host copy the optimizer's master
// may start from.
std::vector<float> loadModelValues(const SafetensorsFile& mf, ParamArena& model,
                                   bool trainableOnly) {
  std::vector<float> params(static_cast<size_t>(model.size())), quant;
  model.valuesToHost(params.data());
  for (const auto& p : model.params()) {
    if (trainableOnly && !p.trainable()) continue;
    if (p.quantized()) {  // an NF4 model from a full checkpoint: quantized as it loads
      quant.resize(size_t(p.numel));
      mf.readF32(p.name, quant.data(), p.numel);
      model.setQuantized(p, quant.data());
    } else {
      mf.readF32(p.name, params.data() + p.offset, p.numel);
    }
  }
  model.setValuesFromHost(params.data());
  return params;
}

// One state tensor in the writer's layout, or the master from the weights when the writer kept
// none, into this rank's range [lo, hi) of the gradient space.
void loadRemappedState(const SafetensorsFile& of, const std::string& name, Tensor* t,
                       const ParamArena& model, const StateLayout& layout, int64_t lo, int64_t hi,
                       const std::vector<float>& values) {
  if (name == "master" && !of.has(name)) {
    std::vector<float> m(size_t(t->numel()), 0.f);
    for (const auto& p : model.params()) {
      if (!p.trainable()) continue;
      const int64_t a = std::max(p.gradOffset, lo), b = std::min(p.gradOffset + p.numel, hi);
      for (int64_t i = a; i < b; ++i)
        m[size_t(i - lo)] = values[size_t(p.offset + (i - p.gradOffset))];
    }
    t->copyFromHost(m.data());
    return;
  }
  const size_t eb = stateElementBytes(of.entry(name).dtype);
  const std::string_view from = of.bytes(name);
  std::vector<char> host(size_t(t->bytes()), 0);
  const auto& params = model.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamInfo& p = params[i];
    if (!p.trainable()) continue;
    const int64_t a = std::max(p.gradOffset, lo), b = std::min(p.gradOffset + p.numel, hi);
    if (b <= a) continue;
    std::memcpy(host.data() + size_t(a - lo) * eb,
                from.data() + size_t(layout.src.first[i] + (a - p.gradOffset)) * eb,
                size_t(b - a) * eb);
  }
  t->copyFromHost(host.data());
}

void loadOptimizerState(const SafetensorsFile& of, const nlohmann::json& s, Optimizer& optimizer,
                        const ParamArena& model, OptimizerShard shard, const StateLayout& layout,
                        const std::vector<float>& values) {
  // This rank's slice of a compact state (8-bit AdamW's) is one run of the whole.
  auto loadCompact = [&](const std::string& name, Tensor* t) {
    const auto c = optimizer.compactSlice(name);
    if (!c) return false;
    const size_t eb = size_t(kernels::dtypeBits(t->dtype()) / 8);
    t->copyFromHost(of.bytes(name).data() + size_t(c->offset) * eb);
    return true;
  };
  const int64_t lo = shard.sharded() ? shard.lo : 0;
  const int64_t hi = shard.sharded() ? shard.hi : model.gradSize();
  for (auto& [name, t] : optimizer.state()) {
    if (loadCompact(name, t)) continue;
    if (layout.remap)
      loadRemappedState(of, name, t, model, layout, lo, hi, values);
    else
      t->copyFromHost(of.bytes(name).data());  // size and dtype checked before
  }
  optimizer.setStepCount(s.at("optimizer").at("step_count").get<int64_t>());
  optimizer.stateLoaded();
}
}  // namespace

LoadedCheckpoint loadCheckpoint(const std::string& path, ParamArena& model, Optimizer* optimizer,
                                OptimizerShard shard) {
  profiler::ScopedRange range("checkpoint_load", profiler::SpanCategory::IO);
  fs::path dir(path);
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) dir = dir.parent_path();
  if (!fs::is_directory(dir, ec))
    throw CheckpointError("checkpoint " + path +
                          " does not exist (expected a checkpoint directory"
                          " or its state.json)");
  const fs::path statePath = dir / "state.json";
  const nlohmann::json s = readVerifiedState(dir);
  try {
    SafetensorsFile mf = readVerifiedFile(dir, s, "model.safetensors");
    SafetensorsFile of = readVerifiedFile(dir, s, "optimizer.safetensors");

    const bool trainableOnly = s.value("weights", "all") == "trainable";
    checkModelShapes(mf, model, trainableOnly, dir);
    const StateLayout layout = stateLayoutOf(s, model, shard);
    if (optimizer) checkOptimizerState(of, s, *optimizer, layout, dir);
    // All verified: load.
    const std::vector<float> values = loadModelValues(mf, model, trainableOnly);
    if (optimizer) loadOptimizerState(of, s, *optimizer, model, shard, layout, values);
    LoadedCheckpoint out;
    out.state.step = s.at("step").get<int64_t>();
    out.state.tokens = s.at("tokens").get<int64_t>();
    out.state.data = s.at("data");
    out.state.extra = s.value("extra", nlohmann::json::object());
    out.config = s.at("config");
    out.path = dir.string();
    out.checksum = s["checksum"].get<std::string>();
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(statePath.string() + " is malformed: " + e.what());
  }
}

LoadedBase loadBaseWeights(const std::string& path, ParamArena& model) {
  profiler::ScopedRange range("base_load", profiler::SpanCategory::IO);
  fs::path dir(path);
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) dir = dir.parent_path();
  if (fs::exists(dir / "config.json", ec) && !fs::exists(dir / "state.json", ec))
    throw CheckpointError(dir.string() +
                          " is a Hugging Face model folder, not a trainscope checkpoint "
                          "(HfModel.h loads those)");
  // The checkpoint's own verification (sidecar, sizes, checksums), then every shape, before
  // anything is copied.
  if (!fs::exists(dir / "state.json", ec))
    throw CheckpointError("finetune.base_checkpoint " + path +
                          " is not a checkpoint directory (no state.json)");
  const nlohmann::json s = readVerifiedState(dir);
  if (s.value("weights", "all") != "all")
    throw CheckpointError((dir / "state.json").string() +
                          " holds only trainable tensors (an adapter checkpoint); a base needs "
                          "the full model");
  const fs::path mp = dir / "model.safetensors";
  SafetensorsFile mf = readVerifiedFile(dir, s, "model.safetensors");
  LoadedBase loaded;
  loaded.checksum = s["checksum"].get<std::string>();
  using R = core::TensorRole;
  for (const auto& p : model.params()) {
    const bool adapter = p.spec.role == R::LoraA || p.spec.role == R::LoraB;
    if (!mf.has(p.name)) {
      if (adapter) continue;  // a base has no adapters: the caller initialises them
      throw CheckpointError(mp.string() + " has no tensor '" + p.name +
                            "' (a base of a different model shape or architecture?)");
    }
    const auto& e = mf.entry(p.name);
    if (e.dtype != "F32" || e.shape != p.shape)
      throw CheckpointError(mp.string() + ": tensor '" + p.name + "' has shape " +
                            nlohmann::json(e.shape).dump() + ", the model needs " +
                            nlohmann::json(p.shape).dump());
  }
  std::vector<float> params(static_cast<size_t>(model.size()));
  model.valuesToHost(params.data());
  std::vector<float> quant;
  for (const auto& p : model.params())
    if (mf.has(p.name)) {
      if (p.quantized()) {  // QLoRA: quantized as it loads
        quant.resize(size_t(p.numel));
        mf.readF32(p.name, quant.data(), p.numel);
        model.setQuantized(p, quant.data());
      } else {
        mf.readF32(p.name, params.data() + p.offset, p.numel);
      }
      loaded.tensors.push_back(p.name);
    }
  model.setValuesFromHost(params.data());
  return loaded;
}

void pruneCheckpoints(const std::string& parentDir, int keep) {
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(parentDir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step_", 0) == 0 && name.find('.') == std::string::npos)
      dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (size_t i = 0; i + keep < dirs.size(); ++i) fs::remove_all(dirs[i], ec);
}

std::vector<std::string> checkpointAttachments(const std::string& path) {
  fs::path dir(path);
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) dir = dir.parent_path();
  const nlohmann::json s = readVerifiedState(dir);
  std::vector<std::string> out;
  if (!s.contains("files") || !s["files"].is_object()) return out;
  for (const auto& [name, f] : s["files"].items()) {
    if (name == "model.safetensors" || name == "optimizer.safetensors") continue;
    if (name.find('/') != std::string::npos || name == ".." || name.empty())
      throw CheckpointError((dir / "state.json").string() + " lists a file outside it: " + name);
    verifyListedFile(dir, s, name);
    out.push_back((dir / name).string());
  }
  return out;
}

}  // namespace ts::engine
