#include "trainscope/engine/data/Dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "trainscope/engine/tokenizer/ByteTokenizer.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"

namespace ts::engine {

namespace detail {

namespace {
uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

std::string toHex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double unitFromHash(uint64_t h) {
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) {
    x += 0x9e3779b97f4a7c15ULL;
    s = mix64(x);
  }
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  // Reject the top partial block so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t v;
  do {
    v = next();
  } while (v >= limit);
  return v % n;
}

double Rng::uniform() {
  return unitFromHash(next());
}

nlohmann::json Rng::state() const {
  return nlohmann::json::array({toHex(s_[0]), toHex(s_[1]), toHex(s_[2]), toHex(s_[3])});
}

void Rng::restore(const nlohmann::json& state) {
  if (!state.is_array() || state.size() != 4)
    throw DatasetError("data state: rng must be an array of 4 hex strings");
  uint64_t s[4];
  for (size_t i = 0; i < 4; ++i) {
    if (!state[i].is_string()) throw DatasetError("data state: rng entries must be hex strings");
    const std::string h = state[i].get<std::string>();
    try {
      size_t used = 0;
      s[i] = std::stoull(h, &used, 16);
      if (used != h.size()) throw std::invalid_argument(h);
    } catch (const std::exception&) {
      throw DatasetError("data state: rng entry '" + h + "' is not a hex number");
    }
  }
  if ((s[0] | s[1] | s[2] | s[3]) == 0) throw DatasetError("data state: rng state is all zero");
  std::copy(s, s + 4, s_);
}

TextTokenizer TextTokenizer::forRun(const core::RunConfig& config) {
  TextTokenizer t;
  const std::string path = resolveTokenizerPath(config);
  if (path.empty()) return t;
  try {
    t.hf_ = std::make_shared<HfTokenizer>(HfTokenizer::load(path));
  } catch (const TokenizerError& e) {
    throw DatasetError(std::string(e.what()) + " (data.tokenizer" +
                       (config.data.tokenizer.empty() ? ": the base model's" : "") + ")");
  }
  return t;
}

std::vector<int32_t> TextTokenizer::encode(std::string_view text, bool addSpecialTokens) const {
  return hf_ ? hf_->encode(text, addSpecialTokens) : ByteTokenizer::encode(text);
}
std::string TextTokenizer::decode(const std::vector<int32_t>& tokens) const {
  return hf_ ? hf_->decode(tokens) : ByteTokenizer::decode(tokens);
}
int TextTokenizer::vocabSize() const {
  return hf_ ? hf_->vocabSize() : ByteTokenizer::kVocabSize;
}
int32_t TextTokenizer::bosId() const {
  return hf_ ? hf_->bosId() : -1;
}
int32_t TextTokenizer::eosId() const {
  return hf_ ? hf_->eosId() : -1;
}
std::string TextTokenizer::describe() const {
  return hf_ ? "tokenizer '" + hf_->path() + "' (" + hf_->describe() + ")"
             : "byte tokenizer, vocab 256";
}
std::vector<std::string> TextTokenizer::files() const {
  return hf_ ? HfTokenizer::filesOf(hf_->path()) : std::vector<std::string>{};
}

int curriculumLength(double fraction, int T) {
  const int minLen = std::min(T, 8);
  const int len = static_cast<int>(std::ceil(std::clamp(fraction, 0.0, 1.0) * T - 1e-9));
  return std::clamp(len, minLen, T);
}

}  // namespace detail

std::string resolveTokenizerPath(const core::RunConfig& config) {
  const std::string& t = config.data.tokenizer;
  if (t == "bytes") return "";
  if (!t.empty()) {
    const std::string file = HfTokenizer::findIn(t);
    std::error_code ec;
    if (file.empty() && !std::filesystem::is_regular_file(t, ec))
      throw DatasetError("data.tokenizer '" + t +
                         "' is neither a tokenizer.json nor a folder holding one: allowed \"\" "
                         "(the base model's), \"bytes\", or a tokenizer.json path");
    return file.empty() ? t : file;
  }
  return HfTokenizer::findIn(config.finetune.base_checkpoint);
}

void Dataset::nextTrainRows(int32_t* inputs, int32_t* targets, int B, int T, int first, int count) {
  std::vector<int32_t> in(size_t(B) * size_t(T)), tg(in.size());
  nextTrainBatch(in.data(), tg.data(), B, T);
  std::copy(in.begin() + size_t(first) * T, in.begin() + size_t(first + count) * T, inputs);
  std::copy(tg.begin() + size_t(first) * T, tg.begin() + size_t(first + count) * T, targets);
}

std::unique_ptr<Dataset> makeDataset(const core::RunConfig& config) {
  const core::DataConfig& d = config.data;
  if (!(d.val_fraction >= 0.0 && d.val_fraction < 1.0))
    throw DatasetError("data.val_fraction " + std::to_string(d.val_fraction) +
                       " is out of range: allowed 0 <= val_fraction < 1");
  std::unique_ptr<Dataset> ds;
  if (d.source == "synthetic") {
    if (d.task == "addition")
      ds = detail::makeAdditionDataset(config);
    else if (d.task == "grammar")
      ds = detail::makeGrammarDataset(config);
    else
      throw DatasetError("data.task '" + d.task + "' is unknown: allowed addition | grammar");
  } else if (d.source == "text") {
    ds = detail::makeTextDataset(config);
  } else if (d.source == "tokens") {
    ds = detail::makeTokenDataset(config);
  } else if (d.source == "jsonl") {
    ds = detail::makeJsonlDataset(config);
  } else {
    throw DatasetError("data.source '" + d.source +
                       "' is unknown: allowed synthetic | text | tokens | jsonl");
  }
  if (config.model.vocab != 0 && config.model.vocab < ds->vocabSize())
    throw DatasetError("model.vocab " + std::to_string(config.model.vocab) +
                       " is smaller than the data's vocabulary (" +
                       std::to_string(ds->vocabSize()) + "); use 0 to take it from the data");
  return ds;
}

}  // namespace ts::engine
