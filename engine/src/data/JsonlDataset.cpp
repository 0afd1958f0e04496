// Instruction data (data.source jsonl): one JSON object per line, {"prompt", "completion"} (loss
// on the completion tokens and the end token only) or {"text"} (loss on every token). Other keys
// are ignored; blank lines are skipped. Each sample is one row of model.seq_len positions,
// padded at the end (inputs 0, targets ignored) and cut at the end when longer: padding, not
// packing, so no row mixes samples and causal attention alone keeps them apart. The prompt is
// tokenized with the tokenizer's special tokens (LLaMA's <s>), the completion without, then
// the end token (eos) when the tokenizer has one: the two are tokenized separately, so the
// completion's first token never merges with the prompt's last. Every bad line is reported
// with its number (the first ten) and the run does not start. The last val_fraction of the
// samples (at least one when it is > 0) is the validation part.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/engine/data/Dataset.h"

namespace ts::engine::detail {

namespace {

struct Sample {
  std::vector<int32_t> tokens;
  size_t firstTrained = 0;  // tokens[firstTrained..] are targets; the prompt before is not
};

class JsonlDataset final : public Dataset {
 public:
  JsonlDataset(const core::RunConfig& config, TextTokenizer tokenizer, std::vector<Sample> samples,
               int64_t prompts, int64_t texts)
      : tokenizer_(std::move(tokenizer)),
        path_(config.data.path),
        seed_(config.train.seed),
        curriculum_(config.curriculum.type),
        samples_(std::move(samples)),
        prompts_(prompts),
        texts_(texts) {
    const int64_t n = static_cast<int64_t>(samples_.size());
    valCount_ = static_cast<int64_t>(static_cast<double>(n) * config.data.val_fraction);
    if (config.data.val_fraction > 0 && valCount_ == 0) valCount_ = 1;
    trainCount_ = n - valCount_;
    if (trainCount_ < 1)
      throw DatasetError("jsonl file '" + path_ + "' has " + std::to_string(n) +
                         " samples: none left for training after the validation part "
                         "(data.val_fraction " +
                         std::to_string(config.data.val_fraction) +
                         "); add samples or lower val_fraction");
    const int T = config.model.seq_len;
    for (const Sample& s : samples_) {
      if (static_cast<int64_t>(s.tokens.size()) > T + 1) ++truncated_;
      if (static_cast<int64_t>(s.firstTrained) > T) ++untrained_;
    }
    if (untrained_ == n)
      throw DatasetError("jsonl file '" + path_ + "': every sample's prompt fills model.seq_len (" +
                         std::to_string(T) +
                         ") tokens, so no completion token is trained; "
                         "use a longer model.seq_len or shorter prompts");
  }

  int vocabSize() const override { return tokenizer_.vocabSize(); }

  std::string describe() const override {
    std::string s = "jsonl file '" + path_ + "' (" + tokenizer_.describe() +
                    "): " + std::to_string(samples_.size()) + " samples (" +
                    std::to_string(prompts_) + " prompt/completion, " + std::to_string(texts_) +
                    " text), " + std::to_string(trainCount_) + " train / " +
                    std::to_string(valCount_) + " val, one padded sample per row";
    if (truncated_ > 0) s += ", " + std::to_string(truncated_) + " cut at model.seq_len";
    if (untrained_ > 0)
      s += ", " + std::to_string(untrained_) + " whose prompt fills the row (nothing trained)";
    return s;
  }

  void nextTrainBatch(int32_t* inputs, int32_t* targets, int B, int T) override {
    if (static_cast<int64_t>(perm_.size()) != trainCount_) {
      cursor_ = std::min<int64_t>(cursor_, trainCount_);
      shuffle();
    }
    const int len = curriculum_ != "none" ? curriculumLength(fraction_, T) : T;
    for (int r = 0; r < B; ++r) {
      if (cursor_ >= trainCount_) {
        ++epoch_;
        cursor_ = 0;
        shuffle();
      }
      fillRow(samples_[perm_[cursor_++]], inputs + static_cast<size_t>(r) * T,
              targets + static_cast<size_t>(r) * T, T, len);
    }
  }

  int64_t valBatchCount(int B, int T) const override {
    (void)T;
    if (B <= 0 || valCount_ == 0) return 0;
    return (valCount_ + B - 1) / B;
  }

  void valBatch(int64_t index, int32_t* inputs, int32_t* targets, int B, int T) const override {
    for (int r = 0; r < B; ++r) {
      const int64_t row = index * B + r;
      int32_t* in = inputs + static_cast<size_t>(r) * T;
      int32_t* tg = targets + static_cast<size_t>(r) * T;
      if (row < valCount_) {
        fillRow(samples_[trainCount_ + row], in, tg, T, T);
      } else {
        std::fill(in, in + T, 0);
        std::fill(tg, tg + T, -1);
      }
    }
  }

  void setDifficulty(double fraction) override { fraction_ = std::clamp(fraction, 0.0, 1.0); }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    return tokenizer_.decode(tokens);
  }

  std::vector<std::string> tokenizerFiles() const override { return tokenizer_.files(); }

  nlohmann::json state() const override {
    return {{"kind", "jsonl"},
            {"epoch", epoch_},
            {"cursor", cursor_},
            {"fraction", fraction_},
            {"samples", samples_.size()}};
  }

  void restore(const nlohmann::json& st) override {
    if (!st.is_object() || st.value("kind", "") != "jsonl")
      throw DatasetError("data state is not from a jsonl dataset");
    try {
      if (st.at("samples").get<uint64_t>() != samples_.size())
        throw DatasetError("data state was saved for a jsonl file of " + st.at("samples").dump() +
                           " samples, but '" + path_ + "' has " + std::to_string(samples_.size()));
      const int64_t epoch = st.at("epoch").get<int64_t>();
      const int64_t cursor = st.at("cursor").get<int64_t>();
      if (epoch < 0 || cursor < 0 || cursor > trainCount_)
        throw DatasetError("data state: epoch or cursor out of range");
      epoch_ = epoch;
      shuffle();
      cursor_ = cursor;
      fraction_ = st.value("fraction", 1.0);
    } catch (const nlohmann::json::exception& e) {
      throw DatasetError(std::string("data state is malformed: ") + e.what());
    }
  }

 private:
  // Row = the sample's first `len` inputs; target t is token t+1 when it is trained.
  static void fillRow(const Sample& s, int32_t* in, int32_t* tg, int T, int len) {
    const int n = static_cast<int>(std::min<size_t>(s.tokens.size(), static_cast<size_t>(T) + 1));
    for (int t = 0; t < T; ++t) {
      const bool used = t < len && t + 1 < n;
      in[t] = t < n && t < len ? s.tokens[t] : 0;
      tg[t] = used && static_cast<size_t>(t + 1) >= s.firstTrained ? s.tokens[t + 1] : -1;
    }
  }

  void shuffle() {
    perm_.resize(static_cast<size_t>(trainCount_));
    for (int64_t i = 0; i < trainCount_; ++i) perm_[i] = i;
    Rng rng(mix64(mix64(seed_ ^ 0x6a736f6eULL) ^ static_cast<uint64_t>(epoch_)));
    for (int64_t i = trainCount_; i > 1; --i)
      std::swap(perm_[i - 1], perm_[rng.below(static_cast<uint64_t>(i))]);
  }

  TextTokenizer tokenizer_;
  std::string path_;
  uint64_t seed_;
  std::string curriculum_;
  std::vector<Sample> samples_;
  int64_t prompts_ = 0, texts_ = 0;
  int64_t trainCount_ = 0, valCount_ = 0, truncated_ = 0, untrained_ = 0;
  int64_t epoch_ = 0, cursor_ = 0;
  std::vector<int64_t> perm_;
  double fraction_ = 1.0;
};

}  // namespace

std::unique_ptr<Dataset> makeJsonlDataset(const core::RunConfig& config) {
  namespace fs = std::filesystem;
  const std::string& path = config.data.path;
  if (path.empty())
    throw DatasetError("data.path is empty: data.source jsonl needs the path of a .jsonl file");
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw DatasetError("data.path: jsonl file '" + path + "' does not exist");
  if (fs::is_directory(path, ec))
    throw DatasetError("data.path: jsonl file '" + path + "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DatasetError("data.path: jsonl file '" + path + "' cannot be opened");

  TextTokenizer tokenizer = TextTokenizer::forRun(config);
  const int32_t eos = tokenizer.eosId();
  std::vector<Sample> samples;
  int64_t prompts = 0, texts = 0, badLines = 0;
  std::string errors;
  auto bad = [&](int64_t line, const std::string& why) {
    if (++badLines <= 10) errors += "\n  line " + std::to_string(line) + ": " + why;
  };
  auto stringField = [](const nlohmann::json& j, const char* key) -> const std::string* {
    return j.contains(key) && j[key].is_string() ? j[key].get_ptr<const std::string*>() : nullptr;
  };
  std::string text;
  for (int64_t lineNo = 1; std::getline(in, text); ++lineNo) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      bad(lineNo, std::string("not valid JSON (") + e.what() + ")");
      continue;
    }
    if (!j.is_object()) {
      bad(lineNo,
          "must be a JSON object: {\"prompt\": ..., \"completion\": ...} or {\"text\": ...}");
      continue;
    }
    const bool hasPrompt = j.contains("prompt"), hasCompletion = j.contains("completion"),
               hasText = j.contains("text");
    Sample s;
    if (hasText && (hasPrompt || hasCompletion)) {
      bad(lineNo, "has both \"text\" and \"prompt\"/\"completion\": allowed one form per line");
      continue;
    }
    if (hasText) {
      const std::string* t = stringField(j, "text");
      if (!t || t->empty()) {
        bad(lineNo, "\"text\" must be a non-empty string");
        continue;
      }
      s.tokens = tokenizer.encode(*t, true);
      s.firstTrained = 1;
      ++texts;
    } else if (hasPrompt || hasCompletion) {
      const std::string* p = stringField(j, "prompt");
      const std::string* c = stringField(j, "completion");
      if (!hasPrompt || !hasCompletion) {
        bad(lineNo, std::string("has \"") + (hasPrompt ? "prompt" : "completion") + "\" but no \"" +
                        (hasPrompt ? "completion" : "prompt") + "\"");
        continue;
      }
      if (!p) {
        bad(lineNo, "\"prompt\" must be a string");
        continue;
      }
      if (!c || c->empty()) {
        bad(lineNo, "\"completion\" must be a non-empty string");
        continue;
      }
      s.tokens = tokenizer.encode(*p, true);
      s.firstTrained = std::max<size_t>(1, s.tokens.size());
      const std::vector<int32_t> comp = tokenizer.encode(*c, false);
      s.tokens.insert(s.tokens.end(), comp.begin(), comp.end());
      ++prompts;
    } else {
      bad(lineNo, "has neither \"text\" nor \"prompt\" and \"completion\"");
      continue;
    }
    if (eos >= 0) s.tokens.push_back(eos);
    if (s.tokens.size() < 2) {
      bad(lineNo, "is a single token: nothing to predict");
      continue;
    }
    samples.push_back(std::move(s));
  }
  if (in.bad()) throw DatasetError("jsonl file '" + path + "' could not be read");
  if (badLines > 0)
    throw DatasetError("jsonl file '" + path + "': " + std::to_string(badLines) + " bad line" +
                       (badLines > 1 ? "s" : "") + errors +
                       (badLines > 10 ? "\n  (first 10 shown)" : ""));
  if (samples.empty()) throw DatasetError("jsonl file '" + path + "' has no samples");
  return std::make_unique<JsonlDataset>(config, std::move(tokenizer), std::move(samples), prompts,
                                        texts);
}

}  // namespace ts::engine::detail
