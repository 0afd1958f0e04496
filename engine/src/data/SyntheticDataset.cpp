// Built-in synthetic corpora: no files, everything derived from train.seed.
//
// addition: "a+b=s" with a, b uniform in [0, 10^d), both zero-padded to d digits and the sum
// written REVERSED (least significant digit first) and zero-padded to d+1 digits, then an end
// token: 123+45 with d=3 is "123+045=8610\n". Reversed sums let a small causal model emit each
// digit after the digits that produce its carry (Lee et al. 2023, "Teaching arithmetic to
// small transformers"). Targets only on the answer: the sum digits and the end token.
// A problem (a, b) is in the validation set iff a seeded hash of (a, b) falls below
// data.val_fraction, at every digit count, so train and validation never share a problem.
//
// grammar: sentences from a small probabilistic context-free grammar with subject-verb number
// agreement and prepositional phrases nested up to depth 3 ("the cats near a red fox chase
// every dog ."), one word per token, "\n" after each sentence. Targets on every token.
// Sentences are split by a seeded hash of their tokens like addition problems.
#include <algorithm>
#include <array>
#include <string>
#include <unordered_set>

#include "trainscope/engine/data/Dataset.h"

namespace ts::engine::detail {

namespace {

constexpr int kMaxTries = 1'000'000;

uint64_t splitSalt(uint64_t seed, uint64_t task) {
  return mix64(mix64(seed) ^ mix64(task));
}

// --------------------------------------------------------------------------------------------
// Addition
// --------------------------------------------------------------------------------------------
class AdditionDataset final : public Dataset {
 public:
  static constexpr int32_t kPlus = 10, kEquals = 11, kEnd = 12, kPad = 13, kVocab = 14;
  static constexpr int kValSamples = 512;

  explicit AdditionDataset(const core::RunConfig& config)
      : digits_(config.data.digits),
        curDigits_(config.data.digits),
        valFraction_(config.data.val_fraction),
        curriculum_(config.curriculum.type),
        salt_(splitSalt(config.train.seed, 0xADD)),
        rng_(mix64(config.train.seed) ^ 0x7261696eULL) {
    if (digits_ < 1 || digits_ > 18)
      throw DatasetError("data.digits " + std::to_string(digits_) +
                         " is out of range for the addition task: allowed 1..18");
    const int need = sampleLength(digits_) - 1;
    if (config.model.seq_len < need)
      throw DatasetError("model.seq_len " + std::to_string(config.model.seq_len) +
                         " is too short for data.digits " + std::to_string(digits_) +
                         ": one addition sample is " + std::to_string(need + 1) +
                         " tokens, so seq_len must be at least " + std::to_string(need));
    buildValSet();
  }

  int vocabSize() const override { return kVocab; }

  std::string describe() const override {
    return "synthetic addition (" + std::to_string(digits_) +
           " digits, reversed zero-padded sums, loss on answers), " + std::to_string(val_.size()) +
           " val samples held out (val_fraction " + std::to_string(valFraction_).substr(0, 5) +
           " of all problems)";
  }

  void nextTrainBatch(int32_t* inputs, int32_t* targets, int B, int T) override {
    checkRowFits(curDigits_, T);
    std::vector<int32_t> tok;
    std::vector<uint8_t> ans;
    for (int r = 0; r < B; ++r) {
      startRow(tok, ans, T);
      const int L = sampleLength(curDigits_);
      for (size_t pos = 0; pos + L <= tok.size(); pos += L) {
        const auto [a, b] = drawTrainProblem(curDigits_);
        writeSample(curDigits_, a, b, tok.data() + pos, ans.data() + pos);
      }
      finishRow(tok, ans, inputs + static_cast<size_t>(r) * T, targets + static_cast<size_t>(r) * T,
                T);
    }
  }

  int64_t valBatchCount(int B, int T) const override {
    if (val_.empty() || B <= 0) return 0;
    const int64_t rows = valRows(T);
    return (rows + B - 1) / B;  // the last batch may end in padding rows
  }

  void valBatch(int64_t index, int32_t* inputs, int32_t* targets, int B, int T) const override {
    checkRowFits(digits_, T);
    const int L = sampleLength(digits_);
    const int64_t perRow = (T + 1) / L;
    std::vector<int32_t> tok;
    std::vector<uint8_t> ans;
    for (int r = 0; r < B; ++r) {
      startRow(tok, ans, T);
      const int64_t row = index * B + r;
      for (int64_t k = 0; k < perRow; ++k) {
        const int64_t s = row * perRow + k;
        if (s >= static_cast<int64_t>(val_.size())) break;
        writeSample(digits_, val_[s].first, val_[s].second, tok.data() + k * L, ans.data() + k * L);
      }
      finishRow(tok, ans, inputs + static_cast<size_t>(r) * T, targets + static_cast<size_t>(r) * T,
                T);
    }
  }

  bool hasExactMatch() const override { return !val_.empty(); }

  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> exactMatchSamples(
      int count) const override {
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> out;
    const int L = sampleLength(digits_);
    std::vector<int32_t> tok(L);
    std::vector<uint8_t> ans(L);
    for (int i = 0; i < count && i < static_cast<int>(val_.size()); ++i) {
      writeSample(digits_, val_[i].first, val_[i].second, tok.data(), ans.data());
      const int promptLen = 2 * digits_ + 2;  // "a+b="
      out.emplace_back(std::vector<int32_t>(tok.begin(), tok.begin() + promptLen),
                       std::vector<int32_t>(tok.begin() + promptLen, tok.end()));
    }
    return out;
  }

  int32_t endToken() const override { return kEnd; }

  void setDifficulty(double fraction) override {
    fraction_ = std::clamp(fraction, 0.0, 1.0);
    if (curriculum_ == "none") return;
    // Both curriculum kinds turn the same knob here: fewer digits are also shorter samples.
    const int d = static_cast<int>(std::ceil(fraction_ * digits_ - 1e-9));
    curDigits_ = std::clamp(d, 1, digits_);
  }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    std::string s;
    for (int32_t t : tokens) {
      if (t >= 0 && t <= 9)
        s.push_back(static_cast<char>('0' + t));
      else if (t == kPlus)
        s.push_back('+');
      else if (t == kEquals)
        s.push_back('=');
      else if (t == kEnd)
        s.push_back('\n');
      else if (t == kPad)
        continue;
      else
        s.push_back('?');
    }
    return s;
  }

  nlohmann::json state() const override {
    return {{"kind", "addition"},
            {"rng", rng_.state()},
            {"digits", curDigits_},
            {"fraction", fraction_}};
  }

  void restore(const nlohmann::json& st) override {
    if (!st.is_object() || st.value("kind", "") != "addition")
      throw DatasetError("data state is not from an addition dataset");
    rng_.restore(st.at("rng"));
    const int d = st.value("digits", digits_);
    if (d < 1 || d > digits_)
      throw DatasetError("data state: digits " + std::to_string(d) + " outside 1.." +
                         std::to_string(digits_));
    curDigits_ = d;
    fraction_ = st.value("fraction", 1.0);
  }

 private:
  static int sampleLength(int d) { return 3 * d + 4; }  // a + b = sum(d+1) end

  static uint64_t pow10(int d) {
    uint64_t p = 1;
    for (int i = 0; i < d; ++i) p *= 10;
    return p;
  }

  bool isVal(uint64_t a, uint64_t b) const {
    return unitFromHash(mix64(salt_ ^ mix64(a * 0x100000001b3ULL + mix64(b)))) < valFraction_;
  }

  std::pair<uint64_t, uint64_t> drawTrainProblem(int d) {
    const uint64_t n = pow10(d);
    for (int i = 0; i < kMaxTries; ++i) {
      const uint64_t a = rng_.below(n), b = rng_.below(n);
      if (!isVal(a, b)) return {a, b};
    }
    throw DatasetError("addition task: no training problem found with data.digits " +
                       std::to_string(d) + " (val_fraction too large)");
  }

  void buildValSet() {
    if (valFraction_ <= 0.0) return;
    const uint64_t n = pow10(digits_);
    Rng rng(mix64(salt_ ^ 0x76616cULL));
    if (digits_ <= 3) {
      // Small problem spaces: enumerate so the set is exact and has no duplicates.
      std::vector<std::pair<uint64_t, uint64_t>> all;
      for (uint64_t a = 0; a < n; ++a)
        for (uint64_t b = 0; b < n; ++b)
          if (isVal(a, b)) all.emplace_back(a, b);
      for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[rng.below(i)]);
      if (all.size() > kValSamples) all.resize(kValSamples);
      val_ = std::move(all);
      return;
    }
    std::unordered_set<uint64_t> seen;
    for (int tries = 0; tries < kMaxTries && val_.size() < kValSamples; ++tries) {
      const uint64_t a = rng.below(n), b = rng.below(n);
      if (!isVal(a, b)) continue;
      if (!seen.insert(mix64(a) ^ b).second) continue;
      val_.emplace_back(a, b);
    }
  }

  int64_t valRows(int T) const {
    const int64_t perRow = (T + 1) / sampleLength(digits_);
    return (static_cast<int64_t>(val_.size()) + perRow - 1) / perRow;
  }

  void checkRowFits(int d, int T) const {
    if (T + 1 < sampleLength(d))
      throw DatasetError("addition task: sequence length " + std::to_string(T) +
                         " cannot hold one " + std::to_string(d) + "-digit sample (" +
                         std::to_string(sampleLength(d)) + " tokens)");
  }

  // Writes one sample's tokens and its answer mask (1 = predicted position).
  static void writeSample(int d, uint64_t a, uint64_t b, int32_t* tok, uint8_t* ans) {
    int p = 0;
    auto putPadded = [&](uint64_t v) {
      for (int i = d - 1; i >= 0; --i) {
        tok[p + i] = static_cast<int32_t>(v % 10);
        v /= 10;
      }
      p += d;
    };
    putPadded(a);
    tok[p++] = kPlus;
    putPadded(b);
    tok[p++] = kEquals;
    std::fill(ans, ans + p, 0);
    uint64_t s = a + b;
    for (int i = 0; i <= d; ++i) {  // reversed: least significant digit first
      ans[p] = 1;
      tok[p++] = static_cast<int32_t>(s % 10);
      s /= 10;
    }
    ans[p] = 1;
    tok[p++] = kEnd;
  }

  static void startRow(std::vector<int32_t>& tok, std::vector<uint8_t>& ans, int T) {
    tok.assign(static_cast<size_t>(T) + 1, kPad);
    ans.assign(static_cast<size_t>(T) + 1, 0);
  }

  // inputs = tokens[0..T), targets = tokens[1..T] where that token is part of an answer.
  static void finishRow(const std::vector<int32_t>& tok, const std::vector<uint8_t>& ans,
                        int32_t* in, int32_t* tg, int T) {
    for (int t = 0; t < T; ++t) {
      in[t] = tok[t];
      tg[t] = ans[t + 1] ? tok[t + 1] : -1;
    }
  }

  int digits_;
  int curDigits_;
  double valFraction_;
  std::string curriculum_;
  double fraction_ = 1.0;
  uint64_t salt_;
  Rng rng_;
  std::vector<std::pair<uint64_t, uint64_t>> val_;
};

// --------------------------------------------------------------------------------------------
// Grammar
// --------------------------------------------------------------------------------------------
class GrammarDataset final : public Dataset {
 public:
  static constexpr int32_t kPad = 0, kEnd = 1, kPeriod = 2;
  static constexpr int kMaxDepth = 3;
  static constexpr size_t kValTokens = 8192;

  explicit GrammarDataset(const core::RunConfig& config)
      : valFraction_(config.data.val_fraction),
        curriculum_(config.curriculum.type),
        salt_(splitSalt(config.train.seed, 0x6a4a)),
        rng_(mix64(config.train.seed) ^ 0x6772616dULL) {
    buildVocab();
    if (config.model.seq_len < 1)
      throw DatasetError("model.seq_len must be at least 1 for the grammar task");
    if (valFraction_ > 0.0) {
      Rng rng(mix64(salt_ ^ 0x76616cULL));
      std::vector<int32_t> s;
      for (int tries = 0; tries < kMaxTries && val_.size() < kValTokens; ++tries) {
        sentence(rng, kMaxDepth, s);
        if (isVal(s)) val_.insert(val_.end(), s.begin(), s.end());
      }
    }
  }

  int vocabSize() const override { return static_cast<int>(words_.size()); }

  std::string describe() const override {
    return "synthetic grammar (PCFG with agreement, " + std::to_string(words_.size()) +
           "-word vocab, phrases nested to depth " + std::to_string(kMaxDepth) + "), " +
           std::to_string(val_.size()) + " val tokens held out";
  }

  void nextTrainBatch(int32_t* inputs, int32_t* targets, int B, int T) override {
    const int len = curriculum_ == "length" ? curriculumLength(fraction_, T) : T;
    const int depth =
        curriculum_ == "difficulty"
            ? std::clamp(static_cast<int>(std::lround(fraction_ * kMaxDepth)), 0, kMaxDepth)
            : kMaxDepth;
    std::vector<int32_t> row, s;
    for (int r = 0; r < B; ++r) {
      row.clear();
      // Rows start on a sentence boundary; the last sentence is cut at the row end.
      while (row.size() < static_cast<size_t>(len) + 1) {
        drawTrainSentence(depth, s);
        row.insert(row.end(), s.begin(), s.end());
      }
      int32_t* in = inputs + static_cast<size_t>(r) * T;
      int32_t* tg = targets + static_cast<size_t>(r) * T;
      for (int t = 0; t < T; ++t) {
        in[t] = t < len ? row[t] : kPad;
        tg[t] = t < len ? row[t + 1] : -1;
      }
    }
  }

  int64_t valBatchCount(int B, int T) const override {
    if (val_.size() < static_cast<size_t>(T) + 1 || B <= 0 || T <= 0) return 0;
    const int64_t rows = (static_cast<int64_t>(val_.size()) - 1) / T;
    return (rows + B - 1) / B;  // the last batch may end in padding rows
  }

  void valBatch(int64_t index, int32_t* inputs, int32_t* targets, int B, int T) const override {
    const int64_t rows = T > 0 ? (static_cast<int64_t>(val_.size()) - 1) / T : 0;
    for (int r = 0; r < B; ++r) {
      const int64_t row = index * B + r;
      int32_t* in = inputs + static_cast<size_t>(r) * T;
      int32_t* tg = targets + static_cast<size_t>(r) * T;
      for (int t = 0; t < T; ++t) {
        const bool ok = row < rows;
        in[t] = ok ? val_[row * T + t] : kPad;
        tg[t] = ok ? val_[row * T + t + 1] : -1;
      }
    }
  }

  int32_t endToken() const override { return kEnd; }

  void setDifficulty(double fraction) override { fraction_ = std::clamp(fraction, 0.0, 1.0); }

  std::string decode(const std::vector<int32_t>& tokens) const override {
    std::string s;
    for (int32_t t : tokens) {
      if (t == kPad) continue;
      if (t == kEnd) {
        s.push_back('\n');
        continue;
      }
      if (!s.empty() && s.back() != '\n') s.push_back(' ');
      s += (t >= 0 && t < static_cast<int32_t>(words_.size())) ? words_[t] : "<?>";
    }
    return s;
  }

  nlohmann::json state() const override {
    return {{"kind", "grammar"}, {"rng", rng_.state()}, {"fraction", fraction_}};
  }

  void restore(const nlohmann::json& st) override {
    if (!st.is_object() || st.value("kind", "") != "grammar")
      throw DatasetError("data state is not from a grammar dataset");
    rng_.restore(st.at("rng"));
    fraction_ = st.value("fraction", 1.0);
  }

 private:
  // Word classes; [0] singular, [1] plural where number matters.
  struct Classes {
    std::array<std::vector<int32_t>, 2> det, noun, vt, vi;
    std::vector<int32_t> adj, prep;
  };

  int32_t word(const std::string& w) {
    auto it = std::find(words_.begin(), words_.end(), w);
    if (it != words_.end()) return static_cast<int32_t>(it - words_.begin());
    words_.push_back(w);
    return static_cast<int32_t>(words_.size() - 1);
  }

  void buildVocab() {
    words_ = {"<pad>", "\n", "."};
    auto add = [&](std::vector<int32_t>& v, std::initializer_list<const char*> ws) {
      for (const char* w : ws) v.push_back(word(w));
    };
    add(c_.det[0], {"the", "a", "every", "one"});
    add(c_.det[1], {"the", "some", "many", "two"});
    add(c_.noun[0], {"cat", "dog", "bird", "fox", "mouse", "child", "robot"});
    add(c_.noun[1], {"cats", "dogs", "birds", "foxes", "mice", "children", "robots"});
    add(c_.vt[0], {"sees", "chases", "likes", "follows", "finds"});
    add(c_.vt[1], {"see", "chase", "like", "follow", "find"});
    add(c_.vi[0], {"sleeps", "runs", "sings"});
    add(c_.vi[1], {"sleep", "run", "sing"});
    add(c_.adj, {"small", "big", "red", "quick", "lazy", "old"});
    add(c_.prep, {"with", "near", "under", "behind"});
  }

  int32_t pick(Rng& rng, const std::vector<int32_t>& v) const { return v[rng.below(v.size())]; }

  void nounPhrase(Rng& rng, int number, int depth, std::vector<int32_t>& out) const {
    out.push_back(pick(rng, c_.det[number]));
    if (rng.uniform() < 0.35) out.push_back(pick(rng, c_.adj));
    out.push_back(pick(rng, c_.noun[number]));
    if (depth > 0 && rng.uniform() < 0.35) prepPhrase(rng, depth - 1, out);
  }

  void prepPhrase(Rng& rng, int depth, std::vector<int32_t>& out) const {
    out.push_back(pick(rng, c_.prep));
    nounPhrase(rng, static_cast<int>(rng.below(2)), depth, out);
  }

  // S -> NP[n] VP[n] "." "\n"; VP -> Vt[n] NP | Vi[n] | Vi[n] PP.
  void sentence(Rng& rng, int depth, std::vector<int32_t>& out) const {
    out.clear();
    const int n = static_cast<int>(rng.below(2));
    nounPhrase(rng, n, depth, out);
    const double u = rng.uniform();
    if (u < 0.6) {
      out.push_back(pick(rng, c_.vt[n]));
      nounPhrase(rng, static_cast<int>(rng.below(2)), depth, out);
    } else {
      out.push_back(pick(rng, c_.vi[n]));
      if (depth > 0 && u >= 0.85) prepPhrase(rng, depth - 1, out);
    }
    out.push_back(kPeriod);
    out.push_back(kEnd);
  }

  bool isVal(const std::vector<int32_t>& s) const {
    uint64_t h = salt_;
    for (int32_t t : s) h = mix64(h ^ static_cast<uint64_t>(t));
    return unitFromHash(h) < valFraction_;
  }

  void drawTrainSentence(int depth, std::vector<int32_t>& s) {
    for (int i = 0; i < kMaxTries; ++i) {
      sentence(rng_, depth, s);
      if (!isVal(s)) return;
    }
    throw DatasetError("grammar task: no training sentence found (val_fraction too large)");
  }

  std::vector<std::string> words_;
  Classes c_;
  double valFraction_;
  std::string curriculum_;
  double fraction_ = 1.0;
  uint64_t salt_;
  Rng rng_;
  std::vector<int32_t> val_;
};

}  // namespace

std::unique_ptr<Dataset> makeAdditionDataset(const core::RunConfig& config) {
  return std::make_unique<AdditionDataset>(config);
}

std::unique_ptr<Dataset> makeGrammarDataset(const core::RunConfig& config) {
  return std::make_unique<GrammarDataset>(config);
}

}  // namespace ts::engine::detail
