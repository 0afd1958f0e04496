// File-backed corpora: a UTF-8 text file through the run's tokenizer (the model's
// tokenizer.json, else bytes: vocab 256), or a pre-tokenized file of little-endian ids (vocab =
// model.vocab): uint16 for a vocabulary of up to 65,536 ids, uint32 above (tokenIdBytes).
// The last val_fraction of the tokens is the validation part, the rest the training part, so
// the two never overlap. Training rows are windows of T+1 tokens at stride T, visited in a
// seeded random order that is reshuffled every epoch; validation rows are the same windows
// over the validation part, in file order.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/tokenizer/ByteTokenizer.h"

namespace ts::engine {

namespace detail {

namespace {

std::string readWholeFile(const std::string& path, const char* what) {
  namespace fs = std::filesystem;
  if (path.empty())
    throw DatasetError(std::string("data.path is empty: data.source ") + what +
                       " needs the path of a file");
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw DatasetError("data.path: " + std::string(what) + " file '" + path + "' does not exist");
  if (fs::is_directory(path, ec))
    throw DatasetError("data.path: " + std::string(what) + " file '" + path +
                       "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw DatasetError("data.path: " + std::string(what) + " file '" + path + "' cannot be opened");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw DatasetError(std::string(what) + " file '" + path + "' could not be read");
  if (bytes.empty()) throw DatasetError(std::string(what) + " file '" + path + "' is empty");
  return bytes;
}

class TokenFileDataset final : public Dataset {
 public:
  TokenFileDataset(const core::RunConfig& config, std::string kind, std::vector<int32_t> tokens,
                   int vocab, TextTokenizer tokenizer = {})
      : kind_(std::move(kind)),
        tokenizer_(std::move(tokenizer)),
        path_(config.data.path),
        vocab_(vocab),
        seed_(config.train.seed),
        curriculum_(config.curriculum.type),
        tokens_(std::move(tokens)) {
    const int64_t n = static_cast<int64_t>(tokens_.size());
    const int64_t seq = config.model.seq_len + 1;
    const std::string unit = kind_ == "text" && tokenizer_.bytes() ? " tokens (bytes)" : " tokens";
    if (n < seq)
      throw DatasetError(fileWord() + " '" + path_ + "' has " + std::to_string(n) + unit +
                         ", fewer than one sequence (model.seq_len + 1 = " + std::to_string(seq) +
                         ")");
    valCount_ = static_cast<int64_t>(static_cast<double>(n) * config.data.val_fraction);
    trainCount_ = n - valCount_;
    if (valCount_ > 0 && valCount_ < seq)
      throw DatasetError(fileWord() + " '" + path_ + "': its validation part (data.val_fraction " +
                         std::to_string(config.data.val_fraction) + " of " + std::to_string(n) +
                         " = " + std::to_string(valCount_) +
                         " tokens) is shorter than one sequence (model.seq_len + 1 = " +
                         std::to_string(seq) + "); use a longer file or a larger val_fraction");
    if (trainCount_ < seq)
      throw DatasetError(
          fileWord() + " '" + path_ + "': its training part (" + std::to_string(trainCount_) +
          " tokens) is shorter than one sequence (model.seq_len + 1 = " + std::to_string(seq) +
          "); use a longer file or a smaller val_fraction");
  }

  int vocabSize() const override { return vocab_; }

  std::string describe() const override {
    const std::string how = kind_ == "text"
                                ? tokenizer_.describe()
                                : (tokenIdBytes(vocab_) == 2 ? "uint16" : "uint32") +
                                      std::string(" ids, vocab ") + std::to_string(vocab_);
    return fileWord() + " '" + path_ + "' (" + how + "): " + std::to_string(tokens_.size()) +
           " tokens, " + std::to_string(trainCount_) + " train / " + std::to_string(valCount_) +
           " val";
  }

  void nextTrainBatch(int32_t* inputs, int32_t* targets, int B, int T) override {
    nextTrainRows(inputs, targets, B, T, 0, B);
  }
  // Only the rows asked for are read from the file; the cursor advances over all B.
  void nextTrainRows(int32_t* inputs, int32_t* targets, int B, int T, int first,
                     int count) override {
    const int64_t windows = windowCount(trainCount_, T);
    if (windows <= 0)
      throw DatasetError(fileWord() + " '" + path_ + "': training part has " +
                         std::to_string(trainCount_) + " tokens, fewer than one sequence (" +
                         std::to_string(T + 1) + ")");
    if (T != permT_ || static_cast<int64_t>(perm_.size()) != windows) {
      permT_ = T;
      cursor_ = std::min<int64_t>(cursor_, windows);
      shuffle(windows);
    }
    const int len = curriculum_ != "none" ? curriculumLength(fraction_, T) : T;
    for (int r = 0; r < B; ++r) {
      if (cursor_ >= windows) {
        ++epoch_;
        cursor_ = 0;
        shuffle(windows);
      }
      const int64_t start = perm_[cursor_++] * T;
      if (r < first || r >= first + count) continue;
      int32_t* in = inputs + static_cast<size_t>(r - first) * T;
      int32_t* tg = targets + static_cast<size_t>(r - first) * T;
      for (int t = 0; t < T; ++t) {
        in[t] = t < len ? tokens_[start + t] : 0;
        tg[t] = t < len ? tokens_[start + t + 1] : -1;
      }
    }
  }

  int64_t valBatchCount(int B, int T) const override {
    if (B <= 0) return 0;
    const int64_t rows = windowCount(valCount_, T);
    if (rows <= 0) return 0;
    return (rows + B - 1) / B;  // the last batch may end in padding rows
  }

  void valBatch(int64_t index, int32_t* inputs, int32_t* targets, int B, int T) const override {
    const int64_t rows = windowCount(valCount_, T);
    for (int r = 0; r < B; ++r) {
      const int64_t row = index * B + r;
      int32_t* in = inputs + static_cast<size_t>(r) * T;
      int32_t* tg = targets + static_cast<size_t>(r) * T;
      for (int t = 0; t < T; ++t) {
        if (row < rows) {
          const int64_t p = trainCount_ + row * T + t;
          in[t] = tokens_[p];
          tg[t] = tokens_[p + 1];
        } else {
          in[t] = 0;
          tg[t] = -1;
        }
      }
    }
  }

  // Length curriculum (either curriculum type: a file has no other notion of difficulty).
  void setDifficulty(double fraction) override { fraction_ = std::clamp(fraction, 0.0, 1.0); }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    if (kind_ == "text") return tokenizer_.decode(tokens);
    std::string s;
    for (int32_t t : tokens) {
      if (!s.empty()) s.push_back(' ');
      s += std::to_string(t);
    }
    return s;
  }

  std::vector<std::string> tokenizerFiles() const override { return tokenizer_.files(); }

  nlohmann::json state() const override {
    return {{"kind", kind_}, {"epoch", epoch_},       {"cursor", cursor_},
            {"T", permT_},   {"fraction", fraction_}, {"tokens", tokens_.size()}};
  }

  void restore(const nlohmann::json& st) override {
    if (!st.is_object() || st.value("kind", "") != kind_)
      throw DatasetError("data state is not from a " + kind_ + " dataset");
    try {
      if (st.at("tokens").get<uint64_t>() != tokens_.size())
        throw DatasetError("data state was saved for a " + fileWord() + " of " +
                           st.at("tokens").dump() + " tokens, but '" + path_ + "' has " +
                           std::to_string(tokens_.size()));
      const int64_t epoch = st.at("epoch").get<int64_t>();
      const int64_t cursor = st.at("cursor").get<int64_t>();
      const int T = st.at("T").get<int>();
      if (epoch < 0 || cursor < 0) throw DatasetError("data state: negative epoch or cursor");
      epoch_ = epoch;
      permT_ = T;
      perm_.clear();
      if (T > 0) {
        const int64_t windows = windowCount(trainCount_, T);
        if (cursor > windows) throw DatasetError("data state: cursor past the epoch's end");
        shuffle(windows);
      }
      cursor_ = cursor;
      fraction_ = st.value("fraction", 1.0);
    } catch (const nlohmann::json::exception& e) {
      throw DatasetError(std::string("data state is malformed: ") + e.what());
    }
  }

 private:
  std::string fileWord() const { return kind_ == "text" ? "text file" : "token file"; }

  static int64_t windowCount(int64_t count, int T) { return T > 0 ? (count - 1) / T : 0; }

  void shuffle(int64_t windows) {
    perm_.resize(static_cast<size_t>(windows));
    for (int64_t i = 0; i < windows; ++i) perm_[i] = i;
    Rng rng(mix64(mix64(seed_ ^ 0x746f6bULL) ^ static_cast<uint64_t>(epoch_)));
    for (int64_t i = windows; i > 1; --i)
      std::swap(perm_[i - 1], perm_[rng.below(static_cast<uint64_t>(i))]);
  }

  std::string kind_;
  TextTokenizer tokenizer_;
  std::string path_;
  int vocab_;
  uint64_t seed_;
  std::string curriculum_;
  std::vector<int32_t> tokens_;
  int64_t trainCount_ = 0, valCount_ = 0;
  int64_t epoch_ = 0, cursor_ = 0;
  int permT_ = 0;
  std::vector<int64_t> perm_;
  double fraction_ = 1.0;
};

}  // namespace

std::unique_ptr<Dataset> makeTextDataset(const core::RunConfig& config) {
  TextTokenizer tokenizer = TextTokenizer::forRun(config);
  const std::string bytes = readWholeFile(config.data.path, "text");
  std::vector<int32_t> tokens = tokenizer.encode(bytes);
  const int vocab = tokenizer.vocabSize();
  return std::make_unique<TokenFileDataset>(config, "text", std::move(tokens), vocab,
                                            std::move(tokenizer));
}

std::unique_ptr<Dataset> makeTokenDataset(const core::RunConfig& config) {
  const int vocab = config.model.vocab;
  if (vocab <= 0)
    throw DatasetError(
        "data.source 'tokens' needs model.vocab: the vocabulary size of the "
        "tokenizer that wrote '" +
        config.data.path + "' (it also sets the ids' width: uint16 up to 65536, uint32 above)");
  const std::string bytes = readWholeFile(config.data.path, "token");
  std::vector<int32_t> tokens = parseTokenIds(bytes, vocab, config.data.path, "model.vocab");
  return std::make_unique<TokenFileDataset>(config, "tokens", std::move(tokens), vocab);
}

}  // namespace detail

int tokenIdBytes(int64_t vocab) {
  return vocab > 65536 ? 4 : 2;
}

std::vector<int32_t> parseTokenIds(const std::string& bytes, int64_t vocab, const std::string& path,
                                   const std::string& vocabName) {
  const size_t width = static_cast<size_t>(tokenIdBytes(vocab));
  const std::string type = width == 2 ? "uint16" : "uint32";
  if (bytes.size() % width != 0)
    throw DatasetError(
        "token file '" + path + "' has " +
        (width == 2 ? "an odd length (" + std::to_string(bytes.size()) + " bytes)"
                    : "a length of " + std::to_string(bytes.size()) + " bytes") +
        ": not a whole number of " + type + " token ids (little-endian, " + std::to_string(width) +
        " bytes each, for a vocabulary of " + (width == 2 ? "up to 65536" : "more than 65536") +
        " ids" + (vocabName.empty() ? "" : "; " + vocabName + " is " + std::to_string(vocab)) +
        ")");
  std::vector<int32_t> tokens(bytes.size() / width);
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t id = 0;
    for (size_t b = 0; b < width; ++b)
      id |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[width * i + b])) << (8 * b);
    if (id >= vocab)
      throw DatasetError("token file '" + path + "': token " + std::to_string(i) +
                         " at byte offset " + std::to_string(width * i) + " has id " +
                         std::to_string(id) + ", not below " +
                         (vocabName.empty() ? "" : vocabName + " ") + std::to_string(vocab));
    tokens[i] = static_cast<int32_t>(id);
  }
  return tokens;
}

}  // namespace ts::engine
