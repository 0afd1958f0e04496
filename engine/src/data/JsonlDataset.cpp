// Instruction data (data.source jsonl): one JSON object per line, {"prompt", "completion"} (loss
// on the completion tokens and the end token only), {"text"} (loss on every token), or a
// conversation, {"messages": [{"role", "content"}...]} or ShareGPT's {"conversations": [{"from",
// "value"}...]}, rendered with the tokenizer's chat template (ChatFormatter) with the loss on
// the assistant turns only. Other keys are ignored; blank lines are skipped. Each sample is one row
// of model.seq_len positions, padded at the end (inputs 0, targets ignored) and cut at the end when
// longer: padding, not packing, so no row mixes samples and causal attention alone keeps them
// apart. The prompt is tokenized with the tokenizer's special tokens (LLaMA's <s>), the completion
// without, then the end token (eos) when the tokenizer has one: the two are tokenized separately,
// so the completion's first token never merges with the prompt's last. Every bad line is reported
// with its number (the first ten) and the run does not start. The last val_fraction of the
// samples (at least one when it is > 0) is the validation part.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include "trainscope/core/protocol/BoundedJson.h"

#include <nlohmann/json.hpp>

#include "ChatFormatter.h"
#include "trainscope/engine/data/Dataset.h"

namespace ts::engine::detail {

namespace {

struct Sample {
  std::vector<int32_t> tokens;
  size_t firstTrained = 0;       // tokens[firstTrained..] are targets; the prompt before is not
  std::vector<uint8_t> trained;  // conversations: per token, instead of firstTrained

  bool isTrained(size_t k) const { return trained.empty() ? k >= firstTrained : trained[k] != 0; }
  // The first trained token (tokens.size() when none).
  size_t firstTarget() const {
    if (trained.empty()) return firstTrained;
    const auto it = std::find(trained.begin() + 1, trained.end(), 1);
    return static_cast<size_t>(it - trained.begin());
  }
};

struct Counts {
  int64_t prompts = 0, texts = 0, chats = 0;
};

class JsonlDataset final : public Dataset {
 public:
  JsonlDataset(const core::RunConfig& config, TextTokenizer tokenizer, std::vector<Sample> samples,
               Counts counts)
      : tokenizer_(std::move(tokenizer)),
        path_(config.data.path),
        seed_(config.train.seed),
        curriculum_(config.curriculum.type),
        samples_(std::move(samples)),
        counts_(counts) {
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
      if (static_cast<int64_t>(s.firstTarget()) > T) ++untrained_;
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
                    std::to_string(counts_.prompts) + " prompt/completion, " +
                    std::to_string(counts_.texts) + " text" +
                    (counts_.chats > 0 ? ", " + std::to_string(counts_.chats) + " conversation"
                                       : std::string()) +
                    "), " + std::to_string(trainCount_) + " train / " + std::to_string(valCount_) +
                    " val, one padded sample per row";
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
      tg[t] = used && s.isTrained(static_cast<size_t>(t) + 1) ? s.tokens[t + 1] : -1;
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
  Counts counts_;
  int64_t trainCount_ = 0, valCount_ = 0, truncated_ = 0, untrained_ = 0;
  int64_t epoch_ = 0, cursor_ = 0;
  std::vector<int64_t> perm_;
  double fraction_ = 1.0;
};

// One line's sample; a problem with the line throws std::invalid_argument naming it.
class LineReader {
 public:
  LineReader(const core::RunConfig& config, TextTokenizer& tokenizer)
      : config_(config), tokenizer_(tokenizer) {}

  Sample read(const nlohmann::ordered_json& j) {
    if (!j.is_object())
      throw std::invalid_argument(
          "must be a JSON object: {\"prompt\": ..., \"completion\": ...}, {\"text\": ...} or "
          "{\"messages\": [...]}");
    const bool hasPrompt = j.contains("prompt"), hasCompletion = j.contains("completion"),
               hasText = j.contains("text"),
               hasChat = j.contains("messages") || j.contains("conversations");
    if (hasText && (hasPrompt || hasCompletion))
      throw std::invalid_argument(
          "has both \"text\" and \"prompt\"/\"completion\": allowed one form per line");
    if (hasChat && (hasText || hasPrompt || hasCompletion))
      throw std::invalid_argument(
          "has a conversation and also \"text\"/\"prompt\": allowed one form per line");
    Sample s;
    if (hasChat) {
      s = conversation(j);
    } else if (hasText) {
      s = text(j);
    } else if (hasPrompt || hasCompletion) {
      s = promptCompletion(j, hasPrompt, hasCompletion);
    } else {
      throw std::invalid_argument(
          "has neither \"text\" nor \"prompt\" and \"completion\" nor \"messages\" / "
          "\"conversations\"");
    }
    if (s.tokens.size() < 2) throw std::invalid_argument("is a single token: nothing to predict");
    return s;
  }

  Counts counts;

 private:
  static const std::string* stringField(const nlohmann::ordered_json& j, const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get_ptr<const std::string*>() : nullptr;
  }

  void appendEos(Sample& s) const {
    if (tokenizer_.eosId() >= 0) s.tokens.push_back(tokenizer_.eosId());
  }

  Sample text(const nlohmann::ordered_json& j) {
    const std::string* t = stringField(j, "text");
    if (!t || t->empty()) throw std::invalid_argument("\"text\" must be a non-empty string");
    Sample s;
    s.tokens = tokenizer_.encode(*t, true);
    s.firstTrained = 1;
    appendEos(s);
    ++counts.texts;
    return s;
  }

  Sample promptCompletion(const nlohmann::ordered_json& j, bool hasPrompt, bool hasCompletion) {
    const std::string* p = stringField(j, "prompt");
    const std::string* c = stringField(j, "completion");
    if (!hasPrompt || !hasCompletion)
      throw std::invalid_argument(std::string("has \"") + (hasPrompt ? "prompt" : "completion") +
                                  "\" but no \"" + (hasPrompt ? "completion" : "prompt") + "\"");
    if (!p) throw std::invalid_argument("\"prompt\" must be a string");
    if (!c || c->empty()) throw std::invalid_argument("\"completion\" must be a non-empty string");
    Sample s;
    s.tokens = tokenizer_.encode(*p, true);
    s.firstTrained = std::max<size_t>(1, s.tokens.size());
    const std::vector<int32_t> comp = tokenizer_.encode(*c, false);
    s.tokens.insert(s.tokens.end(), comp.begin(), comp.end());
    appendEos(s);
    ++counts.prompts;
    return s;
  }

  // The chat template's text, each turn tokenized on its own (no special tokens added: the
  // template writes them), the assistant turns' tokens trained. No end token is appended: the
  // template ends each turn itself.
  Sample conversation(const nlohmann::ordered_json& j) {
    const nlohmann::ordered_json messages = conversationMessages(j);
    const ChatFormatter& chat = formatter();
    std::vector<ChatFormatter::Turn> turns;
    try {
      turns = chat.render(messages, j.contains("tools") ? j["tools"] : nlohmann::ordered_json());
    } catch (const ChatTemplateError& e) {
      throw std::invalid_argument(std::string("the chat template cannot render it: ") + e.what());
    } catch (const std::runtime_error& e) {
      throw std::invalid_argument(e.what());
    }
    Sample s;
    for (const ChatFormatter::Turn& turn : turns) {
      const std::vector<int32_t> ids = tokenizer_.encode(turn.text, false);
      s.tokens.insert(s.tokens.end(), ids.begin(), ids.end());
      s.trained.insert(s.trained.end(), ids.size(), turn.trained ? 1 : 0);
    }
    if (s.firstTarget() >= s.tokens.size())
      throw std::invalid_argument("its assistant turns render to no token to train");
    ++counts.chats;
    return s;
  }

  const ChatFormatter& formatter() {
    if (!chat_) {
      if (tokenizer_.bytes())
        throw DatasetError("jsonl file '" + config_.data.path +
                           "' holds conversations, which need the tokenizer's chat template "
                           "(tokenizer_config.json), but the run's tokenizer is bytes: set "
                           "data.tokenizer to a tokenizer folder with a chat template");
      chat_ = ChatFormatter::forTokenizer(tokenizer_.files().front());
    }
    return *chat_;
  }

  const core::RunConfig& config_;
  TextTokenizer& tokenizer_;
  std::optional<ChatFormatter> chat_;
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
  LineReader reader(config, tokenizer);
  std::vector<Sample> samples;
  int64_t badLines = 0;
  std::string errors;
  std::string text;
  for (int64_t lineNo = 1; std::getline(in, text); ++lineNo) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    std::string why;
    try {
      samples.push_back(reader.read(core::parseBoundedJson<nlohmann::ordered_json>(text)));
    } catch (const nlohmann::json::parse_error& e) {
      why = std::string("not valid JSON (") + e.what() + ")";
    } catch (const std::invalid_argument& e) {
      why = e.what();
    }
    if (!why.empty() && ++badLines <= 10)
      errors += "\n  line " + std::to_string(lineNo) + ": " + why;
  }
  if (in.bad()) throw DatasetError("jsonl file '" + path + "' could not be read");
  if (badLines > 0)
    throw DatasetError("jsonl file '" + path + "': " + std::to_string(badLines) + " bad line" +
                       (badLines > 1 ? "s" : "") + errors +
                       (badLines > 10 ? "\n  (first 10 shown)" : ""));
  if (samples.empty()) throw DatasetError("jsonl file '" + path + "' has no samples");
  return std::make_unique<JsonlDataset>(config, std::move(tokenizer), std::move(samples),
                                        reader.counts);
}

}  // namespace ts::engine::detail
